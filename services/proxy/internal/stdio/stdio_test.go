package stdio

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestMain lets the test binary act as an upstream MCP server over stdio.
func TestMain(m *testing.M) {
	floodMain()
	mcptest.Main()
	os.Exit(m.Run())
}

const (
	toolRead = mcptest.ToolRead
	toolRug  = mcptest.ToolRug
)

type gate struct{ v session.View }

func (g gate) View(context.Context, string, bool, time.Duration) (session.View, bool) {
	return g.v, true
}

type nopObs struct {
	mu       sync.Mutex
	listings int
}

func (o *nopObs) Listing(session.Listed, []byte) { o.mu.Lock(); o.listings++; o.mu.Unlock() }
func (o *nopObs) Seen(session.Listed)            {}
func (o *nopObs) Call(session.Call)              {}

func approved(tools ...string) session.View {
	s, err := surface.Parse([]byte(`{"tools":[`+strings.Join(tools, ",")+`]}`), surface.Options{})
	if err != nil {
		panic(err)
	}
	v := session.View{Status: "verified", Serve: true, BaselineHash: s.Hash.String(), Items: map[session.ItemKey]surface.Digest{}}
	for _, it := range s.Items {
		v.Items[session.ItemKey{Kind: it.Kind, Name: it.Name}] = it.Hash
	}
	return v
}

type client struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan string
}

func (c *client) send(msg string) {
	c.t.Helper()
	if _, err := c.in.Write([]byte(msg + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) recv() string {
	c.t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-time.After(10 * time.Second):
		c.t.Fatal("no message from the proxy within 10s")
	}
	return ""
}

func startProxy(t *testing.T, v session.View, maxLine int) (*client, <-chan int) {
	t.Helper()
	return startProxyOf(t, v, maxLine, mcptest.Env, os.Stderr)
}

// startProxyOf is startProxy with the test binary run as the server that
// the environment variable env names, its standard error to stderr.
func startProxyOf(t *testing.T, v session.View, maxLine int, env string, stderr io.Writer) (*client, chan int) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := Start(Config{Command: os.Args[0], Env: append(os.Environ(), env+"=1"), MaxLine: maxLine, StopWait: 2 * time.Second}, outW, stderr)
	if err != nil {
		t.Fatal(err)
	}
	s := session.New(session.Config{Server: "fake"}, gate{v}, &nopObs{}, p.Pipes().ToServer)
	code := make(chan int, 1)
	go func() {
		c, err := p.Serve(context.Background(), Bind(s, p.Pipes()), inR, nil)
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		outW.Close()
		code <- c
	}()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return &client{t: t, in: inW, lines: lines}, code
}

func TestStdioRugPull(t *testing.T) {
	c, code := startProxy(t, approved(toolRead, toolRug), 0)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`)
	if got := c.recv(); !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize: %s", got)
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if got := c.recv(); !strings.Contains(got, `"name":"read"`) {
		t.Fatalf("verified listing: %s", got)
	}
	// A long line passes whole.
	big := strings.Repeat("x", 3<<20)
	c.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"path":"` + big + `"}}}`)
	if got := c.recv(); !strings.Contains(got, fmt.Sprint(len(big)+len(`{"path":""}`))) {
		t.Fatalf("long call: %.200s", got)
	}
	// The rug pull: the server changes its tool and says so.
	c.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"rug"}}`)
	// Its list_changed is the proxy's business: the re-listing shows the
	// rug pull, the server is closed, and a closed server is silent.
	for sawResult := false; !sawResult; {
		got := c.recv()
		if strings.Contains(got, "list_changed") {
			t.Fatalf("a closed server's list_changed reached the client: %s", got)
		}
		sawResult = strings.Contains(got, `"id":4`)
	}
	// The proxy re-listed on its own; the poisoned tool is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read","arguments":{}}}`)
		got := c.recv()
		if strings.Contains(got, `"isError":true`) {
			if !strings.Contains(got, "server_changed") && !strings.Contains(got, "tool_not_approved") {
				t.Fatalf("refusal: %s", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poisoned tool was still served: %s", got)
		}
	}
	c.send(`{"jsonrpc":"2.0","id":6,"method":"tools/list"}`)
	if got := c.recv(); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("the poisoned tool was listed: %s", got)
	}
	c.in.Close() // end of input: the child is stopped and reaped
	select {
	case rc := <-code:
		if rc != 0 {
			t.Fatalf("exit code %d", rc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not end after end of input")
	}
}

func TestStdioOversizeFromClient(t *testing.T) {
	c, code := startProxy(t, approved(toolRead, toolRug), 1<<20)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"p":"` + strings.Repeat("y", 2<<20) + `"}}}`)
	// The answer every transport gives a message over its limit: code
	// message_too_large (before the reply path was one, stdio answered
	// without a code).
	if got := c.recv(); got != string(session.TooLarge(1<<20)) || !strings.Contains(got, `"mcpdrift/code":"message_too_large"`) {
		t.Fatalf("oversize: %s", got)
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if got := c.recv(); !strings.Contains(got, `"id":2`) {
		t.Fatalf("after an oversize line the proxy stopped working: %s", got)
	}
	c.in.Close()
	<-code
}

// TestStdioSignalAfterEndOfInput: a server that does not exit at the end of
// its input gets the signal the client sends afterwards at once, not only
// when the proxy's own grace period ends (here far beyond the test's wait).
func TestStdioSignalAfterEndOfInput(t *testing.T) {
	// The server says when its input ended, then keeps running.
	script := `cat >/dev/null; echo '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"input ended"}}'; while :; do sleep 0.05; done`
	out, outW := io.Pipe()
	p, err := Start(Config{Command: "sh", Args: []string{"-c", script}, StopWait: time.Hour}, outW, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	s := session.New(session.Config{Server: "fake"}, gate{approved(toolRead)}, &nopObs{}, p.Pipes().ToServer)
	in, inW := io.Pipe()
	sig := make(chan os.Signal, 1)
	code := make(chan int, 1)
	go func() {
		c, _ := p.Serve(context.Background(), Bind(s, p.Pipes()), in, sig)
		outW.Close()
		code <- c
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The client opens the session (so that the server's notification has
	// a variant whose status serves it), then its input ends.
	if _, err := inW.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	inW.Close() // end of input
	select {
	case l := <-lines:
		if !strings.Contains(l, "input ended") {
			t.Fatalf("from the server: %s", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server's input was not closed at the end of the client's input")
	}
	sig <- syscall.SIGTERM // what an MCP client sends when the server does not exit
	select {
	case c := <-code:
		if c != 128+int(syscall.SIGTERM) {
			t.Fatalf("exit code %d, want %d (the server, ended by SIGTERM)", c, 128+int(syscall.SIGTERM))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM after the end of input did not reach the server within 10s (its grace period is an hour)")
	}
}
