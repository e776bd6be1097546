package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

func TestMain(m *testing.M) {
	pipeRelayMain()    // a stdio relay (proxy_bench_test.go), before the server it may relay to
	mcptest.Main()     // the upstream MCP server the proxies run
	pagedMain()        // the paginating one (proxy_pagination_test.go)
	relayMain()        // a TCP relay (http_bench_test.go)
	floorMain()        // the minimal net/http proxy (http_bench_test.go)
	advRelayMain()     // the adversarial suite's stdio relay (adversarial_upstream_test.go)
	appsGoServerMain() // the Go SDK's MCP Apps server (apps_sdk_test.go)
	// Stops the ClickHouse server of the audit tests, then removes the
	// commands built.
	os.Exit(cmdtest.Main(func() int { return chtest.Main(m) }))
}

// agent is an MCP client speaking to a proxy command over stdio.
type agent struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan string
	seq   int
	// stop ends the input and waits for the proxy to end (at the latest
	// when the test ends).
	stop func()
}

// startProxy runs the proxy command on stdio in front of the mcptest server
// (server id "files"), with extra flags.
func startProxy(t *testing.T, natsURL, proxyID string, extra ...string) *agent {
	t.Helper()
	args := append([]string{"--server-id", "files", "--proxy-id", proxyID, "--outbox-dir", t.TempDir(), "--first-sight-wait", "5s"}, extra...)
	cmd := exec.Command(filepath.Join(build(t), "proxy"), append(args, "--", os.Args[0])...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+natsURL, mcptest.Env+"=1")
	return runAgent(t, cmd, proxyID)
}

// runAgent starts a proxy command on stdio and returns the agent speaking
// to it; the end of the test ends its input, and the proxy must then end.
func runAgent(t *testing.T, cmd *exec.Cmd, name string) *agent {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, in: in, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	a.stop = sync.OnceFunc(func() {
		in.Close() // end of input ends the proxy and its server
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("proxy %s did not end after end of input", name)
		}
		for range a.lines { // the reader ends when Wait closed its pipe
		}
	})
	t.Cleanup(a.stop)
	return a
}

// call sends a request and returns the response with its id, skipping
// notifications.
func (a *agent) call(method, params string) string {
	a.t.Helper()
	a.seq++
	id := fmt.Sprint(a.seq)
	a.send(id, method, params)
	return a.answer(id)
}

func (a *agent) init() {
	a.t.Helper()
	if got := a.call("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}`); !strings.Contains(got, "serverInfo") {
		a.t.Fatalf("initialize: %s", got)
	}
}

// wait bounds the polls of these tests: it only stops a hung test.
const wait = 20 * time.Second

// awaiting is nil when ok, and otherwise an error that says what a poll
// awaits and what it last saw.
func awaiting(ok bool, what, last string) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%s: not yet; last seen: %.300s", what, last)
}

// TestFleetRugPull: two proxies front the same server id. The first proxy's
// upstream changes a tool's description at runtime and announces it; that
// proxy withholds it at once, and the second proxy, whose own upstream never
// changed, withholds the server too, from the verdict alone.
func TestFleetRugPull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	p := startPipeline(t)
	url := p.nc.ConnectedUrl()
	a1 := startProxy(t, url, "node-1")
	a2 := startProxy(t, url, "node-2")
	a1.init()
	a2.init()

	// First sight: the first listing becomes baseline v1 (discovery), then both serve.
	poll.Eventually(t, wait, func() error {
		got := a1.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`) && strings.Contains(got, `"name":"rug"`), "proxy 1 serves the approved tools", got)
	})
	poll.Eventually(t, wait, func() error {
		got := a2.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`), "proxy 2 serves the approved tools", got)
	})
	if got := a2.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x"}}`); strings.Contains(got, `"isError":true`) {
		t.Fatalf("a verified call was refused: %s", got)
	}

	// The rug pull behind proxy 1.
	a1.call("tools/call", `{"name":"rug","arguments":{}}`)
	poll.Eventually(t, wait, func() error {
		got := a1.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`), "proxy 1 refuses the poisoned tool", got)
	})
	if got := a1.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("proxy 1 still lists the poisoned tool: %s", got)
	}
	// Proxy 2 never saw the change; the verdict reaches it.
	poll.Eventually(t, wait, func() error {
		got := a2.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`) && strings.Contains(got, "server_changed"), "proxy 2 withholds the changed server", got)
	})
	if got := a2.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("proxy 2 still lists tools of a changed server: %s", got)
	}
}
