package driftsvc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestPartitionedInstances: two drift instances on disjoint partitions of
// the fingerprints both apply them; each server's fingerprints are applied
// by one instance only, in the order they were published; every server
// ends as the state machine says (baseline, then drift).
func TestPartitionedInstances(t *testing.T) {
	const p, servers, each = 4, 12, 6
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	h, err := bus.Setup(context.Background(), js, bus.Config{Partitions: p})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, nc: nc, js: js, h: h}
	a, b := e.manifest(fixA), e.manifest(fixB)

	var mu sync.Mutex
	handled := []map[string][]string{{}, {}} // per instance: server -> event ids, in order
	var svcs []*Service
	for i, set := range [][]int{{0, 1}, {2, 3}} {
		svc, err := New(Config{Workers: 4, Partitions: p, PartitionSet: set}, Deps{JS: js, Handles: h, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		svc.beforeHandle = func(msg jetstream.Msg) {
			subj, _ := bus.SplitPartition(msg.Subject())
			mu.Lock()
			defer mu.Unlock()
			handled[i][subj] = append(handled[i][subj], msg.Headers().Get(jetstream.MsgIDHeader))
		}
		e.run(svc)
		svcs = append(svcs, svc)
	}

	now := time.Now()
	for k := range each {
		hash := a
		if k > 0 {
			hash = b
		}
		for s := range servers {
			server := fmt.Sprintf("s%02d", s)
			e.publish(server, fmt.Sprintf("%s-%d", server, k), hash, "", now.Add(time.Duration(k)*time.Millisecond), "")
		}
	}
	poll.Eventually(t, wait, func() error {
		for s := range servers {
			server := fmt.Sprintf("s%02d", s)
			if err := e.hasRecord(svcs[0], server, "changed", func(r *state.Record) bool { return r.Status == state.Changed })(); err != nil {
				return err
			}
		}
		return nil
	})
	poll.Eventually(t, wait, func() error {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range handled {
			for _, ids := range m {
				n += len(ids)
			}
		}
		if n != servers*each {
			return fmt.Errorf("%d fingerprints handled, want %d", n, servers*each)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled[0]) == 0 || len(handled[1]) == 0 {
		t.Fatalf("instance a handled %d servers, b %d: want both to work", len(handled[0]), len(handled[1]))
	}
	for s := range servers {
		server := fmt.Sprintf("s%02d", s)
		subj := bus.FingerprintSubject("acme", server)
		ga, gb := handled[0][subj], handled[1][subj]
		if len(ga) > 0 && len(gb) > 0 {
			t.Errorf("%s handled by both instances: %q and %q", server, ga, gb)
		}
		var want []string
		for k := range each {
			want = append(want, fmt.Sprintf("%s-%d", server, k))
		}
		if got := append(ga, gb...); !slices.Equal(got, want) {
			t.Errorf("%s handled in the order %q, want %q", server, got, want)
		}
	}
}
