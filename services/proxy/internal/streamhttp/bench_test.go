package streamhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// BenchmarkHTTPProxyOverhead: tools/call (echo) on a real Go-SDK server over
// Streamable HTTP with sessions, directly and through the proxy (a verified
// server, the in-memory gate), in the same run: p50 and p99 latency at
// concurrency 1, and calls/s with 32 callers sharing one client session.
// Direct and proxied measurements alternate, so that a noisy machine
// burdens both alike.
func BenchmarkHTTPProxyOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		mode mode
	}{
		{"answer=sse", modes[0]},  // sessions, SSE answers (2025-11-25)
		{"answer=json", modes[1]}, // sessions, JSON answers (2025-06-18)
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchOverhead(b, bc.mode)
		})
	}
}

func benchOverhead(b *testing.B, m mode) {
	benchOverheadRig(b, newRigLog(b, m, zerolog.Nop()))
}

func benchOverheadRig(b *testing.B, r *rig) {
	const (
		warmup  = 200
		workers = 32
		rounds  = 4 // throughput rounds, half per path, in the order direct, via, via, direct
	)
	n := max(b.N, 2000)     // sequential calls per path
	total := max(b.N, 5000) // concurrent calls per path, over all rounds
	// Each path gets a client that keeps at least as many idle connections as it
	// has callers (the default keeps 2 per host, and 32 callers would
	// spend the run opening connections).
	client := func() *http.Client {
		tr := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers, IdleConnTimeout: time.Minute}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	direct := r.connectWith(b, r.direct, client())
	via := r.connectWith(b, r.via, client())

	// The first call through the proxy waits for the verdict on the
	// first sight; go on once the proxy serves the tool.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := echo(via, "ready")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the proxy never served echo: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range warmup {
		if err := errors.Join(echo(direct, "warm"), echo(via, "warm")); err != nil {
			b.Fatal(err)
		}
	}

	b.ResetTimer()
	// Concurrency 1: each step calls both paths, in alternating order.
	dl, vl := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		first, second := direct, via
		fl, sl := dl, vl
		if i%2 == 1 {
			first, second, fl, sl = via, direct, vl, dl
		}
		var err error
		fl[i], err = timed(first)
		if err != nil {
			b.Fatal(err)
		}
		sl[i], err = timed(second)
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(dl)
	slices.Sort(vl)

	// Concurrency 32: rounds alternate direct, via, via, direct, ...
	per := total / (rounds / 2)
	var dt, vt time.Duration
	for i := range rounds {
		onVia := i%4 == 1 || i%4 == 2
		cs := direct
		if onVia {
			cs = via
		}
		d, err := concurrent(cs, workers, per)
		if err != nil {
			b.Fatal(err)
		}
		if onVia {
			vt += d
		} else {
			dt += d
		}
	}
	b.StopTimer()

	calls := float64(per * (rounds / 2))
	directRate, viaRate := calls/dt.Seconds(), calls/vt.Seconds()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50, p99 := n/2, n*99/100
	b.ReportMetric(us(dl[p50]), "direct-p50-us")
	b.ReportMetric(us(dl[p99]), "direct-p99-us")
	b.ReportMetric(us(vl[p50]), "via-p50-us")
	b.ReportMetric(us(vl[p99]), "via-p99-us")
	b.ReportMetric(us(vl[p50]-dl[p50]), "added-p50-us")
	b.ReportMetric(us(vl[p99]-dl[p99]), "added-p99-us")
	b.ReportMetric(directRate, "direct-calls/s")
	b.ReportMetric(viaRate, "via-calls/s")
	b.ReportMetric(viaRate/directRate, "throughput-ratio")
}

// echo calls the echo tool and checks its answer.
func echo(cs *mcp.ClientSession, s string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": s}})
	switch {
	case err != nil:
		return fmt.Errorf("calling echo: %w", err)
	case res.IsError || text(res) != s:
		return fmt.Errorf("echo %q answered %q (error %t)", s, text(res), res.IsError)
	}
	return nil
}

func timed(cs *mcp.ClientSession) (time.Duration, error) {
	start := time.Now()
	err := echo(cs, "hello")
	return time.Since(start), err
}

// concurrent makes calls echo calls from workers goroutines sharing cs and
// returns how long they took.
func concurrent(cs *mcp.ClientSession, workers, calls int) (time.Duration, error) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(calls) {
				if err := echo(cs, "hello"); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}
