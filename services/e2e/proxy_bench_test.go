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

type latencies struct {
	p50, p99   time.Duration
	throughput float64 // calls per second at concurrency 32
}

// measure runs sequential calls for latency, then 32 concurrent callers
// for throughput.
func measure(b *testing.B, p *stdioPeer, n int, tag string) latencies {
	args := `{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}`
	for i := range 200 { // warm up
		p.call(b, fmt.Sprintf("%s-w%d", tag, i), "tools/call", args)
	}
	lat := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		out := p.call(b, fmt.Sprintf("%s-%d", tag, i), "tools/call", args)
		lat[i] = time.Since(start)
		if strings.Contains(out, `"isError":true`) {
			b.Fatalf("the call was refused: %s", out)
		}
	}
	slices.Sort(lat)
	const workers = 32
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / workers {
				p.call(b, fmt.Sprintf("%s-c%d-%d", tag, w, i), "tools/call", args)
			}
		}()
	}
	wg.Wait()
	return latencies{p50: lat[n/2], p99: lat[n*99/100], throughput: float64(n/workers*workers) / time.Since(start).Seconds()}
}

// BenchmarkStdioProxyOverhead: tools/call latency and throughput of the
// mcptest server over stdio, directly and through the proxy command (a
// verified server), measured in the same run.
func BenchmarkStdioProxyOverhead(b *testing.B) {
	n := max(b.N, 2000)
	pl := startPipeline(b)
	direct := exec.Command(os.Args[0])
	direct.Env = append(os.Environ(), mcptest.Env+"=1")
	d := startPeer(b, direct)
	d.call(b, "init", "initialize", `{"protocolVersion":"2025-06-18","capabilities":{}}`)

	proxied := exec.Command(filepath.Join(build(b), "proxy"), "--server-id", "bench", "--outbox-dir", b.TempDir(), "--", os.Args[0])
	proxied.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+pl.nc.ConnectedUrl(), mcptest.Env+"=1")
	p := startPeer(b, proxied)
	p.call(b, "init", "initialize", `{"protocolVersion":"2025-06-18","capabilities":{}}`)
	// The first listing becomes the baseline; wait until the proxy serves.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		out := p.call(b, fmt.Sprint("list-", i), "tools/list", "{}")
		if strings.Contains(out, `"name":"read"`) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the proxy never served the tools: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	b.ResetTimer()
	dl := measure(b, d, n, "d")
	pxl := measure(b, p, n, "p")
	b.StopTimer()
	b.ReportMetric(float64(dl.p50.Microseconds()), "direct-p50-us")
	b.ReportMetric(float64(dl.p99.Microseconds()), "direct-p99-us")
	b.ReportMetric(float64(pxl.p50.Microseconds()), "proxy-p50-us")
	b.ReportMetric(float64(pxl.p99.Microseconds()), "proxy-p99-us")
	b.ReportMetric(float64((pxl.p50 - dl.p50).Microseconds()), "added-p50-us")
	b.ReportMetric(float64((pxl.p99 - dl.p99).Microseconds()), "added-p99-us")
	b.ReportMetric(pxl.throughput/dl.throughput, "throughput-ratio-c32")
}
