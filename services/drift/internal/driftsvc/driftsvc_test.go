package driftsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// env is one in-process NATS with the buses set up.
type env struct {
	t   *testing.T
	srv *natstest.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	h   *bus.Handles
	// items: the item hashes of each manifest stored, by surface hash,
	// which a fingerprint of it carries as the fingerprint service's do.
	items sync.Map
	// legacy: manifests are fingerprinted in form mcpdrift/v1, as the
	// fingerprint service did before forms were named.
	legacy bool
}

// form is the form the env's fingerprints are made in.
func (e *env) form() surface.Form {
	if e.legacy {
		return surface.FormV1
	}
	return surface.FormLatest
}

// stored remembers a stored manifest's item hashes for its fingerprints.
func (e *env) stored(sf *surface.Surface) {
	items := make([]*mcpdriftv1.ItemHash, len(sf.Items))
	for i, it := range sf.Items {
		items[i] = &mcpdriftv1.ItemHash{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
	}
	e.items.Store(sf.Hash.String(), items)
}

// itemsOf returns the item hashes of a stored manifest (nil for a hash
// that is not one).
func (e *env) itemsOf(hash string) []*mcpdriftv1.ItemHash {
	v, _ := e.items.Load(hash)
	items, _ := v.([]*mcpdriftv1.ItemHash)
	return items
}

func newEnv(t *testing.T) *env {
	t.Helper()
	b := natstest.StartBus(t)
	return &env{t: t, srv: b.Server, nc: b.NC, js: b.JS, h: b.Handles}
}

// start runs a drift service until the test ends (or stop is called).
func (e *env) start(cfg Config) (*Service, context.CancelFunc) {
	e.t.Helper()
	svc, err := New(cfg, Deps{JS: e.js, Handles: e.h, Log: zerolog.Nop()})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc, e.run(svc)
}

// run runs svc until the test ends (or the returned stop is called).
func (e *env) run(svc *Service) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}
	var once sync.Once
	e.t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

// manifest stores a real capture and returns its fingerprint.
func (e *env) manifest(path string) string {
	e.t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := surface.Parse(raw, surface.Options{Form: e.form()})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.h.Manifests.PutBytes(context.Background(), bus.ManifestName(s.Hash.String()), raw); err != nil {
		e.t.Fatal(err)
	}
	e.stored(s)
	return s.Hash.String()
}

func (e *env) publish(server, eventID, hash, errCode string, at time.Time, msgID string) {
	e.t.Helper()
	fp := &mcpdriftv1.Fingerprint{CanonicalForm: status.FormName(e.form()), EventId: eventID, Tenant: "acme", Server: server, Variant: "v0", Proxy: "p1",
		ObservedAtUnixMs: at.UnixMilli(), SurfaceHash: hash, ErrorCode: errCode, Items: e.itemsOf(hash)}
	data, err := proto.Marshal(fp)
	if err != nil {
		e.t.Fatal(err)
	}
	if msgID == "" {
		msgID = eventID
	}
	if _, err := bus.Publish(context.Background(), e.js, bus.FingerprintSubject("acme", server), data, msgID); err != nil {
		e.t.Fatal(err)
	}
}

// wait bounds every poll: it only stops a hung test.
const wait = 10 * time.Second

// hasRecord returns nil when the default variant's record of server
// satisfies cond (named by want), and otherwise the record seen.
func (e *env) hasRecord(svc *Service, server, want string, cond func(*state.Record) bool) func() error {
	return func() error {
		if r := e.record(svc, server); r == nil || !cond(r) {
			return fmt.Errorf("record of %s: %+v, want %s", server, r, want)
		}
		return nil
	}
}

// hasVerdict returns nil once a verdict matching cond (named by want) is
// on the bus, and otherwise the verdicts seen.
func (e *env) hasVerdict(want string, cond func(map[string]any) bool) func() error {
	return func() error {
		vs := e.verdicts()
		for _, v := range vs {
			if cond(v) {
				return nil
			}
		}
		return fmt.Errorf("no verdict with %s among %d: %v", want, len(vs), vs)
	}
}

func (e *env) record(svc *Service, server string) *state.Record {
	rec, err := svc.Get(context.Background(), "acme", server, "v0")
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// consumerDone reports whether the drift consumer has settled every message
// in the stream: its ack floor has reached the stream's last sequence.
// consumerDone returns nil when the drift consumer has acked every
// fingerprint, and otherwise what it holds.
func (e *env) consumerDone() error {
	ctx := context.Background()
	st, err := e.js.Stream(ctx, bus.StreamFingerprints)
	if err != nil {
		return err
	}
	sinfo, err := st.Info(ctx)
	if err != nil {
		return err
	}
	c, err := e.js.Consumer(ctx, bus.StreamFingerprints, bus.ConsumerDrift)
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream < sinfo.State.LastSeq {
		return fmt.Errorf("consumer %s: %d unacked, %d pending, ack floor %d of %d",
			bus.ConsumerDrift, info.NumAckPending, info.NumPending, info.AckFloor.Stream, sinfo.State.LastSeq)
	}
	return nil
}

func (e *env) verdicts() []map[string]any {
	s, err := e.js.Stream(context.Background(), bus.StreamVerdicts)
	if err != nil {
		e.t.Fatal(err)
	}
	info, _ := s.Info(context.Background())
	var out []map[string]any
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(m.Data, &v); err != nil {
			e.t.Fatalf("verdict is not plain JSON: %v", err)
		}
		out = append(out, v)
	}
	return out
}

const (
	fixA = "../../../internal/surface/testdata/real/memory/2025.8.4.json"
	fixB = "../../../internal/surface/testdata/real/memory/2025.9.25.json"
	fixC = "../../../internal/surface/testdata/real/memory/2026.8.31.json"
)

func TestDriftLifecycle(t *testing.T) {
	e := newEnv(t)
	a, b := e.manifest(fixA), e.manifest(fixB)
	svc, _ := e.start(Config{})
	t0 := time.Now()

	e.publish("mem", "o1", a, "", t0, "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "verified", func(r *state.Record) bool { return r.Status == state.Verified }))

	e.publish("mem", "o2", b, "", t0.Add(time.Second), "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "changed", func(r *state.Record) bool { return r.Status == state.Changed }))
	r := e.record(svc, "mem")
	if r.Severity != "medium" || r.Serve() || r.BaselineHash != a || r.LiveHash != b || r.DriftAtMs == 0 {
		t.Fatalf("after drift: %+v", r)
	}

	// Reverting does not restore it.
	e.publish("mem", "o3", a, "", t0.Add(2*time.Second), "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "live back to the baseline", func(r *state.Record) bool { return r.LiveHash == a }))
	if s := e.record(svc, "mem").Status; s != state.Changed {
		t.Fatalf("a revert changed the status to %s", s)
	}
	e.publish("mem", "o4", b, "", t0.Add(3*time.Second), "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "live b", func(r *state.Record) bool { return r.LiveHash == b }))

	ctx := context.Background()
	_, rep, err := svc.Diff(ctx, "acme", "mem", "")
	if err != nil || !rep.Drift || len(rep.Changed) == 0 {
		t.Fatalf("Diff: %v %+v", err, rep)
	}
	if _, _, err := svc.Approve(ctx, "acme", "mem", "v0", a, "alice"); Code(err) != "stale_hash" {
		t.Fatalf("approving a hash that is not live: %v", err)
	}
	v, approved, err := svc.Approve(ctx, "acme", "mem", "", b, "alice")
	if err != nil || len(approved) != 1 || approved[0] != "v0" {
		t.Fatalf("Approve: %v %v", err, approved)
	}
	if rec := v.Variants[0]; rec.Status != state.Verified || rec.BaselineVersion != 2 || rec.ApprovedBy != "alice" {
		t.Fatalf("Approve: %+v", rec)
	}
	hists, err := svc.History(ctx, "acme", "mem", "")
	if err != nil || len(hists) != 1 {
		t.Fatalf("History: %v %+v", err, hists)
	}
	if hist := hists[0].Baselines; len(hist) != 2 || hist[0].Hash != a || hist[1].Hash != b || hist[0].ApprovedBy != state.ActorTOFU {
		t.Fatalf("History: %+v", hist)
	}

	if _, err := svc.Quarantine(ctx, "acme", "mem", "bob", "incident", false); err != nil {
		t.Fatal(err)
	}
	e.publish("mem", "o5", b, "", t0.Add(4*time.Second), "")
	poll.Eventually(t, wait, e.consumerDone)
	if s := e.record(svc, "mem").Status; s != state.Quarantined {
		t.Fatalf("an observation lifted the quarantine: %s", s)
	}

	// Every status change went out as plain JSON.
	var statuses []string
	for _, v := range e.verdicts() {
		statuses = append(statuses, fmt.Sprint(v["status"]))
	}
	want := "[STATUS_VERIFIED STATUS_CHANGED STATUS_CHANGED STATUS_CHANGED STATUS_VERIFIED STATUS_QUARANTINED]"
	if fmt.Sprint(statuses) != want {
		t.Fatalf("verdicts %v, want %s", statuses, want)
	}
}

func TestStrictAndUnfingerprintable(t *testing.T) {
	e := newEnv(t)
	a := e.manifest(fixA)
	svc, _ := e.start(Config{Policy: state.Policy{Posture: state.Strict, OnDrift: state.Block}})
	e.publish("s1", "o1", a, "", time.Now(), "")
	e.publish("s2", "o2", "", "duplicate_item", time.Now(), "")
	poll.Eventually(t, wait, e.consumerDone)
	if r := e.record(svc, "s1"); r.Status != state.Pending || r.Serve() {
		t.Fatalf("strict first sight: %+v", r)
	}
	r := e.record(svc, "s2")
	if r.Status != state.Pending || r.Reason != state.ReasonUnfingerprintable {
		t.Fatalf("unfingerprintable first sight: %+v", r)
	}
	if _, _, err := svc.Approve(context.Background(), "acme", "s2", "v0", "", "alice"); Code(err) != "unfingerprintable" {
		t.Fatalf("approving an unfingerprintable manifest: %v", err)
	}
	if v, _, err := svc.Approve(context.Background(), "acme", "s1", "", a, "alice"); err != nil || v.Variants[0].Status != state.Verified || v.Variants[0].BaselineVersion != 1 {
		t.Fatalf("approving a pending server: %v %+v", err, v)
	}
}

// Two drift writers and two different first manifests at once: exactly one
// becomes the baseline, the other is drift.
func TestConcurrentFirstManifests(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			e := newEnv(t)
			a, b := e.manifest(fixA), e.manifest(fixB)
			svc1, _ := e.start(Config{})
			e.start(Config{})
			at := time.Now()
			var wg sync.WaitGroup
			for i, h := range []string{a, b} {
				wg.Add(1)
				go func() { defer wg.Done(); e.publish("race", fmt.Sprint("first-", i), h, "", at, "") }()
			}
			wg.Wait()
			poll.Eventually(t, wait, e.hasRecord(svc1, "race", "both applied", func(r *state.Record) bool { return len(r.Applied) == 2 }))
			r := e.record(svc1, "race")
			if r.Status != state.Changed || r.BaselineVersion != 1 || r.BaselineHash == r.LiveHash {
				t.Fatalf("after two first manifests: %+v", r)
			}
			if _, err := e.h.Baselines.Get(context.Background(), bus.BaselineKey("acme", "race", "v0", 2)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("a second baseline version exists: %v", err)
			}
		})
	}
}

func TestRedeliveryAndRestart(t *testing.T) {
	e := newEnv(t)
	hashes := []string{e.manifest(fixA), e.manifest(fixB), e.manifest(fixC)}
	svc, stop := e.start(Config{})
	t0 := time.Now()
	// The same event published again after a dedup window (new message id):
	// one transition, no version bump.
	e.publish("r", "o1", hashes[0], "", t0, "")
	e.publish("r", "o1", hashes[0], "", t0, "retry-o1")
	e.publish("r", "o2", hashes[1], "", t0.Add(time.Second), "")
	e.publish("r", "o2", hashes[1], "", t0.Add(time.Second), "retry-o2")
	poll.Eventually(t, wait, e.consumerDone)
	stop()

	// Published while no drift service runs; a new one picks them up.
	e.publish("r", "o3", hashes[2], "", t0.Add(2*time.Second), "")
	e.publish("r", "o2", hashes[1], "", t0.Add(time.Second), "retry2-o2") // late and old
	svc2, _ := e.start(Config{})
	poll.Eventually(t, wait, e.consumerDone)
	r := e.record(svc2, "r")
	if r.Status != state.Changed || r.BaselineVersion != 1 || r.LiveHash != hashes[2] {
		t.Fatalf("after restart: %+v", r)
	}
	if n := len(e.verdicts()); n != 3 {
		t.Fatalf("%d verdicts, want 3 (first baseline, drift, live moved)", n)
	}
	_ = svc
	if st := svc2.Stats(); st.Applied != 1 || st.Redelivered != 1 {
		t.Fatalf("restarted service stats %+v, want 1 applied and 1 redelivery", st)
	}
}

func TestPoisonIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	a := e.manifest(fixA)
	sub, err := e.nc.SubscribeSync(bus.DeadLetterSubject("drift"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	svc, _ := e.start(Config{})
	if _, err := bus.Publish(context.Background(), e.js, bus.FingerprintSubject("acme", "x"), []byte("not protobuf \xff"), "junk"); err != nil {
		t.Fatal(err)
	}
	// A body that names another server than its subject.
	other, _ := proto.Marshal(&mcpdriftv1.Fingerprint{CanonicalForm: surface.FormLatest.String(), EventId: "o0", Tenant: "acme", Server: "victim", Variant: "v0", SurfaceHash: a})
	if _, err := bus.Publish(context.Background(), e.js, bus.FingerprintSubject("acme", "x"), other, "o0"); err != nil {
		t.Fatal(err)
	}
	e.publish("x", "o1", a, "", time.Now(), "")
	for _, code := range []string{"malformed_event", "subject_mismatch"} {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(msg.Data, []byte(`"error_code":"`+code+`"`)) {
			t.Fatalf("dead letter: %s, want %s", msg.Data, code)
		}
	}
	if r := e.record(svc, "victim"); r != nil {
		t.Fatalf("a mismatched fingerprint created a record: %+v", r)
	}
	poll.Eventually(t, wait, e.hasRecord(svc, "x", "the valid event applied after the poison one", func(*state.Record) bool { return true }))
}

// TestStopWhileStarting: a service asked to stop at any point of its start
// (creating its consumer, starting its status watch) returns nil, not the
// error of the step the stop interrupted.
func TestStopWhileStarting(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		svc, err := New(Config{Durable: fmt.Sprintf("drift-stop-%d", i)}, Deps{JS: e.js, Handles: e.h, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		time.Sleep(time.Duration(i) * time.Millisecond) // a stop at a different point of the start each time
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("stopped %d ms into its start: %v", i, err)
		}
	}
}
