package stdio

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// benchCall is the tools/call the benchmarks send (id 7).
var benchCall = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}}` + "\n")

// benchPipe is a client's side of a stdio MCP server: what it writes, and
// what it reads.
type benchPipe struct {
	w io.Writer
	r *bufio.Reader
}

// roundTrip writes msg and returns the line that answers id (the lines
// before it, notifications, are skipped).
func (p benchPipe) roundTrip(b *testing.B, msg []byte, id string) string {
	if _, err := p.w.Write(msg); err != nil {
		b.Fatal(err)
	}
	for {
		line, err := p.r.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.Contains(line, `"id":`+id+`,`) {
			return line
		}
	}
}

// benchOpen initializes the session (without it the proxy trusts the
// server with nothing and refuses the call itself) and fails unless
// benchCall is served.
func benchOpen(b *testing.B, p benchPipe) benchPipe {
	p.roundTrip(b, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`+"\n"), "1")
	if got := p.roundTrip(b, benchCall, "7"); strings.Contains(got, `"isError":true`) || !strings.Contains(got, `"result"`) {
		b.Fatalf("the call is not served: %s", got)
	}
	return p
}

// benchDirect starts the mcptest server as a child and returns its stdin
// and stdout; it is stopped when b ends.
func benchDirect(b *testing.B) benchPipe {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), mcptest.Env+"=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	return benchPipe{in, bufio.NewReader(out)}
}

// benchProxied starts an in-process stdio proxy with a session of cfg (no
// NATS: the gate is fixed and observations are dropped) in front of the
// mcptest server, and returns the client's side of it; it is stopped when
// b ends.
func benchProxied(b *testing.B, cfg session.Config) benchPipe {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := Start(Config{Command: os.Args[0], Env: append(os.Environ(), mcptest.Env+"=1"), StopWait: time.Second}, outW, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	s := session.New(cfg, gate{approved(toolRead, toolRug)}, &nopObs{}, p.Pipes().ToServer)
	bound := Bind(s, p.Pipes())
	done := make(chan struct{})
	go func() { _, _ = p.Serve(context.Background(), bound, inR, nil); outW.Close(); close(done) }()
	b.Cleanup(func() { inW.Close(); <-done; _ = bound.Wait() })
	return benchPipe{inW, bufio.NewReader(outR)}
}

// BenchmarkCall measures sequential tools/call round trips to the mcptest
// server, directly and through an in-process proxy, in the same run; each
// call served (the session initialized first).
func BenchmarkCall(b *testing.B) {
	run := func(b *testing.B, p benchPipe) {
		for b.Loop() {
			p.roundTrip(b, benchCall, "7")
		}
	}
	b.Run("path=direct", func(b *testing.B) { run(b, benchOpen(b, benchDirect(b))) })
	b.Run("path=proxy", func(b *testing.B) { run(b, benchOpen(b, benchProxied(b, session.Config{Server: "bench"}))) })
}
