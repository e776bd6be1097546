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

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

// stdioPeer is an MCP server process reached over stdio, with responses
// routed to their callers by id.
type stdioPeer struct {
	in      io.WriteCloser
	mu      sync.Mutex
	waiters map[string]chan string
	wmu     sync.Mutex
}

func startPeer(tb testing.TB, cmd *exec.Cmd) *stdioPeer {
	tb.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	// The server's own log (server-everything prints a banner) would split
	// the benchmark's result line: it is shown only when the run fails.
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s stderr:\n%s", cmd.Path, stderr.String())
		}
	})
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &stdioPeer{in: in, waiters: map[string]chan string{}}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			i := strings.Index(line, `"id":"`)
			if i < 0 {
				continue
			}
			id := line[i+6:]
			id = id[:strings.IndexByte(id, '"')]
			p.mu.Lock()
			ch := p.waiters[id]
			delete(p.waiters, id)
			p.mu.Unlock()
			if ch != nil {
				ch <- line
			}
		}
	}()
	tb.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		<-scanned
	})
	return p
}

// notify sends a notification.
func (p *stdioPeer) notify(tb testing.TB, method string) {
	p.wmu.Lock()
	_, err := fmt.Fprintf(p.in, `{"jsonrpc":"2.0","method":%q}`+"\n", method)
	p.wmu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
}

func (p *stdioPeer) call(tb testing.TB, id, method, params string) string {
	ch := make(chan string, 1)
	p.mu.Lock()
	p.waiters[id] = ch
	p.mu.Unlock()
	p.wmu.Lock()
	_, err := fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":"%s","method":%q,"params":%s}`+"\n", id, method, params)
	p.wmu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	select {
	case l := <-ch:
		return l
	case <-time.After(20 * time.Second):
		tb.Fatalf("no answer to %s %s", method, id)
	}
	return ""
}

// benchServer is an upstream of BenchmarkStdioProxyOverhead: its command
// and the call made of it.
type benchServer struct {
	cmd  func(b *testing.B) []string
	env  []string
	tool string // must be listed before the proxy serves
	args string // the tools/call params
}

// calls makes n tools/call requests from workers callers sharing p and
// returns how long they took; tag keeps the ids apart.
func (s benchServer) calls(b *testing.B, p *stdioPeer, workers, n int, tag string) time.Duration {
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / workers {
				out := p.call(b, fmt.Sprintf("%s-%d-%d", tag, w, i), "tools/call", s.args)
				if strings.Contains(out, `"isError":true`) || !strings.Contains(out, `"result"`) {
					b.Errorf("the call failed: %s", out)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkStdioProxyOverhead: tools/call latency and throughput of an MCP
// server over stdio, directly and through the proxy command (a verified
// server, publishing every call to the real pipeline's NATS), in the same
// run, and through a plain stdio relay process (pipeRelayMain: the least
// any process in between adds). Two servers: mcptest, a Go server that
// answers in a few microseconds (the proxy's worst case: its own work is as
// large as the server's), and the reference server-everything (node),
// calling echo. Latency: sequential calls, each step calling the three
// paths in rotating order. Throughput: 32 callers, the paths' rounds
// interleaved, so that a noisy machine burdens all alike.
func BenchmarkStdioProxyOverhead(b *testing.B) {
	servers := []struct {
		name string
		benchServer
	}{
		{"server=mcptest", benchServer{
			cmd:  func(*testing.B) []string { return []string{os.Args[0]} },
			env:  []string{mcptest.Env + "=1"},
			tool: "read", args: `{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}`,
		}},
		{"server=everything", benchServer{
			cmd: func(b *testing.B) []string {
				return []string{"node", requirePeers(b).bin(b, "@modelcontextprotocol/server-everything"), "stdio"}
			},
			tool: "echo", args: `{"name":"echo","arguments":{"message":"hello"}}`,
		}},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) { benchStdio(b, s.benchServer) })
	}
}

// pipeRelayEnv makes the test binary a plain stdio relay (pipeRelayMain).
const pipeRelayEnv = "MCPDRIFT_E2E_PIPE_RELAY"

// pipeRelayMain, when pipeRelayEnv is set, runs the test binary as a plain
// stdio relay: it starts the command named by its arguments and copies its
// own standard input to the command's and the command's standard output to
// its own, byte for byte. It is the least any process between an agent and
// a stdio server can add: BenchmarkStdioProxyOverhead measures it in the
// same run as the proxy.
func pipeRelayMain() {
	if os.Getenv(pipeRelayEnv) == "" {
		return
	}
	args := flagArgs(os.Args[1:])
	cmd := exec.Command(args[0], args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, pipeRelayEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		os.Exit(2)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go func() { _, _ = io.Copy(in, os.Stdin); in.Close() }()
	_, _ = io.Copy(os.Stdout, out)
	_ = cmd.Wait()
	os.Exit(0)
}

// flagArgs is what follows "--" in args.
func flagArgs(args []string) []string {
	for i, a := range args {
		if a == "--" {
			return args[i+1:]
		}
	}
	return args
}

func benchStdio(b *testing.B, s benchServer) {
	const (
		workers = 32
		rounds  = 4
	)
	n := max(b.N, 2000)      // sequential calls per path
	total := max(b.N, 40000) // concurrent calls per path, over all rounds
	pl := startPipeline(b)
	command := s.cmd(b)
	const initialize = `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`
	var pids [numPaths]int
	open := func(k int, cmd *exec.Cmd, env ...string) *stdioPeer {
		cmd.Env = append(append(os.Environ(), s.env...), env...)
		peer := startPeer(b, cmd)
		pids[k] = cmd.Process.Pid
		peer.call(b, "init", "initialize", initialize)
		peer.notify(b, "notifications/initialized")
		return peer
	}
	d := open(pathDirect, exec.Command(command[0], command[1:]...))
	r := open(pathRelay, exec.Command(os.Args[0], append([]string{"--"}, command...)...), pipeRelayEnv+"=1")
	p := open(pathProxy, exec.Command(filepath.Join(build(b), "proxy"), append([]string{"--server-id", "bench", "--outbox-dir", b.TempDir(), "--"}, command...)...),
		"MCPDRIFT_NATS_URL="+pl.nc.ConnectedUrl())
	// The first listing becomes the baseline; wait until the proxy serves.
	i := 0
	poll.Eventually(b, 30*time.Second, func() error {
		i++
		out := p.call(b, fmt.Sprint("list-", i), "tools/list", "{}")
		return awaiting(strings.Contains(out, `"name":"`+s.tool+`"`), "the proxy serves the tools", out)
	})
	paths := [numPaths]*stdioPeer{pathDirect: d, pathRelay: r, pathProxy: p}
	for i, peer := range paths {
		s.calls(b, peer, workers, 2000, fmt.Sprint("w", i)) // warm up
	}
	b.ResetTimer()
	per := total / rounds / workers * workers // calls per round and path, a multiple of workers
	pids[pathDirect] = 0                      // the server: not in the path
	measurePaths(b, n, rounds, per, pids,
		func(k, i int) error {
			out := paths[k].call(b, fmt.Sprint("s-", i), "tools/call", s.args)
			if strings.Contains(out, `"isError":true`) || !strings.Contains(out, `"result"`) {
				return fmt.Errorf("the call failed: %s", out)
			}
			return nil
		},
		func(k, calls int) time.Duration { return s.calls(b, paths[k], workers, calls, fmt.Sprint("c", k)) })
}
