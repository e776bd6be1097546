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
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// BenchmarkPolicyOverhead: sequential tools/call round trips to the mcptest
// server directly, through an in-process stdio proxy without a policy, and
// through one whose tenant has 1,000 rules over 100 servers, none of which
// matches the call (argument clauses included), each step calling the
// three in rotating order so that a noisy machine burdens all alike. It
// reports each path's ns/call, policy-ratio (the call through the proxy
// with the policy over without it) and added-ratio (what the proxy adds to
// the direct call, with the policy over without it).
func BenchmarkPolicyOverhead(b *testing.B) {
	set, err := sessiontest.NonMatchingRules(1000)
	if err != nil {
		b.Fatal(err)
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"
	call := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}}` + "\n")
	type path struct {
		name string
		w    io.Writer
		r    *bufio.Reader
		ns   time.Duration
	}
	direct := func() *path {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), mcptest.Env+"=1")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
		return &path{name: "direct", w: in, r: bufio.NewReader(out)}
	}
	proxied := func(name string, pol session.Policy) *path {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		p, err := Start(Config{Command: os.Args[0], Env: append(os.Environ(), mcptest.Env+"=1"), StopWait: time.Second}, outW, os.Stderr)
		if err != nil {
			b.Fatal(err)
		}
		cfg := session.Config{Server: "bench", Policy: pol}
		s := session.New(cfg, gate{approved(toolRead, toolRug)}, &nopObs{}, p.Pipes().ToServer)
		bound := Bind(s, p.Pipes())
		done := make(chan struct{})
		go func() { _, _ = p.Serve(context.Background(), bound, inR, nil); outW.Close(); close(done) }()
		b.Cleanup(func() { inW.Close(); <-done; _ = bound.Wait() })
		return &path{name: name, w: inW, r: bufio.NewReader(outR)}
	}
	paths := []*path{direct(), proxied("policy-off", nil), proxied("policy-on", sessiontest.Policy[session.Code]{Set: set})}
	roundTrip := func(p *path, msg []byte, id string) string {
		if _, err := p.w.Write(msg); err != nil {
			b.Fatal(err)
		}
		for {
			line, err := p.r.ReadString('\n')
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			if strings.Contains(line, `"id":`+id+`,`) {
				return line
			}
		}
	}
	for _, p := range paths {
		roundTrip(p, []byte(initialize), "1")
		if got := roundTrip(p, call, "7"); strings.Contains(got, `"isError":true`) {
			b.Fatalf("%s: the call is refused: %s", p.name, got)
		}
	}
	n := 0
	for b.Loop() {
		for i := range paths {
			p := paths[(n+i)%len(paths)]
			start := time.Now()
			roundTrip(p, call, "7")
			p.ns += time.Since(start)
		}
		n++
	}
	per := func(p *path) float64 { return float64(p.ns.Nanoseconds()) / float64(n) }
	for _, p := range paths {
		b.ReportMetric(per(p), p.name+"-ns/call")
	}
	b.ReportMetric(per(paths[2])/per(paths[1]), "policy-ratio")
	b.ReportMetric((per(paths[2])-per(paths[0]))/(per(paths[1])-per(paths[0])), "added-ratio")
	b.ReportMetric(0, "ns/op")
}
