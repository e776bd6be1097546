//go:build unix

package fleet

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// BenchmarkPublisherPaced: the publisher's cost per call, at the paces of
// the proxy benchmark's phases (a call every 3 ms: a round each, as in its
// sequential phase; every 300 µs: several a round; 32 callers without
// pause), on a real in-process NATS server. It reports the CPU time the
// whole process (the publisher, nats.go and the server) spent per call,
// a difference that the proxy benchmark's noise on a shared machine hides.
func BenchmarkPublisherPaced(b *testing.B) {
	for _, bc := range []struct {
		name    string
		pace    time.Duration
		callers int
	}{{"pace=3ms", 3 * time.Millisecond, 1}, {"pace=300us", 300 * time.Microsecond, 1}, {"callers=32", 0, 32}} {
		b.Run(bc.name, func(b *testing.B) {
			bs := natstest.StartBus(b)
			p, err := NewPublisher(Config{Tenant: tenant, Server: "mem", Proxy: "px1", Dir: b.TempDir()}, Deps{JS: bs.JS, Log: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			stop := runInBackground(b, p.Run)
			defer func() { stop(); _ = p.Close() }()
			call := session.Call{Tool: "search_notes", Latency: 300 * time.Microsecond, ArgsDigest: "sha256:" + strings.Repeat("ab", 32)}
			n := 0
			cpu0 := processCPU(b)
			b.ResetTimer()
			switch {
			case bc.callers > 1:
				var wg sync.WaitGroup
				var next atomic.Int64
				for range bc.callers {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							p.Call(call)
						}
					})
				}
				wg.Wait()
				n = b.N
			default:
				t := time.NewTicker(bc.pace)
				for b.Loop() {
					<-t.C
					p.Call(call)
					n++
				}
				t.Stop()
			}
			poll.Eventually(b, 30*time.Second, func() error {
				if st := p.Stats(); st.Published+st.Spooled < uint64(n) {
					return fmt.Errorf("published %d of %d", st.Published+st.Spooled, n)
				}
				return nil
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(n), "cpu-us/call")
		})
	}
}

// processCPU is the CPU time this process has spent so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
