package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// TestMain runs the test binary as a fleet worker when the harness side of
// TestFleetWorkers starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := runWorker(context.Background(), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("fleet worker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFleetWorkers spreads a small fleet over two worker processes: every
// gate watches, a listing and calls handed to a worker's publishers reach
// the bus, a status written to the bucket reaches the recorder from the
// gates of both fronting proxies (each in its own worker), and the
// publishers' counters come back.
func TestFleetWorkers(t *testing.T) {
	nb := natstest.StartBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	captures := "../../internal/surface/testdata/real"
	manifests, _, err := loadManifests(captures)
	if err != nil {
		t.Fatal(err)
	}
	const nServers, nProxies, nTenants, fronting = 4, 2, 1, 2
	servers, proxies, _ := layout(nServers, nProxies, nTenants, fronting, manifests)
	rec := newRecorder()
	f := &fleetSim{proxies: proxies, servers: servers, rec: rec, workerOf: map[string]*worker{}}
	defer f.close()
	spec := workerSpec{Captures: captures, Servers: nServers, Proxies: nProxies, Tenants: nTenants, Fronting: fronting}
	if err := f.startWorkers(ctx, 2, func(string) string { return nb.ClientURL() }, filepath.Join(t.TempDir(), "outbox"), 10, time.Minute, spec); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		if up, total := f.watching(); up != total || total != nServers*fronting {
			return &pollErr{"gates watching", up, total}
		}
		return nil
	})

	srv := servers[0]
	f.list(srv.fronts[0], srv, srv.manifest, time.Now())
	f.call(srv.fronts[1], srv)
	poll.Eventually(t, 30*time.Second, func() error {
		st := f.pubStats()
		if st.Published < 2 {
			return &pollErr{"events published", int(st.Published), 2}
		}
		return nil
	})

	rec.expectChange(srv.key(), "verified", srv.fronts[0].id, srv.fronts, time.Now())
	data, err := status.Encode(&status.Record{Tenant: srv.tenant, Server: srv.id, Variant: variant, Status: status.Verified,
		Policy: status.Policy{Posture: status.Discovery, OnDrift: status.Block}, BaselineVersion: 1, BaselineHash: srv.hash, LiveHash: srv.hash,
		Reason: "first_baseline", UpdatedAtMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Handles.Status.Put(ctx, bus.StatusKey(srv.tenant, srv.id, variant), data); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		if n := rec.pendingCount(); n != 0 {
			return &pollErr{"status changes not seen by every fronting proxy", n, 0}
		}
		return nil
	})
	if got := rec.take().allProxies; len(got) != 1 {
		t.Fatalf("%d samples of a status reaching every proxy, want 1", len(got))
	}
	obs, err := nb.JS.Stream(ctx, bus.StreamObservations)
	if err != nil {
		t.Fatal(err)
	}
	if n := obs.CachedInfo().State.Msgs; n < 2 {
		t.Fatalf("%d observations on the bus, want the listing and the call", n)
	}
}

type pollErr struct {
	what      string
	got, want int
}

func (e *pollErr) Error() string { return fmt.Sprintf("%s: %d, want %d", e.what, e.got, e.want) }
