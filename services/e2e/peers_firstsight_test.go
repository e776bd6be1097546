package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFirstSightNoStall: the first session through the proxy of a server
// it has no verdict for (first sight, discovery posture) is not held up by
// waits that cannot end well. The verdict can only come after the proxy has
// published the server's whole surface, so nothing the proxy does before
// publishing waits for it: initialize is answered at once, with the
// server's instructions withheld (not verified yet: fail closed), the
// proxy's own listings after notifications/initialized do not wait, and
// neither does any message from the server behind them.
//
// The first-sight wait is set far beyond the test's bounds, so a wait for
// the gate shows as a failure, not as a slow pass.
func TestFirstSightNoStall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real MCP server from npm, and the service commands")
	}
	n := requirePeers(t)
	p := startPipeline(t)
	up := everything.start(t, n, "")
	cmd := exec.Command(filepath.Join(build(t), "proxy"), up.Command...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_SERVER_ID=first-sight", "MCPDRIFT_NATS_URL="+p.nc.ConnectedUrl(),
		"MCPDRIFT_OUTBOX_DIR="+t.TempDir(), "MCPDRIFT_FIRST_SIGHT_WAIT=10m")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = new(stderrTail)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	answers := make(chan string, 64)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range answers { // the reader ends when Wait closed its pipe
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			answers <- sc.Text()
		}
		close(answers)
	}()
	send := func(w io.Writer, msg string) {
		if _, err := fmt.Fprintln(w, msg); err != nil {
			t.Fatal(err)
		}
	}
	await := func(id, what string) string {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-answers:
				if !ok {
					t.Fatalf("the proxy ended before answering %s", what)
				}
				if strings.Contains(l, `"id":`+id+`,`) || strings.HasSuffix(l, `"id":`+id+`}`) {
					return l
				}
			case <-deadline:
				t.Fatalf("no answer to %s within 60s: the proxy waited for a verdict it had not asked for yet", what)
			}
		}
	}
	send(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if got := await("1", "initialize"); !strings.Contains(got, `"serverInfo"`) || strings.Contains(got, `"instructions"`) {
		t.Fatalf("the first initialize through the proxy: want the result without the unverified instructions: %.500s", got)
	}
	send(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(in, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	await("2", "a ping after notifications/initialized")
}
