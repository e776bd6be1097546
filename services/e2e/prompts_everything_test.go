package e2e

// The messages of a real server's argument-less prompt, pinned
// (docs/adr/0017): @modelcontextprotocol/server-everything lists
// "simple-prompt", which declares no arguments, so the proxy gets it on
// its own account in every session and publishes its messages. Two
// sessions (two proxies on stdio, each its own server process, each with
// a TypeScript SDK agent) must publish the same surface: no false alarm,
// and an agent's get of the prompt is served in both.

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestPromptMessagesEverythingTwoSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service commands, the proxy and a real MCP server and clients")
	}
	env := startAdvEnv(t)
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	ct := &caseT{name: t.Name()}
	x := &advRun{caseT: ct, env: env, serverID: "prompts-everything", c: advCase{transport: advStdio, client: "ts"}}
	ct.run(func() {
		bin := env.peers.bin(t, "@modelcontextprotocol/server-everything")
		x.ep = agentEndpoint{Transport: "stdio",
			Command: []string{x.env.bin + "/proxy", "--server-id", x.serverID, "--proxy-id", "adv-" + x.serverID,
				"--outbox-dir", x.TempDir(), "--first-sight-wait", "3s", "--", "node", bin, "stdio"},
			Env: []string{"MCPDRIFT_NATS_URL=" + x.env.natsURL, "MCPDRIFT_LOG_LEVEL=error"}}
		served := func(a advAgent, session string) {
			var got string
			var err error
			deadline := time.Now().Add(30 * time.Second)
			for {
				if got, err = a.getPrompt("simple-prompt"); err == nil && strings.Contains(got, "This is a simple prompt without arguments.") {
					x.Logf("%s: the prompt's messages served: %.160s", session, got)
					return
				}
				if time.Now().After(deadline) {
					var out string
					for k := range x.statuses() {
						o, _ := x.driftctl("diff", "--live", "--variant", k[strings.LastIndex(k, ".")+1:], "default", x.serverID)
						out += o
					}
					out2, _ := x.driftctl("show", "default", x.serverID)
					out += out2
					x.Fatalf("%s: the approved prompt messages were never served: %.300s %v (statuses %v)\n%s", session, got, err, x.statuses(), out)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		// Session 1, TypeScript agent: trust on first use makes the
		// surface, the messages included, the baseline.
		x.a = x.agent("ts")
		x.connect(x.a)
		served(x.a, "session 1")
		st := x.statuses()
		// Session 2, another proxy and server process (and the same client,
		// so the same variant: server-everything lists other tools to a
		// client of other capabilities): the same surface, so the get is
		// served (its answer hashes to the approved item) and nothing
		// drifts.
		b := x.agent("ts")
		x.connect(b)
		served(b, "session 2")
		after := x.statuses()
		if len(after) != 1 || len(st) != 1 {
			x.Errorf("variants: %v after session 1, %v after session 2; want one", st, after)
		}
		for k, s := range after {
			if s != "verified" {
				x.Errorf("%s is %s after the second session, want verified (a false alarm)", k, s)
			}
		}
	})
	ct.report(t)
}
