package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// storedSubjects returns the subjects of every message of a stream, in
// stream order.
func storedSubjects(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d of %s: %v", seq, stream, err)
		}
		out = append(out, m.Subject)
	}
	return out
}

// TestPartitionTransform: with partitions, NATS stores an observation or a
// fingerprint under the subject it was published on plus a partition
// token; a server's events, of every kind and in both streams, always get
// the same partition; a retried publish (same message id) is stored once;
// the servers spread over the partitions.
func TestPartitionTransform(t *testing.T) {
	const p = 4
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := bus.Setup(ctx, js, bus.Config{Partitions: p}); err != nil {
		t.Fatal(err)
	}
	var published []string
	for round := range 2 {
		for i := range 20 {
			server := "s" + strconv.Itoa(i)
			for _, subj := range []string{bus.ListObservationSubject("acme", server), bus.CallObservationsSubject("acme", server),
				bus.FingerprintSubject("acme", server)} {
				id := fmt.Sprintf("%s-%d", subj, round)
				for range 2 { // the retry is stored once
					if _, err := bus.Publish(ctx, js, subj, []byte(id), id); err != nil {
						t.Fatal(err)
					}
				}
				if round == 0 {
					published = append(published, subj)
				}
			}
		}
	}
	stored := append(storedSubjects(t, js, bus.StreamObservations), storedSubjects(t, js, bus.StreamFingerprints)...)
	if len(stored) != 2*len(published) {
		t.Fatalf("%d messages stored, want %d (two rounds, retries stored once)", len(stored), 2*len(published))
	}
	partOf := map[string]int{} // server -> partition
	used := map[int]bool{}
	for _, subj := range stored {
		base, part := bus.SplitPartition(subj)
		if part < 0 || part >= p || base+"."+strconv.Itoa(part) != subj {
			t.Fatalf("stored under %q: want a published subject and a partition below %d", subj, p)
		}
		if !slices.Contains(published, base) {
			t.Fatalf("stored under %q, which was never published", base)
		}
		server := base[len(base)-len(".sNN"):]
		if prev, ok := partOf[server]; ok && prev != part {
			t.Fatalf("%s: server in partitions %d and %d", subj, prev, part)
		}
		partOf[server] = part
		used[part] = true
	}
	if len(used) < 2 {
		t.Fatalf("20 servers all in partitions %v: want them spread", used)
	}
}

// TestSetupPartitions: a stream made without partitions is given them by
// a Setup that names them; a Setup that names none (the proxy's, the audit
// sink's) leaves them; Setup with one partition takes them away; the
// services read and check them with StreamPartitions.
func TestSetupPartitions(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	partitions := func(want int) {
		t.Helper()
		for _, stream := range []string{bus.StreamObservations, bus.StreamFingerprints} {
			if got, err := bus.StreamPartitions(ctx, js, stream, 0); err != nil || got != want {
				t.Fatalf("%s has %d partitions (%v), want %d", stream, got, err, want)
			}
		}
	}
	steps := []struct {
		partitions, want int
	}{{0, 1}, {8, 8}, {0, 8}, {3, 3}, {1, 1}, {0, 1}}
	for _, st := range steps {
		if _, err := bus.Setup(ctx, js, bus.Config{Partitions: st.partitions}); err != nil {
			t.Fatalf("Setup with %d partitions: %v", st.partitions, err)
		}
		partitions(st.want)
	}
	_, err := bus.StreamPartitions(ctx, js, bus.StreamObservations, 4)
	if coded.CodeOf(err) != bus.CodePartitionsMismatch {
		t.Fatalf("StreamPartitions(want 4) of a stream with 1: %v, want code %s", err, bus.CodePartitionsMismatch)
	}
	if _, err := bus.Setup(ctx, js, bus.Config{Partitions: bus.MaxPartitions + 1}); err == nil {
		t.Fatal("Setup with too many partitions succeeded")
	}
}

func TestSplitPartition(t *testing.T) {
	for _, tc := range []struct {
		name, subject, base string
		part                int
	}{
		{"list_partitioned", "mcpdrift.obs.list.t.s.3", "mcpdrift.obs.list.t.s", 3},
		{"calls_partitioned", "mcpdrift.obs.calls.t.s.0", "mcpdrift.obs.calls.t.s", 0},
		{"fp_partitioned", "mcpdrift.fp.t.s.12", "mcpdrift.fp.t.s", 12},
		{"list_plain", "mcpdrift.obs.list.t.s", "mcpdrift.obs.list.t.s", -1},
		{"fp_plain", "mcpdrift.fp.t.s", "mcpdrift.fp.t.s", -1},
		{"server_named_like_a_number", "mcpdrift.fp.t.7", "mcpdrift.fp.t.7", -1},
		{"not_a_number", "mcpdrift.fp.t.s.x", "mcpdrift.fp.t.s.x", -1},
		{"leading_zero", "mcpdrift.fp.t.s.03", "mcpdrift.fp.t.s.03", -1},
		{"too_large", "mcpdrift.fp.t.s.99999", "mcpdrift.fp.t.s.99999", -1},
		{"verdict", "mcpdrift.drift.t.s", "mcpdrift.drift.t.s", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, part := bus.SplitPartition(tc.subject)
			if base != tc.base || part != tc.part {
				t.Fatalf("SplitPartition(%q) = %q, %d; want %q, %d", tc.subject, base, part, tc.base, tc.part)
			}
		})
	}
}

func TestParsePartitionSet(t *testing.T) {
	for _, tc := range []struct {
		name, set string
		want      []int
		ok        bool
	}{
		{"empty_is_all", "", nil, true},
		{"list", "0,2", []int{0, 2}, true},
		{"range", "1-3", []int{1, 2, 3}, true},
		{"mixed_dup", "3, 0-1,1", []int{3, 0, 1}, true},
		{"out_of_range", "4", nil, false},
		{"backwards", "3-1", nil, false},
		{"junk", "a", nil, false},
		{"negative", "-1", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bus.ParsePartitionSet(tc.set, 4)
			if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
				t.Fatalf("ParsePartitionSet(%q, 4) = %v, %v; want %v (ok %v)", tc.set, got, err, tc.want, tc.ok)
			}
		})
	}
}

// instance is one consuming instance of a partitioned service: a Router
// on its own connection with the partition routes of its set, recording
// which server's messages it handled, in order.
type instance struct {
	name string
	mu   sync.Mutex
	got  map[string][]string // server -> payloads
	stop func() error
}

func (in *instance) handled() map[string][]string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string][]string, len(in.got))
	for k, v := range in.got {
		out[k] = slices.Clone(v)
	}
	return out
}

func startInstance(t *testing.T, srv *natstest.Server, name string, p int, set []int) *instance {
	t.Helper()
	_, js := srv.Connect(t)
	in := &instance{name: name, got: map[string][]string{}}
	cc := jetstream.ConsumerConfig{Durable: "parttest", Description: "partition test", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 5, FilterSubject: bus.Prefix + ".obs.list.>"}
	router, err := bus.NewRouter(bus.RouterConfig{
		Settle: bus.SettleConfig{Service: routerService, MaxDeliver: 5, Timeout: 5 * time.Second,
			Backoff: bus.Backoff(300*time.Millisecond, time.Second)},
		Routes:       bus.PartitionRoutes(bus.StreamObservations, cc, 16, bus.Prefix+".obs.list.*.*", p, set),
		DrainTimeout: 5 * time.Second,
	}, bus.SettleDeps{JS: js, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)},
		bus.Lanes(4, bus.Settling(func(_ context.Context, msg jetstream.Msg) error {
			base, _ := bus.SplitPartition(msg.Subject())
			in.mu.Lock()
			defer in.mu.Unlock()
			in.got[base] = append(in.got[base], string(msg.Data()))
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	in.stop = runRouter(t, name+": ", router)
	return in
}

// TestPartitionedInstances: two instances on disjoint partition sets both
// consume; a third that takes every partition stands by, since NATS pins
// each partition's consumer to the instance that took it first; each
// server's observations are handled at one instance only, in the order
// published; when an instance shuts down, the standby takes its partitions
// over at once (it unpins), well before the pin would expire.
func TestPartitionedInstances(t *testing.T) {
	const p = 4
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := bus.Setup(ctx, js, bus.Config{Partitions: p}); err != nil {
		t.Fatal(err)
	}
	const servers = 16
	seq := 0
	publish := func(rounds int) {
		t.Helper()
		for range rounds {
			seq++
			for i := range servers {
				id := fmt.Sprintf("s%d-%d", i, seq)
				if _, err := bus.Publish(ctx, js, bus.ListObservationSubject("acme", "s"+strconv.Itoa(i)), []byte(id), id); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	total := func(ins ...*instance) int {
		n := 0
		for _, in := range ins {
			for _, v := range in.handled() {
				n += len(v)
			}
		}
		return n
	}

	a := startInstance(t, srv, "a", p, []int{0, 1})
	b := startInstance(t, srv, "b", p, []int{2, 3})
	publish(10)
	poll.Eventually(t, 20*time.Second, func() error {
		if n := total(a, b); n != 10*servers {
			return fmt.Errorf("a and b handled %d, want %d", n, 10*servers)
		}
		return nil
	})
	if len(a.handled()) == 0 || len(b.handled()) == 0 {
		t.Fatalf("a handled %d servers, b %d: want both to consume", len(a.handled()), len(b.handled()))
	}

	standby := startInstance(t, srv, "standby", p, nil)
	time.Sleep(500 * time.Millisecond) // let the standby's pulls wait on every partition
	publish(10)
	poll.Eventually(t, 20*time.Second, func() error {
		if n := total(a, b, standby); n != 20*servers {
			return fmt.Errorf("handled %d, want %d", n, 20*servers)
		}
		return nil
	})
	if n := total(standby); n != 0 {
		t.Fatalf("the standby handled %d while a and b held their partitions: want 0", n)
	}

	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publish(10)
	poll.Eventually(t, bus.PinnedTTL/2, func() error {
		if n := total(a, b, standby); n != 30*servers {
			return fmt.Errorf("handled %d, want %d", n, 30*servers)
		}
		return nil
	})
	t.Logf("the standby took a's partitions over in %v", time.Since(start).Round(time.Millisecond))

	// Each server at one instance at a time (a's went to the standby after
	// a stopped, b's never moved), in the order published.
	for _, in := range []*instance{a, standby} {
		for server := range in.handled() {
			if _, ok := b.handled()[server]; ok {
				t.Errorf("%s handled at %s and at b", server, in.name)
			}
		}
	}
	for i := range servers {
		server := bus.ListObservationSubject("acme", "s"+strconv.Itoa(i))
		var all []string
		for _, in := range []*instance{a, standby, b} { // a before the standby: a handled the first ones
			all = append(all, in.handled()[server]...)
		}
		var want []string
		for n := 1; n <= 30; n++ {
			want = append(want, fmt.Sprintf("s%d-%d", i, n))
		}
		if !slices.Equal(all, want) {
			t.Errorf("%s handled %q, want %q", server, all, want)
		}
	}
}
