package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// BenchmarkStatusFanout measures the candidate shapes of a proxy's status
// subscription (docs/adr/0010-one-status-watch-per-proxy.md) on one
// in-process NATS server: proxies of one tenant, each fronting servers
// of the tenant's, every server fronted by two proxies. For each shape it
// reports the status consumers, the time until every watch has its
// initial values, and the latency from a status write to each fronting
// proxy (p50, p99) over b.N writes, all in the same run:
//
//   - pairs: two watches per (proxy, server), the server record and its
//     variants (the design before ADR 0010);
//   - tenant: one watch per proxy of its tenant's keys (ADR 0010);
//   - multifilter: one watch per proxy with two filters per fronted server.
//
// Run: go test -run '^$' -bench StatusFanout -benchtime 200x ./proxy/internal/fleet
func BenchmarkStatusFanout(b *testing.B) {
	const (
		proxies  = 20
		servers  = 200
		fronting = 2
		valueLen = 512
	)
	for _, shape := range []string{"pairs", "tenant", "multifilter"} {
		b.Run("shape="+shape, func(b *testing.B) {
			bs := natstest.StartBus(b)
			ctx := context.Background()
			value := make([]byte, valueLen)
			for s := range servers {
				if _, err := bs.Handles.Status.Put(ctx, bus.StatusKey(tenant, srvName(s), "default"), value); err != nil {
					b.Fatal(err)
				}
			}
			// fronted[p]: the servers proxy p fronts; by[s]: its proxies.
			fronted := make([][]int, proxies)
			by := make([][]int, servers)
			for s := range servers {
				for f := range fronting {
					p := (s*fronting + f) % proxies
					fronted[p] = append(fronted[p], s)
					by[s] = append(by[s], p)
				}
			}
			seen := newArrivals()
			var watchers []jetstream.KeyWatcher
			start := time.Now()
			var loaded sync.WaitGroup
			for p := range proxies {
				nc, err := nats.Connect(bs.ClientURL())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
				js, _ := jetstream.New(nc)
				kv, err := js.KeyValue(ctx, bus.BucketStatus)
				if err != nil {
					b.Fatal(err)
				}
				var filters [][]string
				switch shape {
				case "pairs":
					for _, s := range fronted[p] {
						filters = append(filters, []string{bus.ServerKey(tenant, srvName(s))}, []string{bus.ServerKey(tenant, srvName(s)) + ".*"})
					}
				case "tenant":
					filters = [][]string{{tenant + ".>"}}
				case "multifilter":
					var f []string
					for _, s := range fronted[p] {
						f = append(f, bus.ServerKey(tenant, srvName(s)), bus.ServerKey(tenant, srvName(s))+".*")
					}
					filters = [][]string{f}
				}
				for _, f := range filters {
					w, err := kv.WatchFiltered(ctx, f)
					if err != nil {
						b.Fatal(err)
					}
					watchers = append(watchers, w)
					loaded.Add(1)
					go func() {
						initial := true
						for e := range w.Updates() {
							if e == nil {
								if initial {
									initial = false
									loaded.Done()
								}
								continue
							}
							if !initial {
								seen.arrived(p, e.Key(), time.Now())
							}
						}
					}()
				}
			}
			loaded.Wait()
			setup := time.Since(start)
			b.Cleanup(func() {
				for _, w := range watchers {
					_ = w.Stop()
				}
			})
			info, err := bs.JS.Stream(ctx, "KV_"+bus.BucketStatus)
			if err != nil {
				b.Fatal(err)
			}
			consumers := info.CachedInfo().State.Consumers

			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				s := (i * 7) % servers
				key := bus.StatusKey(tenant, srvName(s), "default")
				wait := seen.expect(key, by[s])
				t0 := time.Now()
				if _, err := bs.Handles.Status.Put(ctx, key, value); err != nil {
					b.Fatal(err)
				}
				select {
				case times := <-wait:
					for _, t := range times {
						lat = append(lat, t.Sub(t0))
					}
				case <-time.After(10 * time.Second):
					b.Fatalf("write %d of %s: not at every fronting proxy after 10s", i, key)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(consumers), "consumers")
			b.ReportMetric(float64(setup.Milliseconds()), "setup-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func srvName(i int) string { return fmt.Sprintf("s%04d", i) }

// arrivals waits for a key to reach a set of proxies.
type arrivals struct {
	mu      sync.Mutex
	key     string
	pending map[int]bool
	times   []time.Time
	done    chan []time.Time
}

func newArrivals() *arrivals { return &arrivals{} }

// expect arms the wait for key at proxies; the channel delivers the
// arrival times once every one has it.
func (a *arrivals) expect(key string, proxies []int) <-chan []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.key, a.pending, a.times = key, map[int]bool{}, nil
	for _, p := range proxies {
		a.pending[p] = true
	}
	a.done = make(chan []time.Time, 1)
	return a.done
}

func (a *arrivals) arrived(proxy int, key string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if key != a.key || !a.pending[proxy] {
		return
	}
	delete(a.pending, proxy)
	a.times = append(a.times, at)
	if len(a.pending) == 0 {
		a.done <- a.times
	}
}
