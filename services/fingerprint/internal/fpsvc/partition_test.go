package fpsvc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// publishLog records the subjects an instance published on.
type publishLog struct {
	jetstream.JetStream
	mu       sync.Mutex
	subjects map[string]int
}

func (j *publishLog) PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	j.mu.Lock()
	j.subjects[subj]++
	j.mu.Unlock()
	return j.JetStream.PublishAsync(subj, data, opts...)
}

func (j *publishLog) servers() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.subjects)
}

// newPartitionedEnv is newEnv with the streams in p partitions.
func newPartitionedEnv(t *testing.T, p int) *env {
	t.Helper()
	srv := natstest.Start(t)
	nc, js := srv.Connect(t)
	h, err := bus.Setup(context.Background(), js, bus.Config{Partitions: p})
	if err != nil {
		t.Fatal(err)
	}
	return &env{nc: nc, js: js, h: h}
}

// TestPartitionedInstances: two instances on disjoint partitions of the
// observations both work; each server's observations are fingerprinted by
// one instance only, and its fingerprints are stored in the order its
// observations were published.
func TestPartitionedInstances(t *testing.T) {
	const p, servers, each = 4, 12, 8
	e := newPartitionedEnv(t, p)
	logs := []*publishLog{{JetStream: e.js, subjects: map[string]int{}}, {JetStream: e.js, subjects: map[string]int{}}}
	for i, set := range [][]int{{0, 1}, {2, 3}} {
		cfg := testConfig
		cfg.Workers, cfg.Prefetch, cfg.Partitions, cfg.PartitionSet = 4, 16, p, set
		e.start(t, cfg, Deps{JS: logs[i]})
	}
	capture := readFixture(t)
	for k := range each {
		for s := range servers {
			obs := observation(fmt.Sprintf("s%02d-%d", s, k), capture)
			obs.Server = fmt.Sprintf("s%02d", s)
			publishObs(t, e.js, obs, obs.EventId)
		}
	}
	poll.Eventually(t, wait, func() error { return hasMsgs(t, e.js, bus.StreamFingerprints, servers*each) })

	a, b := logs[0].servers(), logs[1].servers()
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("instance a published for %d servers, b for %d: want both to work", len(a), len(b))
	}
	for subj := range a {
		if _, ok := b[subj]; ok {
			t.Errorf("%s published by both instances", subj)
		}
	}
	order := map[string][]string{}
	for _, m := range stored(t, e.js, bus.StreamFingerprints) {
		subj, part := bus.SplitPartition(m.Subject)
		if part < 0 {
			t.Fatalf("fingerprint stored on %s: want a partition", m.Subject)
		}
		order[subj] = append(order[subj], strings.TrimPrefix(m.Header.Get(jetstream.MsgIDHeader), "fp-"))
	}
	for s := range servers {
		subj := bus.FingerprintSubject("acme", fmt.Sprintf("s%02d", s))
		var want []string
		for k := range each {
			want = append(want, fmt.Sprintf("s%02d-%d", s, k))
		}
		if !slices.Equal(order[subj], want) {
			t.Errorf("%s stored in the order %q, want %q", subj, order[subj], want)
		}
	}
}
