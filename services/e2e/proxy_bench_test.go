package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
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
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &stdioPeer{in: in, waiters: map[string]chan string{}}
	go func() {
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
		}
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
// run. Two servers: mcptest, a Go server that answers in a few
// microseconds (the proxy's worst case: its own work is as large as the
// server's), and the reference server-everything (node), calling echo.
// Latency: sequential calls, each step calling both paths in alternating
// order. Throughput: 32 callers, in rounds direct, proxy, proxy, direct, so
// that a noisy machine burdens both alike.
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

func benchStdio(b *testing.B, s benchServer) {
	const (
		workers = 32
		rounds  = 4
	)
	n := max(b.N, 2000)      // sequential calls per path
	total := max(b.N, 40000) // concurrent calls per path, over all rounds
	pl := startPipeline(b)
	command := s.cmd(b)
	direct := exec.Command(command[0], command[1:]...)
	direct.Env = append(os.Environ(), s.env...)
	d := startPeer(b, direct)
	const initialize = `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`
	d.call(b, "init", "initialize", initialize)
	d.notify(b, "notifications/initialized")

	proxied := exec.Command(filepath.Join(build(b), "proxy"), append([]string{"--server-id", "bench", "--outbox-dir", b.TempDir(), "--"}, command...)...)
	proxied.Env = append(os.Environ(), append([]string{"MCPDRIFT_NATS_URL=" + pl.nc.ConnectedUrl()}, s.env...)...)
	p := startPeer(b, proxied)
	p.call(b, "init", "initialize", initialize)
	p.notify(b, "notifications/initialized")
	// The first listing becomes the baseline; wait until the proxy serves.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		out := p.call(b, fmt.Sprint("list-", i), "tools/list", "{}")
		if strings.Contains(out, `"name":"`+s.tool+`"`) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the proxy never served the tools: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.calls(b, d, workers, 2000, "dw") // warm up
	s.calls(b, p, workers, 2000, "pw")

	b.ResetTimer()
	dl, pxl := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		first, second, fl, sl := d, p, dl, pxl
		if i%2 == 1 {
			first, second, fl, sl = p, d, pxl, dl
		}
		for _, step := range []struct {
			peer *stdioPeer
			lat  []time.Duration
		}{{first, fl}, {second, sl}} {
			start := time.Now()
			out := step.peer.call(b, fmt.Sprint("s-", i), "tools/call", s.args)
			step.lat[i] = time.Since(start)
			if strings.Contains(out, `"isError":true`) || !strings.Contains(out, `"result"`) {
				b.Fatalf("the call failed: %s", out)
			}
		}
	}
	slices.Sort(dl)
	slices.Sort(pxl)
	per := total / (rounds / 2) // calls per round
	var dt, pt time.Duration
	for i := range rounds {
		if i%4 == 1 || i%4 == 2 {
			pt += s.calls(b, p, workers, per, fmt.Sprint("p", i))
		} else {
			dt += s.calls(b, d, workers, per, fmt.Sprint("d", i))
		}
	}
	b.StopTimer()
	made := float64(per / workers * workers * (rounds / 2))
	directRate, proxyRate := made/dt.Seconds(), made/pt.Seconds()
	p50, p99 := n/2, n*99/100
	b.ReportMetric(float64(dl[p50].Microseconds()), "direct-p50-us")
	b.ReportMetric(float64(dl[p99].Microseconds()), "direct-p99-us")
	b.ReportMetric(float64(pxl[p50].Microseconds()), "proxy-p50-us")
	b.ReportMetric(float64(pxl[p99].Microseconds()), "proxy-p99-us")
	b.ReportMetric(float64((pxl[p50] - dl[p50]).Microseconds()), "added-p50-us")
	b.ReportMetric(float64((pxl[p99] - dl[p99]).Microseconds()), "added-p99-us")
	b.ReportMetric(directRate, "direct-calls/s")
	b.ReportMetric(proxyRate, "proxy-calls/s")
	b.ReportMetric(proxyRate/directRate, "throughput-ratio-c32")
}
