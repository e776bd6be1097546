package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const policyAdminToken = "e2e-policy-admin-0123456789"

// policyDoc is the policy of TestPolicyEnforcement: one rule per action on
// the mcptest server's tool "read", chosen by the path argument.
const policyDoc = `rules:
  - id: no-secrets
    tenant: default
    server: files
    tool: read
    args: [{path: $.path, op: contains, value: secret}]
    action: deny
    reason: reading secrets is not allowed
  - id: redact-token
    tenant: default
    server: files
    tool: read
    args: [{path: $.path, op: eq, value: /tmp/tok}]
    action: sanitize
    redact: [$.token]
  - id: audit-logs
    tenant: default
    tool: read
    args: [{path: $.path, op: contains, value: /var/log}]
    action: audit
  - id: hold-etc
    tenant: default
    tool: read
    args: [{path: $.path, op: contains, value: /etc}]
    action: pending_approval
    reason: reading /etc needs a human
  - id: shadow-home
    tenant: default
    tool: read
    args: [{path: $.path, op: contains, value: /home}]
    action: deny
    shadow: true
`

// policyEnv is the pipeline of the policy tests: NATS, the fingerprint,
// drift and audit commands, ClickHouse, and the drift service's admin API.
type policyEnv struct {
	bus      *natstest.Bus
	natsURL  string
	adminURL string
	db       string
	ch       clickhouse.Conn
}

func startPolicyEnv(t *testing.T) *policyEnv {
	t.Helper()
	ch := chtest.Shared(t)
	e := &policyEnv{bus: natstest.StartBus(t), db: ch.Database(t)}
	e.natsURL = e.bus.Server.ClientURL()
	admin := "127.0.0.1:" + freePort(t)
	e.adminURL = "http://" + admin
	env := []string{"MCPDRIFT_NATS_URL=" + e.natsURL, "MCPDRIFT_LOG_LEVEL=info"}
	runService(t, "fingerprint", env...)
	runService(t, "drift", append(env, "MCPDRIFT_ADMIN_ADDR="+admin, "MCPDRIFT_ADMIN_TOKENS=alice:write:"+policyAdminToken)...)
	runService(t, "audit", append(env, "MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr, "MCPDRIFT_AUDIT_DATABASE="+e.db, "MCPDRIFT_AUDIT_BATCH_AGE=200ms")...)
	conn, err := clickhouse.Open(ch.Options(e.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.ch = conn
	return e
}

// admin calls the admin API and returns the status and body.
func (e *policyEnv) admin(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.adminURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+policyAdminToken)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// applyPolicy applies doc through PUT /v1/policy.
func (e *policyEnv) applyPolicy(t *testing.T, doc string) {
	t.Helper()
	poll.Eventually(t, wait, func() error { // the admin API may still be starting
		code, body := e.admin(t, http.MethodPut, "/v1/policy", doc)
		return awaiting(code == http.StatusOK, "PUT /v1/policy applies the document", fmt.Sprint(code, " ", body))
	})
}

// pendingID waits for a pending approval request of rule hold-etc whose
// arguments contain args, and returns its id.
func (e *policyEnv) pendingID(t *testing.T, args string) string {
	t.Helper()
	return e.pendingIDOf(t, args, "hold-etc")
}

// pendingIDOf is pendingID for rule.
func (e *policyEnv) pendingIDOf(t *testing.T, args, rule string) string {
	t.Helper()
	var id string
	poll.Eventually(t, wait, func() error {
		code, body := e.admin(t, http.MethodGet, "/v1/approvals", "")
		var got struct{ Pending []approval.Show }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			return awaiting(false, "GET /v1/approvals", body)
		}
		for _, p := range got.Pending {
			if strings.Contains(string(p.Arguments), args) && p.Rule == rule && p.State == approval.Pending {
				id = p.ID
				return nil
			}
		}
		return awaiting(false, "a pending request for "+args, body)
	})
	return id
}

// startPolicyProxy runs a stdio proxy in front of the mcptest server with
// its own outbox directory (the status and policy copies).
func startPolicyProxy(t *testing.T, natsURL, id, outbox string, extra ...string) *agent {
	t.Helper()
	args := append([]string{"--server-id", "files", "--proxy-id", id, "--outbox-dir", outbox, "--first-sight-wait", "5s"}, extra...)
	cmd := exec.Command(filepath.Join(build(t), "proxy"), append(args, "--", os.Args[0])...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+natsURL, mcptest.Env+"=1")
	a := runAgent(t, cmd, id)
	a.init()
	if _, err := fmt.Fprintln(a.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/ready"}}`)
		return awaiting(!strings.Contains(got, `"isError":true`), "proxy "+id+" serves read", got)
	})
	return a
}

// send writes a request without waiting for its answer (a held call).
func (a *agent) send(id, method, params string) {
	a.t.Helper()
	if _, err := fmt.Fprintf(a.in, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`+"\n", id, method, params); err != nil {
		a.t.Fatal(err)
	}
}

// answer waits for the answer with id, skipping notifications and the
// answers to other ids (so call only while no other request whose answer
// matters is outstanding).
func (a *agent) answer(id string) string {
	a.t.Helper()
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				a.t.Fatal("the proxy closed its output")
			}
			if strings.Contains(l, `"id":`+id+`,`) {
				return l
			}
		case <-time.After(wait):
			a.t.Fatalf("no answer to request %s within %s", id, wait)
		}
	}
}

// refusal reads a tool result: its text, and the code of a refusal ("" for
// a result that is not an error).
func refusal(t *testing.T, line string) (text, code string) {
	t.Helper()
	var m struct {
		Result struct {
			Content []struct{ Text string }
			IsError bool
			Meta    map[string]json.RawMessage `json:"_meta"`
		}
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil || len(m.Result.Content) == 0 {
		t.Fatalf("not a tool result: %s", line)
	}
	text = m.Result.Content[0].Text
	if m.Result.IsError {
		_ = json.Unmarshal(m.Result.Meta["mcpdrift/code"], &code)
		if code == "" {
			code = "?"
		}
	}
	return text, code
}

// received is what the mcptest server says it received as arguments.
func received(t *testing.T, line string) string {
	t.Helper()
	var m struct {
		Result struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not a result: %s", line)
	}
	return string(m.Result.Meta["mcptest/arguments"])
}

// TestPolicyEnforcement runs the per-call policy on the real pipeline: a
// policy applied through the admin API reaches two running proxies; every
// action is enforced on tools/call (the sanitized arguments proven by what
// the upstream received); shadow rules are recorded and not enforced; held
// calls are approved, denied and time out; every decision is a row in
// ClickHouse; and the rules survive a NATS outage and a restart without
// NATS, from the proxy's policy copy.
func TestPolicyEnforcement(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	e := startPolicyEnv(t)
	outboxB := t.TempDir()
	a := startPolicyProxy(t, e.natsURL, "node-a", t.TempDir(), "--approval-wait", "30s")
	b := startPolicyProxy(t, e.natsURL, "node-b", outboxB)
	// A proxy whose held calls wait one second: the timeout.
	c := startPolicyProxy(t, e.natsURL, "node-c", t.TempDir(), "--approval-wait", "1s")

	e.applyPolicy(t, policyDoc)
	poll.Eventually(t, wait, func() error {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/srv/secret.txt"}}`)
		return awaiting(strings.Contains(got, `"isError":true`), "proxy a enforces the policy", got)
	})

	t.Run("deny", func(t *testing.T) {
		text, code := refusal(t, a.call("tools/call", `{"name":"read","arguments":{"path":"/srv/secret.txt"}}`))
		if code != "policy_deny" || text != "policy deny: reading secrets is not allowed" {
			t.Errorf("deny: %q %q", code, text)
		}
	})
	t.Run("allow", func(t *testing.T) {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x"}}`)
		if _, code := refusal(t, got); code != "" || received(t, got) != `{"path":"/tmp/x"}` {
			t.Errorf("allow: %s", got)
		}
	})
	t.Run("audit", func(t *testing.T) {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/var/log/syslog"}}`)
		if _, code := refusal(t, got); code != "" || received(t, got) != `{"path":"/var/log/syslog"}` {
			t.Errorf("audit: %s", got)
		}
	})
	t.Run("sanitize", func(t *testing.T) {
		// The id and every byte around the arguments stay as written.
		got := a.call("tools/call", `{"name":"read", "arguments":{"path":"/tmp/tok","token":"hunter2-secret-value","n":1},"_meta":{"k":"v"}}`)
		if _, code := refusal(t, got); code != "" {
			t.Fatalf("sanitize refused the call: %s", got)
		}
		up := received(t, got)
		if strings.Contains(up, "hunter2") || !strings.Contains(up, `"token":"[redacted by mcpdrift policy]"`) || !strings.Contains(up, `"path":"/tmp/tok"`) || !strings.Contains(up, `"n":1`) {
			t.Errorf("the upstream received %s", up)
		}
	})
	t.Run("case_variants", func(t *testing.T) {
		// A server that reads names case-insensitively (Go's encoding/json
		// into a struct) reads PATH as path, and of path and Path the last:
		// the rules read them as it would, or deny what is ambiguous.
		if _, code := refusal(t, a.call("tools/call", `{"name":"read","arguments":{"PATH":"/srv/secret.txt"}}`)); code != "policy_deny" {
			t.Errorf("PATH: %q, want policy_deny", code)
		}
		if _, code := refusal(t, a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x","Path":"/srv/secret.txt"}}`)); code != "policy_unreadable_arguments" {
			t.Errorf("path and Path: %q, want policy_unreadable_arguments", code)
		}
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/tok","Token":"hunter2-secret-value"}}`)
		if up := received(t, got); strings.Contains(up, "hunter2") {
			t.Errorf("a Token the sanitize rule names as token reached the upstream: %s", up)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/home/me"}}`)
		if _, code := refusal(t, got); code != "" {
			t.Errorf("a shadow deny rule was enforced: %s", got)
		}
	})
	t.Run("second_proxy", func(t *testing.T) {
		if _, code := refusal(t, b.call("tools/call", `{"name":"read","arguments":{"path":"/srv/secret.txt"}}`)); code != "policy_deny" {
			t.Errorf("proxy b, running before the policy was applied, does not enforce it: %q", code)
		}
	})
	t.Run("approved", func(t *testing.T) {
		a.send("900", "tools/call", `{"name":"read","arguments":{"path":"/etc/approve-me"}}`)
		id := e.pendingID(t, "/etc/approve-me")
		// Held: the session's other calls go on meanwhile.
		if got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/while-held"}}`); strings.Contains(got, `"isError":true`) {
			t.Fatalf("a call while another is held: %s", got)
		}
		if code, body := e.admin(t, http.MethodPost, "/v1/approvals/"+id+"/approve", `{"reason":"looked at it"}`); code != http.StatusOK {
			t.Fatalf("approve: %d %s", code, body)
		}
		got := a.answer("900")
		if _, code := refusal(t, got); code != "" || received(t, got) != `{"path":"/etc/approve-me"}` {
			t.Errorf("the approved call: %s", got)
		}
		if code, body := e.admin(t, http.MethodPost, "/v1/approvals/"+id+"/deny", ""); code != http.StatusConflict || !strings.Contains(body, "approval_resolved") {
			t.Errorf("resolving it again: %d %s", code, body)
		}
	})
	t.Run("denied", func(t *testing.T) {
		a.send("901", "tools/call", `{"name":"read","arguments":{"path":"/etc/deny-me"}}`)
		id := e.pendingID(t, "/etc/deny-me")
		if code, body := e.admin(t, http.MethodPost, "/v1/approvals/"+id+"/deny", `{"reason":"not today"}`); code != http.StatusOK {
			t.Fatalf("deny: %d %s", code, body)
		}
		text, code := refusal(t, a.answer("901"))
		if code != "policy_approval_denied" || !strings.HasPrefix(text, "policy deny: reading /etc needs a human") || !strings.Contains(text, "alice denied it: not today") {
			t.Errorf("the denied call: %q %q", code, text)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		text, code := refusal(t, c.call("tools/call", `{"name":"read","arguments":{"path":"/etc/nobody-answers"}}`))
		if code != "policy_approval_timeout" || !strings.HasPrefix(text, "policy deny: ") {
			t.Errorf("the call nobody resolved: %q %q", code, text)
		}
	})
	t.Run("audit_rows", func(t *testing.T) {
		for _, w := range []struct{ what, where string }{
			{"the denial", `policy_rule = 'no-secrets' AND policy_action = 'deny' AND outcome = 'refused' AND refusal_code = 'policy_deny'`},
			{"the sanitized call", `policy_rule = 'redact-token' AND policy_action = 'sanitize' AND outcome = 'forwarded'`},
			{"the audited call", `policy_rule = 'audit-logs' AND policy_action = 'audit' AND outcome = 'forwarded'`},
			{"the shadow match", `shadow_rule = 'shadow-home' AND shadow_action = 'deny' AND policy_action = 'allow' AND outcome = 'forwarded'`},
			{"the approved call", `approval_outcome = 'approved' AND approval_actor = 'alice' AND approval_id != '' AND outcome = 'forwarded'`},
			{"the denied call", `approval_outcome = 'denied' AND approval_actor = 'alice' AND refusal_code = 'policy_approval_denied'`},
			{"the call that timed out", `approval_outcome = 'timeout' AND refusal_code = 'policy_approval_timeout' AND proxy = 'node-c'`},
		} {
			poll.Eventually(t, wait, func() error {
				var n uint64
				err := e.ch.QueryRow(context.Background(), "SELECT count() FROM "+e.db+".call_observations WHERE "+w.where).Scan(&n)
				return awaiting(err == nil && n > 0, w.what+" in ClickHouse", fmt.Sprint(n, err))
			})
		}
	})

	// A second version, applied while both proxies run: proxy b enforces it
	// without a restart; then NATS goes away and b keeps enforcing it, and
	// restarted without NATS it enforces it from its policy copy.
	e.applyPolicy(t, strings.Replace(policyDoc, "value: secret", "value: /v2-only", 1))
	poll.Eventually(t, wait, func() error {
		got := b.call("tools/call", `{"name":"read","arguments":{"path":"/v2-only"}}`)
		return awaiting(strings.Contains(got, `"policy_deny"`), "proxy b enforces version 2", got)
	})
	if _, code := refusal(t, b.call("tools/call", `{"name":"read","arguments":{"path":"/srv/secret.txt"}}`)); code != "" {
		t.Errorf("proxy b still enforces the rule version 2 replaced: %q", code)
	}
	poll.Eventually(t, wait, func() error {
		_, err := os.Stat(filepath.Join(outboxB, "policy", "default.policy"))
		return err
	})
	e.bus.Server.Stop()
	t.Run("nats_outage", func(t *testing.T) {
		if _, code := refusal(t, b.call("tools/call", `{"name":"read","arguments":{"path":"/v2-only"}}`)); code != "policy_deny" {
			t.Errorf("NATS down, proxy b forgot the rules: %q", code)
		}
	})
	t.Run("restart_without_nats", func(t *testing.T) {
		b.stop()
		args := []string{"--server-id", "files", "--proxy-id", "node-b", "--outbox-dir", outboxB, "--first-sight-wait", "2s"}
		cmd := exec.Command(filepath.Join(build(t), "proxy"), append(args, "--", os.Args[0])...)
		cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+e.natsURL, mcptest.Env+"=1")
		r := runAgent(t, cmd, "node-b")
		r.init()
		if _, code := refusal(t, r.call("tools/call", `{"name":"read","arguments":{"path":"/v2-only"}}`)); code != "policy_deny" {
			t.Errorf("restarted without NATS, proxy b does not enforce the rules from its copy: %q", code)
		}
		if got := r.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/fine"}}`); strings.Contains(got, `"isError":true`) {
			t.Errorf("restarted without NATS, an allowed call: %s", got)
		}
	})
}

// TestPolicyUnknownFailsClosed: a proxy that has never known its tenant's
// policy (NATS unreachable since it started, no copy on disk) refuses every
// call with policy_unknown.
func TestPolicyUnknownFailsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	p := startPipeline(t)
	outbox := t.TempDir()
	url := p.nc.ConnectedUrl()
	// A first run with policy off builds the status copy only.
	first := startPolicyProxy(t, url, "node-u", outbox, "--policy", "off")
	poll.Eventually(t, wait, func() error {
		return copySays(filepath.Join(outbox, "status", "default.files.copy"), `"status":"verified"`)
	})
	first.stop()
	if _, err := os.Stat(filepath.Join(outbox, "policy")); !os.IsNotExist(err) {
		t.Fatalf("a proxy with --policy off kept a policy copy: %v", err)
	}
	p.srv.Stop()
	args := []string{"--server-id", "files", "--proxy-id", "node-u", "--outbox-dir", outbox, "--first-sight-wait", "2s"}
	cmd := exec.Command(filepath.Join(build(t), "proxy"), append(args, "--", os.Args[0])...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+url, mcptest.Env+"=1")
	r := runAgent(t, cmd, "node-u")
	r.init()
	got := r.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x"}}`)
	if _, code := refusal(t, got); code != "policy_unknown" {
		t.Errorf("a proxy that never knew its policy: %s", got)
	}
	if !bytes.Contains([]byte(got), []byte("policy deny: ")) {
		t.Errorf("the refusal's text: %s", got)
	}
}

// TestPolicyOverHTTP: the policy on Streamable HTTP, through the proxy
// command in front of a Go SDK server: sanitize (what the echo tool echoes
// is what the server received), deny, and a held call whose POST waits
// while the session's other calls go on, then approved.
func TestPolicyOverHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	e := startPolicyEnv(t)
	_, upURL := httpUpstream(t, nil)
	base := runHTTPProxy(t, "http-1", "--nats-url", e.natsURL, "--upstream", "web="+upURL)
	cs := httpClient(t, base+"/web/mcp", "2025-11-25")
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(cs, "ready")
		return awaiting(!isErr && got == "ready", "the HTTP proxy serves echo", got)
	})
	e.applyPolicy(t, `rules:
  - {id: no-secrets, tenant: default, server: web, tool: echo, args: [{path: $.text, op: contains, value: secret}], action: deny, reason: no secrets over http}
  - {id: redact, tenant: default, server: web, tool: echo, args: [{path: $.text, op: contains, value: token=}], action: sanitize, redact: [$.text]}
  - {id: hold, tenant: default, server: web, tool: echo, args: [{path: $.text, op: contains, value: /etc}], action: pending_approval}
`)
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(cs, "a secret")
		return awaiting(isErr && strings.Contains(got, "policy deny: no secrets over http"), "the HTTP proxy denies", got)
	})
	if got, isErr := echo(cs, "token=hunter2"); isErr || got != policy.Redacted {
		t.Errorf("sanitized over HTTP, the server echoed %q (error %v)", got, isErr)
	}
	held := make(chan string, 1)
	go func() {
		got, _ := echo(cs, "/etc/passwd please")
		held <- got
	}()
	id := e.pendingIDOf(t, "/etc/passwd please", "hold")
	if got, isErr := echo(cs, "meanwhile"); isErr || got != "meanwhile" {
		t.Errorf("a call while another is held: %q %v", got, isErr)
	}
	if code, body := e.admin(t, http.MethodPost, "/v1/approvals/"+id+"/approve", ""); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	select {
	case got := <-held:
		if got != "/etc/passwd please" {
			t.Errorf("the approved call: %q", got)
		}
	case <-time.After(wait):
		t.Fatal("the approved call did not return")
	}
}

// TestPolicyMatchesAgent: a rule names the agent that the proxy's edge
// authenticated; the same call by another agent passes.
func TestPolicyMatchesAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	e := startPolicyEnv(t)
	_, upURL := httpUpstream(t, nil)
	tokens := filepath.Join(t.TempDir(), "agents")
	if err := os.WriteFile(tokens, []byte("alice:"+aliceToken+"\nbob:"+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := runHTTPProxy(t, "agents-policy", "--nats-url", e.natsURL, "--upstream", "web="+upURL, "--agent-tokens-file", tokens)
	as := func(token string) *mcp.ClientSession {
		cs, err := connectAs(base+"/web/mcp", map[string]string{"Authorization": "Bearer " + token}, nil)
		if err != nil {
			t.Fatalf("connecting: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	alice, bob := as(aliceToken), as(bobToken)
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(bob, "ready")
		return awaiting(!isErr && got == "ready", "the HTTP proxy serves echo", got)
	})
	e.applyPolicy(t, `rules:
  - {id: no-bob, tenant: default, server: web, tool: echo, agent: "b*", action: deny, reason: bob may not echo}
`)
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(bob, "hello")
		return awaiting(isErr && strings.Contains(got, "policy deny: bob may not echo"), "bob's call denied by the rule naming him", got)
	})
	if got, isErr := echo(alice, "hello"); isErr || got != "hello" {
		t.Errorf("alice's call under a rule for b*: %q (error %v)", got, isErr)
	}
}
