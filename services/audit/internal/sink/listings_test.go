package sink

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestCompactListings: every listing a proxy observed has its row in
// list_observations, whole or compact: a ListingsSeen batch gives one row
// per compact listing, naming its surface hash, agent and session, with
// no capture; a whole listing names the hash its proxy computed. A batch
// with one listing of another server is dead-lettered whole.
func TestCompactListings(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	hash := "sha256:" + "ab12"
	whole, _ := proto.Marshal(&mcpdriftv1.ListObservation{EventId: "w1", Tenant: "acme", Server: "fs", Proxy: "p1",
		Variant: "v1", ObservedAtUnixMs: 1_760_000_000_000, Capture: []byte(`{"tools":{"pages":[]}}`),
		Agent: "alice", Session: "s0", SurfaceHash: hash})
	e.publish(bus.ListObservationSubject("acme", "fs"), whole, "w1")
	seen, _ := proto.Marshal(&mcpdriftv1.ListingsSeen{Seen: []*mcpdriftv1.ListingSeen{
		{EventId: "c1", Tenant: "acme", Server: "fs", Proxy: "p1", Variant: "v1", Agent: "alice", Session: "s1", SurfaceHash: hash, ObservedAtUnixMs: 1_760_000_001_000},
		{EventId: "c2", Tenant: "acme", Server: "fs", Proxy: "p2", Variant: "v1", Session: "s2", SurfaceHash: hash, ObservedAtUnixMs: 1_760_000_002_000},
		{Proxy: "p3", Variant: "v1", SurfaceHash: hash}, // no id, no time: the message's
	}})
	e.publish(bus.ListingsSeenSubject("acme", "fs"), seen, "c1+2")
	bad, _ := proto.Marshal(&mcpdriftv1.ListingsSeen{Seen: []*mcpdriftv1.ListingSeen{
		{EventId: "x1", Tenant: "acme", Server: "fs", SurfaceHash: hash, ObservedAtUnixMs: 1_760_000_003_000},
		{EventId: "x2", Tenant: "acme", Server: "web", SurfaceHash: hash, ObservedAtUnixMs: 1_760_000_003_000},
	}})
	e.publish(bus.ListingsSeenSubject("acme", "fs"), bad, "x1+1")

	poll.Eventually(t, wait, e.allSettled)
	for _, tc := range []struct {
		name, q string
		want    uint64
	}{
		{"whole", "SELECT count() FROM DB.list_observations FINAL WHERE event_id = 'w1' AND compact = 0 AND surface_hash = 'sha256:ab12' AND session = 's0' AND capture_bytes = 22", 1},
		{"compact", "SELECT count() FROM DB.list_observations FINAL WHERE event_id = 'c1' AND compact = 1 AND surface_hash = 'sha256:ab12' AND agent = 'alice' AND session = 's1' AND proxy = 'p1' AND variant = 'v1' AND capture_bytes = 0 AND capture_sha256 = '' AND at_ms = 1760000001000", 1},
		{"compact_second", "SELECT count() FROM DB.list_observations FINAL WHERE event_id = 'c2' AND compact = 1 AND session = 's2'", 1},
		{"compact_fallback_id", "SELECT count() FROM DB.list_observations FINAL WHERE event_id = 'c1+2#2' AND compact = 1 AND proxy = 'p3' AND tenant = 'acme' AND server = 'fs'", 1},
		{"every_listing", "SELECT count() FROM DB.list_observations FINAL WHERE tenant = 'acme' AND server = 'fs'", 4},
		{"bad_batch_left_out", "SELECT count() FROM DB.list_observations FINAL WHERE event_id LIKE 'x%'", 0},
		{"bad_batch_dead_lettered", "SELECT count() FROM DB.dead_letters FINAL WHERE service = 'audit' AND error_code = 'subject_mismatch'", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.count(tc.q); got != tc.want {
				t.Errorf("%s = %d, want %d", tc.q, got, tc.want)
			}
		})
	}
	if st := e.svc.Stats(); st.Written != 5 || st.Poison != 1 {
		t.Errorf("stats %+v: want 5 written (4 listings, 1 dead letter), 1 poison", st)
	}
}
