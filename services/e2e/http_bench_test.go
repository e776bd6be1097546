package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkHTTPProxyCommandOverhead: tools/call latency and throughput of
// an MCP server over Streamable HTTP, directly and through the proxy
// command in HTTP mode (its own process, as deployed: a verified server,
// every call published to the real pipeline's NATS), in the same run. The
// client is the Go SDK's (sessions, 2025-11-25, SSE answers). Two servers,
// each its own process: demoserver (Go SDK) and the reference
// server-everything (node). Latency: sequential calls, each step calling
// both paths in alternating order. Throughput: 32 callers sharing one
// session, in rounds direct, proxy, proxy, direct.
func BenchmarkHTTPProxyCommandOverhead(b *testing.B) {
	servers := []struct {
		name  string
		start func(b *testing.B) string // the MCP endpoint
		tool  string
		args  map[string]any
	}{
		{"server=demoserver", startDemoserver, "search_notes", map[string]any{"query": "release"}},
		{"server=everything", func(b *testing.B) string { return startEverythingHTTP(b, requirePeers(b)) },
			"echo", map[string]any{"message": "hello"}},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			benchHTTPCommand(b, s.start(b), s.tool, s.args)
		})
	}
}

// startDemoserver runs demoserver on a free loopback port and returns its
// MCP endpoint once it answers.
func startDemoserver(b *testing.B) string {
	addr := "127.0.0.1:" + freePort(b)
	cmd := exec.Command(filepath.Join(build(b), "demoserver"), "--listen", addr, "--state-file", filepath.Join(b.TempDir(), "release"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopOnCleanup(b, cmd, "demoserver")
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/control/release")
		if err == nil {
			resp.Body.Close()
			return "http://" + addr + "/mcp"
		}
		if time.Now().After(deadline) {
			b.Fatalf("demoserver did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func benchHTTPCommand(b *testing.B, upstream, tool string, args map[string]any) {
	const (
		workers = 32
		rounds  = 4
	)
	n := max(b.N, 2000)      // sequential calls per path
	total := max(b.N, 10000) // concurrent calls per path, over all rounds
	pl := startPipeline(b)
	base := runHTTPProxy(b, "bench", "--nats-url", pl.nc.ConnectedUrl(), "--proxy-id", "bench", "--upstream", "up="+upstream)
	connect := func(endpoint string) *mcp.ClientSession {
		tr := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers, IdleConnTimeout: time.Minute}
		b.Cleanup(tr.CloseIdleConnections)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: tr}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatalf("connecting to %s: %v", endpoint, err)
		}
		b.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		switch {
		case err != nil:
			return err
		case res.IsError:
			return fmt.Errorf("%s was refused or failed: %+v", tool, res.Content)
		}
		return nil
	}
	direct, via := connect(upstream), connect(base+"/up/mcp")
	// The first listing becomes the baseline; go on once the proxy serves.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := call(via)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the proxy never served %s: %v", tool, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	concurrent := func(cs *mcp.ClientSession, calls int) time.Duration {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
			once sync.Once
		)
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(calls) {
					if err := call(cs); err != nil {
						once.Do(func() { b.Error(err) })
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	concurrent(direct, 1000) // warm up
	concurrent(via, 1000)

	b.ResetTimer()
	dl, vl := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		first, second, fl, sl := direct, via, dl, vl
		if i%2 == 1 {
			first, second, fl, sl = via, direct, vl, dl
		}
		for _, step := range []struct {
			cs  *mcp.ClientSession
			lat []time.Duration
		}{{first, fl}, {second, sl}} {
			start := time.Now()
			err := call(step.cs)
			step.lat[i] = time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	slices.Sort(dl)
	slices.Sort(vl)
	per := total / (rounds / 2)
	var dt, vt time.Duration
	for i := range rounds {
		if i%4 == 1 || i%4 == 2 {
			vt += concurrent(via, per)
		} else {
			dt += concurrent(direct, per)
		}
	}
	b.StopTimer()
	if b.Failed() {
		b.FailNow()
	}
	calls := float64(per * (rounds / 2))
	directRate, viaRate := calls/dt.Seconds(), calls/vt.Seconds()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50, p99 := n/2, n*99/100
	b.ReportMetric(us(dl[p50]), "direct-p50-us")
	b.ReportMetric(us(dl[p99]), "direct-p99-us")
	b.ReportMetric(us(vl[p50]), "proxy-p50-us")
	b.ReportMetric(us(vl[p99]), "proxy-p99-us")
	b.ReportMetric(us(vl[p50]-dl[p50]), "added-p50-us")
	b.ReportMetric(us(vl[p99]-dl[p99]), "added-p99-us")
	b.ReportMetric(directRate, "direct-calls/s")
	b.ReportMetric(viaRate, "proxy-calls/s")
	b.ReportMetric(viaRate/directRate, "throughput-ratio-c32")
}
