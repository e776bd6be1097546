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

// BenchmarkCall measures sequential tools/call round trips to the mcptest
// server, directly and through an in-process proxy (no NATS: the gate is
// fixed and observations are dropped), in the same run.
func BenchmarkCall(b *testing.B) {
	call := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}}` + "\n")
	run := func(b *testing.B, w io.Writer, r *bufio.Reader) {
		for b.Loop() {
			if _, err := w.Write(call); err != nil {
				b.Fatal(err)
			}
			line, err := r.ReadString('\n')
			if err != nil || !strings.Contains(line, `"id":7`) {
				b.Fatalf("%v %q", err, line)
			}
		}
	}
	b.Run("path=direct", func(b *testing.B) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), mcptest.Env+"=1")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { in.Close(); _ = cmd.Wait() }()
		run(b, in, bufio.NewReader(out))
	})
	b.Run("path=proxy", func(b *testing.B) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		p, err := Start(Config{Command: os.Args[0], Env: append(os.Environ(), mcptest.Env+"=1"), StopWait: time.Second}, outW, os.Stderr)
		if err != nil {
			b.Fatal(err)
		}
		s := session.New(session.Config{Server: "bench"}, gate{approved(toolRead, toolRug)}, &nopObs{}, p.Pipes().ToServer)
		done := make(chan struct{})
		go func() { _, _ = p.Serve(context.Background(), Bind(s, p.Pipes()), inR, nil); outW.Close(); close(done) }()
		defer func() { inW.Close(); <-done }()
		run(b, inW, bufio.NewReader(outR))
	})
}
