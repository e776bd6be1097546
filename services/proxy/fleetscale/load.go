package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// watchPipeline follows, as the NATS admin, the fingerprints and verdicts
// on the bus and every write of the status bucket, into the recorder.
func watchPipeline(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, rec *recorder) error {
	if _, err := nc.Subscribe(bus.Prefix+".fp.>", func(m *nats.Msg) {
		now := time.Now()
		var fp mcpdriftv1.Fingerprint
		if proto.Unmarshal(m.Data, &fp) == nil {
			rec.fingerprinted(fp.Proxy, fp.Tenant+"."+fp.Server, now)
		}
	}); err != nil {
		return err
	}
	if _, err := nc.Subscribe(bus.Prefix+".drift.>", func(m *nats.Msg) {
		now := time.Now()
		var v struct{ Tenant, Server, Status string }
		if json.Unmarshal(m.Data, &v) == nil {
			rec.verdictSeen(v.Tenant+"."+v.Server, v.Status, now)
		}
	}); err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, bus.BucketStatus)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			key, ok := shortKey(e.Key())
			if !ok {
				continue
			}
			var v struct{ Status string }
			if json.Unmarshal(e.Value(), &v) == nil {
				rec.kvSeen(key, v.Status, e.Created())
			}
		}
	}()
	return nil
}

// loadSpec is the traffic of a phase, per second over the whole fleet.
type loadSpec struct {
	obs    float64 // list observations (re-listings of unchanged manifests)
	drifts float64 // rug pulls: a verified server's manifest changes behind one proxy
	calls  float64 // tool calls observed
}

// loadCounts is what a phase published.
type loadCounts struct {
	obs, drifts, calls int
}

// drive publishes the spec's traffic through the fleet's publishers until
// ctx ends or d has passed, paced every 5 ms.
func drive(ctx context.Context, f *fleetSim, spec loadSpec, d time.Duration) loadCounts {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	start := time.Now()
	var n loadCounts
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case now := <-tick.C:
			el := now.Sub(start)
			if el >= d {
				return n
			}
			s := el.Seconds()
			for n.obs < int(s*spec.obs) {
				n.obs++
				relist(f, rng)
			}
			for n.drifts < int(s*spec.drifts) {
				n.drifts++
				if !drift(f, rng) {
					break
				}
			}
			for n.calls < int(s*spec.calls) {
				n.calls++
				srv := f.servers[rng.IntN(len(f.servers))]
				p := srv.fronts[rng.IntN(len(srv.fronts))]
				f.calls.Add(1)
				f.call(p, srv)
			}
		}
	}
}

// relist publishes a re-listing of one server's current manifest by one
// of its proxies.
func relist(f *fleetSim, rng *rand.Rand) {
	for range 4 {
		srv := f.servers[rng.IntN(len(f.servers))]
		p := srv.fronts[rng.IntN(len(srv.fronts))]
		now := time.Now()
		srv.mu.Lock()
		m, drifted, hash := srv.manifest, srv.drifted, srv.hash
		srv.mu.Unlock()
		if f.compact.Load() && !drifted && hash != "" {
			// What a proxy's session does with a surface its gate's record
			// confirms: the compact form (docs/bus.md). No fingerprint
			// follows it, so it is not awaited (obs -> fingerprint times
			// whole listings only).
			f.listings.Add(1)
			f.seen(p, srv, hash)
			return
		}
		if !f.rec.published(p.id, srv.key(), now) {
			continue
		}
		f.listings.Add(1)
		f.listing(p, srv, m)
		return
	}
}

// drift makes a verified server rug-pull behind one of its proxies.
func drift(f *fleetSim, rng *rand.Rand) bool {
	for range 16 {
		srv := f.servers[rng.IntN(len(f.servers))]
		srv.mu.Lock()
		if srv.drifted || f.rec.pending(srv.key()) {
			srv.mu.Unlock()
			continue
		}
		srv.drifted = true
		srv.manifest = rugPull(srv.manifest)
		m := srv.manifest
		srv.mu.Unlock()
		p := srv.fronts[rng.IntN(len(srv.fronts))]
		now := time.Now()
		f.rec.expectChange(srv.key(), "changed", p.id, srv.fronts, now)
		f.list(p, srv, m, now)
		return true
	}
	return false
}

// firstSight has one proxy of every server publish its first listing, at
// rate per second: trust on first use makes it baseline v1, verified.
func firstSight(ctx context.Context, f *fleetSim, rate float64) {
	start := time.Now()
	for i, srv := range f.servers {
		if ctx.Err() != nil {
			return
		}
		if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		p := srv.fronts[0]
		now := time.Now()
		f.rec.expectChange(srv.key(), "verified", p.id, srv.fronts, now)
		f.list(p, srv, srv.manifest, now)
	}
}

// waitFor polls cond every 20 ms until it holds or within passed.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// list publishes a listing of srv by p whose status change is expected.
func (f *fleetSim) list(p *proxy, srv *server, m []byte, now time.Time) {
	f.rec.published(p.id, srv.key(), now)
	f.listings.Add(1)
	f.listing(p, srv, m)
}
