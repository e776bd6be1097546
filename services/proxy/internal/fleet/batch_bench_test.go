package fleet

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// BenchmarkCallBatchEncode measures, in the same run and on the same
// calls, how the publisher encodes calls (Call encodes each as a
// CallObservations of one, and mergeBatches concatenates them; ADR 0004)
// against one proto.Marshal of a CallObservations holding the same calls.
// Both paths build each observation from a session.Call and pass it
// through a channel, as the publisher does between Call and Run (the
// whole-batch path with the same lock and byte count as enqueue); a round
// is one batch of calls=N. Rounds of each path alternate; whole/pub above
// 1 means the publisher's path is faster. ADR 0008 has the figures from
// when Call framed the batch of one by hand with protowire.
func BenchmarkCallBatchEncode(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run("calls="+strconv.Itoa(n), func(b *testing.B) {
			p, err := NewPublisher(Config{Tenant: tenant, Server: "mem", Proxy: "px1", Dir: b.TempDir(), QueueEvents: 1024},
				Deps{JS: noJS{}, Log: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			c := session.Call{Tool: "search_notes", Latency: 312 * time.Microsecond,
				ArgsDigest: "sha256:9f2c4b8e1d7a3f605b2e8c9d0a1f4e3b6c5d7a8e9f0b1c2d3e4f5a6b7c8d9e0f"}
			queue := make(chan *mcpdriftv1.CallObservation, 1024)
			pub := func() {
				for range n {
					p.Call(c)
				}
				evs := make([]*event, 0, n)
				for range n {
					evs = append(evs, <-p.queue)
				}
				p.queueBytes.Store(0)
				if out := mergeBatches(evs, 1<<20); len(out) != 1 {
					b.Fatalf("%d batches, want 1", len(out))
				}
			}
			whole := func() {
				for range n {
					obs := &mcpdriftv1.CallObservation{
						EventId: p.nextID(), Tenant: p.cfg.Tenant, Server: p.cfg.Server, Proxy: p.cfg.Proxy,
						Tool: c.Tool, Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED, LatencyUs: c.Latency.Microseconds(),
						ArgumentsDigest: c.ArgsDigest, ObservedAtUnixMs: p.now().UnixMilli(),
					}
					// As enqueue does, with the size the queue is bounded by.
					p.mu.RLock()
					p.queueBytes.Add(int64(proto.Size(obs)))
					queue <- obs
					p.mu.RUnlock()
				}
				p.queueBytes.Store(0)
				batch := &mcpdriftv1.CallObservations{Calls: make([]*mcpdriftv1.CallObservation, 0, n)}
				for range n {
					batch.Calls = append(batch.Calls, <-queue)
				}
				if _, err := proto.Marshal(batch); err != nil {
					b.Fatal(err)
				}
			}
			var pt, wt time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if i%2 == 0 {
					pub()
				} else {
					whole()
				}
				mid := time.Now()
				if i%2 == 0 {
					whole()
				} else {
					pub()
				}
				if i%2 == 0 {
					pt += mid.Sub(start)
					wt += time.Since(mid)
				} else {
					wt += mid.Sub(start)
					pt += time.Since(mid)
				}
			}
			b.StopTimer()
			calls := float64(b.N * n)
			b.ReportMetric(float64(pt.Nanoseconds())/calls, "pub-ns/call")
			b.ReportMetric(float64(wt.Nanoseconds())/calls, "whole-ns/call")
			b.ReportMetric(float64(wt)/float64(pt), "whole/pub")
		})
	}
}

// noJS stands for JetStream where the publisher is never run.
type noJS struct{ jetstream.JetStream }
