package fpsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

const fixture = "../../../internal/surface/testdata/real/memory/2025.9.25.json"

// testConfig retries fast so that tests finish quickly.
var testConfig = Config{
	AckWait:       5 * time.Second,
	OpTimeout:     2 * time.Second,
	RetryDelay:    10 * time.Millisecond,
	MaxRetryDelay: 50 * time.Millisecond,
	DrainTimeout:  5 * time.Second,
}

type env struct {
	nc *nats.Conn
	js jetstream.JetStream
	h  *bus.Handles
}

func newEnv(t *testing.T) *env {
	t.Helper()
	b := natstest.StartBus(t)
	return &env{nc: b.NC, js: b.JS, h: b.Handles}
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// start runs a Service until the test ends; stop cancels it and returns
// Run's error.
func (e *env) start(t *testing.T, cfg Config, d Deps) (svc *Service, stop func() error) {
	t.Helper()
	if d.JS == nil {
		d.JS = e.js
	}
	if d.Manifests == nil {
		d.Manifests = NewObjectManifests(e.js, e.h.Manifests)
	}
	d.Log = testLogger(t)
	svc, err := New(cfg, d)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var stopped atomic.Bool
	var runErr error
	stop = func() error {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return 30s after cancel")
			}
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return svc, stop
}

func readFixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func observation(id string, capture []byte) *mcpdriftv1.ListObservation {
	return &mcpdriftv1.ListObservation{
		EventId: id, Tenant: "acme", Server: "memory", Proxy: "proxy-1", Variant: "v2025",
		ObservedAtUnixMs: 1_750_000_000_000, Capture: capture,
	}
}

func publishObs(t testing.TB, js jetstream.JetStream, obs *mcpdriftv1.ListObservation, msgID string) {
	t.Helper()
	data, err := proto.Marshal(obs)
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, js, bus.ListObservationSubject(obs.Tenant, obs.Server), data, msgID)
}

func publishRaw(t testing.TB, js jetstream.JetStream, subject string, data []byte, msgID string) uint64 {
	t.Helper()
	ack, err := bus.Publish(context.Background(), js, subject, data, msgID)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// wait bounds every poll: it only stops a hung test.
const wait = 20 * time.Second

// hasMsgs says how many messages stream holds when it is not n.
func hasMsgs(t testing.TB, js jetstream.JetStream, stream string, n uint64) error {
	t.Helper()
	if got := streamMsgs(t, js, stream); got != n {
		return fmt.Errorf("%s holds %d messages, want %d", stream, got, n)
	}
	return nil
}

func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// stored returns every message of a stream, in order.
func stored(t testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
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
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func fingerprints(t testing.TB, js jetstream.JetStream) []*mcpdriftv1.Fingerprint {
	t.Helper()
	var out []*mcpdriftv1.Fingerprint
	for _, m := range stored(t, js, bus.StreamFingerprints) {
		fp := new(mcpdriftv1.Fingerprint)
		if err := proto.Unmarshal(m.Data, fp); err != nil {
			t.Fatalf("fingerprint at seq %d is not binary protobuf: %v", m.Sequence, err)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != fp.EventId {
			t.Errorf("fingerprint %s published with message id %q", fp.EventId, got)
		}
		if want := bus.FingerprintSubject(fp.Tenant, fp.Server); m.Subject != want {
			t.Errorf("fingerprint %s on %s, want %s", fp.EventId, m.Subject, want)
		}
		out = append(out, fp)
	}
	return out
}

// hasDeadLetters says how many dead letters there are when there are not n.
func hasDeadLetters(t testing.TB, js jetstream.JetStream, n int) error {
	t.Helper()
	if dls := deadLetters(t, js); len(dls) != n {
		return fmt.Errorf("%d dead letters %v, want %d", len(dls), dls, n)
	}
	return nil
}

func deadLetters(t testing.TB, js jetstream.JetStream) []*mcpdriftv1.DeadLetter {
	t.Helper()
	var out []*mcpdriftv1.DeadLetter
	for _, m := range stored(t, js, bus.StreamAdmin) {
		if m.Subject != bus.DeadLetterSubject(ServiceName) {
			continue
		}
		var plain map[string]any
		if err := json.Unmarshal(m.Data, &plain); err != nil {
			t.Fatalf("dead letter is not JSON: %v\n%s", err, m.Data)
		}
		dl := new(mcpdriftv1.DeadLetter)
		if err := bus.UnmarshalJSON(m.Data, dl); err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != dl.EventId {
			t.Errorf("dead letter %s published with message id %q", dl.EventId, got)
		}
		out = append(out, dl)
	}
	return out
}

// consumerIdle returns nil when the durable consumer has nothing pending or
// unacked, and otherwise what it has.
func consumerIdle(t testing.TB, js jetstream.JetStream) error {
	t.Helper()
	c, err := js.Consumer(context.Background(), bus.StreamObservations, DefaultConfig.Durable)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", DefaultConfig.Durable, err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		return fmt.Errorf("consumer %s: %d pending, %d unacked, %d redelivered, want none",
			DefaultConfig.Durable, info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	return nil
}

// terminations subscribes to the server's advisories for terminated messages.
func terminations(t *testing.T, nc *nats.Conn) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + bus.StreamObservations + "." + DefaultConfig.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

func TestFingerprintsRealCapture(t *testing.T) {
	e := newEnv(t)
	capture := readFixture(t)
	// A server without a policy is hashed by the defaults: the newest form.
	want, err := surface.Parse(capture, surface.Options{Form: surface.FormLatest})
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := e.start(t, testConfig, Deps{})
	obs := observation("obs-1", capture)
	publishObs(t, e.js, obs, obs.EventId)

	poll.Eventually(t, wait, func() error { return hasMsgs(t, e.js, bus.StreamFingerprints, 1) })
	fp := fingerprints(t, e.js)[0]
	if fp.ErrorCode != "" {
		t.Fatalf("error %s: %s", fp.ErrorCode, fp.ErrorMessage)
	}
	if fp.SurfaceHash != want.Hash.String() || fp.CanonicalForm != status.FormLatest {
		t.Errorf("surface_hash %s form %q, want %s %q", fp.SurfaceHash, fp.CanonicalForm, want.Hash, status.FormLatest)
	}
	if fp.EventId != "fp-obs-1" || fp.ObservationId != "obs-1" || fp.Tenant != "acme" || fp.Server != "memory" ||
		fp.Proxy != "proxy-1" || fp.Variant != "v2025" || fp.ObservedAtUnixMs != obs.ObservedAtUnixMs {
		t.Errorf("identity fields: %v", fp)
	}
	if len(fp.Items) != len(want.Items) {
		t.Fatalf("%d items, want %d", len(fp.Items), len(want.Items))
	}
	for i, it := range want.Items {
		got := fp.Items[i]
		if got.Kind != it.Kind.String() || got.Name != it.Name || got.Hash != it.Hash.String() {
			t.Errorf("item %d: %s %q %s, want %s %q %s", i, got.Kind, got.Name, got.Hash, it.Kind, it.Name, it.Hash)
		}
	}
	manifest, err := e.h.Manifests.GetBytes(context.Background(), bus.ManifestName(fp.SurfaceHash))
	if err != nil {
		t.Fatalf("manifest %s: %v", bus.ManifestName(fp.SurfaceHash), err)
	}
	if !bytes.Equal(manifest, capture) {
		t.Error("stored manifest differs from the capture")
	}
	poll.Eventually(t, wait, func() error { return consumerIdle(t, e.js) })
	if st := svc.Stats(); st != (Stats{Processed: 1}) {
		t.Errorf("stats %+v", st)
	}
}

func TestPoisonIsTerminated(t *testing.T) {
	valid := readFixture(t)
	marshal := func(o *mcpdriftv1.ListObservation) []byte {
		b, err := proto.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	with := func(f func(*mcpdriftv1.ListObservation)) []byte {
		o := observation("bad-1", valid)
		f(o)
		return marshal(o)
	}
	for _, tc := range []struct {
		name string
		data []byte
		code string
	}{
		{"garbage", []byte("\xff\xff\xff not protobuf"), bus.CodeMalformedEvent},
		{"json_instead_of_protobuf", []byte(`{"event_id":"x"}`), bus.CodeMalformedEvent},
		{"empty_event_id", with(func(o *mcpdriftv1.ListObservation) { o.EventId = "" }), bus.CodeMalformedEvent},
		{"event_id_with_newline", with(func(o *mcpdriftv1.ListObservation) { o.EventId = "a\r\nb" }), bus.CodeInvalidID},
		{"event_id_too_long", with(func(o *mcpdriftv1.ListObservation) { o.EventId = strings.Repeat("e", 201) }), bus.CodeInvalidID},
		{"tenant_with_space", with(func(o *mcpdriftv1.ListObservation) { o.Tenant = "acme corp" }), bus.CodeInvalidID},
		{"variant_with_dot", with(func(o *mcpdriftv1.ListObservation) { o.Variant = "a.b" }), bus.CodeInvalidID},
		{"other_tenant_in_body", with(func(o *mcpdriftv1.ListObservation) { o.Tenant = "globex" }), bus.CodeSubjectMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			terms := terminations(t, e.nc)
			svc, _ := e.start(t, testConfig, Deps{})

			badSeq := publishRaw(t, e.js, bus.ListObservationSubject("acme", "memory"), tc.data, "bad")
			good := observation("good-1", valid)
			publishObs(t, e.js, good, good.EventId)

			poll.Eventually(t, wait, func() error { return hasMsgs(t, e.js, bus.StreamFingerprints, 1) })
			if fp := fingerprints(t, e.js)[0]; fp.EventId != "fp-good-1" || fp.ErrorCode != "" {
				t.Fatalf("fingerprint %s error %q", fp.EventId, fp.ErrorCode)
			}
			poll.Eventually(t, wait, func() error { return hasDeadLetters(t, e.js, 1) })
			dl := deadLetters(t, e.js)[0]
			wantID := fmt.Sprintf("dead-fingerprint-%s-%d", bus.StreamObservations, badSeq)
			if dl.ErrorCode != tc.code || dl.EventId != wantID || dl.Service != ServiceName ||
				dl.StreamSequence != fmt.Sprint(badSeq) || dl.Subject != bus.ListObservationSubject("acme", "memory") ||
				dl.ErrorMessage == "" || dl.AtUnixMs == 0 {
				t.Errorf("dead letter %+v, want code %s id %s", dl, tc.code, wantID)
			}
			adv, err := terms.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("no termination advisory: %v", err)
			}
			var a struct {
				StreamSeq uint64 `json:"stream_seq"`
				Reason    string `json:"reason"`
			}
			if err := json.Unmarshal(adv.Data, &a); err != nil {
				t.Fatal(err)
			}
			if a.StreamSeq != badSeq || a.Reason != tc.code {
				t.Errorf("terminated seq %d reason %q, want %d %q", a.StreamSeq, a.Reason, badSeq, tc.code)
			}
			poll.Eventually(t, wait, func() error { return consumerIdle(t, e.js) })
			if st := svc.Stats(); st != (Stats{Processed: 1, Poison: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestRejectedSurfaceIsPublished(t *testing.T) {
	for _, tc := range []struct {
		name    string
		capture string
		code    surface.Code
	}{
		{"duplicate_tool_names", `{"tools":{"pages":[{"tools":[{"name":"read","inputSchema":{"type":"object"}},{"name":"read","inputSchema":{"type":"object","properties":{"to":{"type":"string"}}}}]}]}}`, surface.CodeDuplicateItem},
		{"duplicate_keys", `{"tools":{"pages":[{"tools":[{"name":"read","name":"exfiltrate","inputSchema":{"type":"object"}}]}]}}`, "duplicate_key"},
		{"last_page_has_cursor", `{"tools":{"pages":[{"tools":[],"nextCursor":"2"}]}}`, surface.CodeIncomplete},
		{"not_json", `{"tools":`, "invalid_json"},
		{"empty_capture", ``, "invalid_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			svc, _ := e.start(t, testConfig, Deps{})
			publishObs(t, e.js, observation("obs-1", []byte(tc.capture)), "obs-1")
			poll.Eventually(t, wait, func() error { return hasMsgs(t, e.js, bus.StreamFingerprints, 1) })
			fp := fingerprints(t, e.js)[0]
			if fp.ErrorCode != string(tc.code) || fp.ErrorMessage == "" || strings.HasPrefix(fp.ErrorMessage, string(tc.code)) {
				t.Errorf("error_code %q message %q, want code %q and a sentence", fp.ErrorCode, fp.ErrorMessage, tc.code)
			}
			if fp.SurfaceHash != "" || len(fp.Items) != 0 {
				t.Errorf("a rejected surface has hash %q and %d items", fp.SurfaceHash, len(fp.Items))
			}
			if fp.EventId != "fp-obs-1" || fp.Tenant != "acme" || fp.Variant != "v2025" {
				t.Errorf("identity fields: %v", fp)
			}
			poll.Eventually(t, wait, func() error { return consumerIdle(t, e.js) })
			if names, err := e.h.Manifests.List(context.Background()); !errors.Is(err, jetstream.ErrNoObjectsFound) {
				t.Errorf("a rejected surface stored manifests %v (%v)", names, err)
			}
			if st := svc.Stats(); st != (Stats{Processed: 1, Rejected: 1}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// A proxy that retries after the duplicate window publishes the same
// observation under a new message id: the fingerprint is stored once.
func TestDuplicateObservationFingerprintedOnce(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.start(t, testConfig, Deps{})
	obs := observation("obs-1", readFixture(t))
	publishObs(t, e.js, obs, "msg-a")
	publishObs(t, e.js, obs, "msg-b")
	if n := streamMsgs(t, e.js, bus.StreamObservations); n != 2 {
		t.Fatalf("%d observations stored, want 2", n)
	}
	poll.Eventually(t, wait, func() error {
		if st := svc.Stats(); st.Processed != 2 {
			return fmt.Errorf("stats %+v, want 2 processed", st)
		}
		return consumerIdle(t, e.js)
	})
	fps := fingerprints(t, e.js)
	if len(fps) != 1 || fps[0].EventId != "fp-obs-1" {
		t.Fatalf("%d fingerprints stored for one observation, want 1", len(fps))
	}
}

func TestInstancesShareTheConsumer(t *testing.T) {
	const n = 200
	e := newEnv(t)
	cfg := testConfig
	cfg.Workers, cfg.Prefetch = 4, 8
	a, _ := e.start(t, cfg, Deps{})
	b, _ := e.start(t, cfg, Deps{})
	poll.Eventually(t, wait, func() error {
		c, err := e.js.Consumer(context.Background(), bus.StreamObservations, DefaultConfig.Durable)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumWaiting < 2 {
			return fmt.Errorf("%d pull requests waiting, want both instances'", info.NumWaiting)
		}
		return nil
	})
	capture := readFixture(t)
	for i := range n {
		publishObs(t, e.js, observation(fmt.Sprintf("obs-%03d", i), capture), fmt.Sprintf("obs-%03d", i))
	}
	poll.Eventually(t, wait, func() error {
		if got := a.Stats().Processed + b.Stats().Processed; got < n {
			return fmt.Errorf("%d observations processed, want %d", got, n)
		}
		return consumerIdle(t, e.js)
	})
	seen := map[string]int{}
	for _, fp := range fingerprints(t, e.js) {
		seen[fp.EventId]++
	}
	for i := range n {
		if id := fmt.Sprintf("fp-obs-%03d", i); seen[id] != 1 {
			t.Errorf("%s stored %d times", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct fingerprints, want %d", len(seen), n)
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("instance a processed %d, b %d", sa.Processed, sb.Processed)
	if sa.Processed == 0 || sb.Processed == 0 {
		t.Errorf("one instance did all the work: a %d, b %d", sa.Processed, sb.Processed)
	}
}

// flakyStore fails the first failHas Has calls and failPut Put calls.
type flakyStore struct {
	ManifestStore
	failHas, failPut atomic.Int64
	puts             atomic.Int64
	onPut            func(n int64)
}

var errInjected = errors.New("injected failure")

func (s *flakyStore) Has(ctx context.Context, name string) (bool, error) {
	if s.failHas.Add(-1) >= 0 {
		return false, errInjected
	}
	return s.ManifestStore.Has(ctx, name)
}

func (s *flakyStore) Put(ctx context.Context, name string, data []byte) error {
	if s.failPut.Add(-1) >= 0 {
		return errInjected
	}
	err := s.ManifestStore.Put(ctx, name, data)
	if n := s.puts.Add(1); s.onPut != nil {
		s.onPut(n)
	}
	return err
}

// flakyJS fails the first failPub asynchronous publishes, in one of three
// ways: refused at once, answered with an error, or never answered.
type flakyJS struct {
	jetstream.JetStream
	failPub atomic.Int64
	mode    string // "refuse", "error" or "silence"
}

func (j *flakyJS) PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if j.failPub.Add(-1) < 0 {
		return j.JetStream.PublishAsync(subj, data, opts...)
	}
	f := &fakeFuture{msg: &nats.Msg{Subject: subj, Data: data}, ok: make(chan *jetstream.PubAck), err: make(chan error, 1)}
	switch j.mode {
	case "refuse":
		return nil, errInjected
	case "error":
		f.err <- errInjected
	}
	return f, nil
}

type fakeFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFuture) Err() <-chan error            { return f.err }
func (f *fakeFuture) Msg() *nats.Msg               { return f.msg }

func TestTransientFailureIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		failHas, failPut, failPub int64
		pubMode                   string
		retries                   uint64
		slow                      bool // waits out OpTimeout
	}{
		{name: "store_put_fails_twice", failPut: 2, retries: 2},
		{name: "store_has_fails_twice", failHas: 2, retries: 2},
		{name: "publish_refused_twice", failPub: 2, pubMode: "refuse", retries: 2},
		{name: "publish_answered_with_error_twice", failPub: 2, pubMode: "error", retries: 2},
		{name: "publish_never_answered", failPub: 1, pubMode: "silence", retries: 1, slow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			store := &flakyStore{ManifestStore: NewObjectManifests(e.js, e.h.Manifests)}
			store.failHas.Store(tc.failHas)
			store.failPut.Store(tc.failPut)
			js := &flakyJS{JetStream: e.js, mode: tc.pubMode}
			js.failPub.Store(tc.failPub)
			svc, _ := e.start(t, testConfig, Deps{JS: js, Manifests: store})

			began := time.Now()
			publishObs(t, e.js, observation("obs-1", readFixture(t)), "obs-1")
			poll.Eventually(t, wait, func() error {
				if st := svc.Stats(); st.Processed != 1 {
					return fmt.Errorf("stats %+v, want 1 processed", st)
				}
				return nil
			})
			// Two retries of 10ms and 20ms, not an AckWait: the NakWithDelay
			// delay is what paces them.
			if d := time.Since(began); d >= testConfig.AckWait && !tc.slow {
				t.Errorf("two retries took %v, as long as the ack wait", d)
			}
			fps := fingerprints(t, e.js)
			if len(fps) != 1 || fps[0].ErrorCode != "" || fps[0].SurfaceHash == "" {
				t.Fatalf("fingerprints %v", fps)
			}
			if _, err := e.h.Manifests.GetInfo(context.Background(), bus.ManifestName(fps[0].SurfaceHash)); err != nil {
				t.Errorf("manifest: %v", err)
			}
			if st := svc.Stats(); st != (Stats{Processed: 1, Retries: tc.retries}) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestRetriesExhaustedIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	terms := terminations(t, e.nc)
	store := &flakyStore{ManifestStore: NewObjectManifests(e.js, e.h.Manifests)}
	store.failPut.Store(1 << 40)
	cfg := testConfig
	cfg.MaxDeliver = 3
	svc, _ := e.start(t, cfg, Deps{Manifests: store})

	publishObs(t, e.js, observation("obs-1", readFixture(t)), "obs-1")
	poll.Eventually(t, wait, func() error { return hasDeadLetters(t, e.js, 1) })
	dl := deadLetters(t, e.js)[0]
	if dl.ErrorCode != bus.CodeRetriesExhausted || !strings.Contains(dl.ErrorMessage, errInjected.Error()) {
		t.Errorf("dead letter %+v", dl)
	}
	if _, err := terms.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no termination advisory: %v", err)
	}
	if st := svc.Stats(); st != (Stats{Poison: 1, Exhausted: 1, Retries: 2}) {
		t.Errorf("stats %+v", st)
	}
	if n := streamMsgs(t, e.js, bus.StreamFingerprints); n != 0 {
		t.Errorf("%d fingerprints published", n)
	}
}

// distinctCapture is a small valid capture whose surface hash depends on i.
func distinctCapture(i int) []byte {
	return fmt.Appendf(nil, `{"tools":{"pages":[{"tools":[{"name":"t","description":"version %d","inputSchema":{"type":"object"}}]}]}}`, i)
}

func TestRestartLosesNothing(t *testing.T) {
	const n = 100
	e := newEnv(t)
	for i := range n {
		publishObs(t, e.js, observation(fmt.Sprintf("obs-%03d", i), distinctCapture(i)), fmt.Sprintf("obs-%03d", i))
	}
	cfg := testConfig
	cfg.Workers, cfg.Prefetch = 2, 8

	midway := make(chan struct{})
	store := &flakyStore{ManifestStore: NewObjectManifests(e.js, e.h.Manifests)}
	store.onPut = func(k int64) {
		if k == n/3 {
			close(midway)
		}
	}
	first, stopFirst := e.start(t, cfg, Deps{Manifests: store})
	<-midway
	began := time.Now()
	if err := stopFirst(); err != nil {
		t.Fatalf("first instance: %v", err)
	}
	if d := time.Since(began); d > cfg.DrainTimeout {
		t.Errorf("draining took %v, longer than the drain timeout", d)
	}
	done := first.Stats().Processed
	if done == 0 || done >= n {
		t.Fatalf("the first instance processed %d of %d; the test wants it stopped midway", done, n)
	}
	if got := streamMsgs(t, e.js, bus.StreamFingerprints); got != done {
		t.Errorf("%d fingerprints after the first instance acked %d", got, done)
	}

	second, _ := e.start(t, cfg, Deps{})
	poll.Eventually(t, wait, func() error {
		return errors.Join(hasMsgs(t, e.js, bus.StreamFingerprints, n), consumerIdle(t, e.js))
	})
	seen := map[string]bool{}
	for _, fp := range fingerprints(t, e.js) {
		if seen[fp.EventId] {
			t.Errorf("%s stored twice", fp.EventId)
		}
		seen[fp.EventId] = true
	}
	t.Logf("first instance processed %d, second %d", done, second.Stats().Processed)
	if done+second.Stats().Processed != n {
		t.Errorf("first %d + second %d != %d: a message was redelivered after a clean drain", done, second.Stats().Processed, n)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; empty for valid
	}{
		{"zero_is_defaults", Config{}, ""},
		{"bad_durable", Config{Durable: "a.b"}, "durable"},
		{"too_many_workers", Config{Workers: 5000}, "workers"},
		{"negative_workers", Config{Workers: -1}, "workers"},
		{"max_deliver_one", Config{MaxDeliver: 1}, "max deliver"},
		{"max_deliver_unlimited", Config{MaxDeliver: -1}, ""},
		{"short_ack_wait", Config{AckWait: time.Millisecond}, "ack wait"},
		{"op_timeout_past_ack_wait", Config{AckWait: 5 * time.Second, OpTimeout: 5 * time.Second}, "op timeout"},
		{"retry_cap_below_delay", Config{RetryDelay: time.Minute, MaxRetryDelay: time.Second}, "max retry delay"},
		{"negative_drain", Config{DrainTimeout: -time.Second}, "drain timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error about %s", err, tc.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	c := Config{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second}
	for _, tc := range []struct {
		delivered uint64
		want      time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {1 << 40, time.Second}} {
		t.Run(fmt.Sprint("delivered=", tc.delivered), func(t *testing.T) {
			if got := c.retryDelay(tc.delivered); got != tc.want {
				t.Errorf("retryDelay(%d) = %v, want %v", tc.delivered, got, tc.want)
			}
		})
	}
}

func TestNewRejectsMissingDeps(t *testing.T) {
	e := newEnv(t)
	store := NewObjectManifests(e.js, e.h.Manifests)
	for _, tc := range []struct {
		name string
		cfg  Config
		deps Deps
	}{
		{"no_js", Config{}, Deps{Manifests: store}},
		{"no_store", Config{}, Deps{JS: e.js}},
		{"bad_config", Config{Workers: -1}, Deps{JS: e.js, Manifests: store}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, tc.deps); err == nil {
				t.Fatal("New succeeded")
			}
		})
	}
}

// The Fingerprint is encoded as the identity fields followed by the result
// fields encoded once per capture: the bytes must be proto.Marshal's of the
// whole message, from the memo or not.
func TestEncodingIsMarshal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		capture []byte
		code    string
	}{
		{"accepted", readFixture(t), ""},
		{"rejected", []byte(`{"tools":{"pages":[{"tools":[{"name":"a"},{"name":"a"}]}]}}`), string(surface.CodeDuplicateItem)},
		{"no_items", []byte(`{"tools":{"pages":[{"tools":[]}]}}`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{memo: newMemo(1 << 20)}
			for _, pass := range []string{"computed", "memo"} {
				obs := observation("obs-"+pass, tc.capture)
				data, res, err := s.fingerprint(obs)
				if err != nil {
					t.Fatal(err)
				}
				if res.errorCode != tc.code {
					t.Fatalf("%s: error code %q, want %q", pass, res.errorCode, tc.code)
				}
				var fp mcpdriftv1.Fingerprint
				if err := proto.Unmarshal(data, &fp); err != nil {
					t.Fatal(err)
				}
				want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&fp)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, want) {
					t.Errorf("%s: encoding differs from proto.Marshal", pass)
				}
				if fp.EventId != "fp-"+obs.EventId || fp.ObservationId != obs.EventId || fp.ErrorCode != tc.code ||
					(tc.code == "") != (fp.SurfaceHash != "") {
					t.Errorf("%s: decoded %v", pass, &fp)
				}
			}
		})
	}
}

func TestMemo(t *testing.T) {
	a := observation("o", []byte("capture-a"))
	b := observation("o", []byte("capture-b"))
	other := observation("o", []byte("capture-a"))
	other.Server = "other"
	entry := func(o *mcpdriftv1.ListObservation) *memoEntry {
		return &memoEntry{capture: o.Capture, hashing: status.DefaultHashing}
	}
	for _, tc := range []struct {
		name   string
		budget int
		put    []*mcpdriftv1.ListObservation
		get    *mcpdriftv1.ListObservation
		hit    bool
	}{
		{"same_bytes", 1 << 10, []*mcpdriftv1.ListObservation{a}, observation("o2", []byte("capture-a")), true},
		{"other_bytes", 1 << 10, []*mcpdriftv1.ListObservation{a}, b, false},
		{"replaced", 1 << 10, []*mcpdriftv1.ListObservation{a, b}, a, false},
		{"other_server", 1 << 10, []*mcpdriftv1.ListObservation{a}, other, false},
		{"off", -1, []*mcpdriftv1.ListObservation{a}, a, false},
		{"too_large_for_budget", 64, []*mcpdriftv1.ListObservation{a}, a, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemo(tc.budget)
			for _, o := range tc.put {
				m.put(o, entry(o))
			}
			if _, hit := m.get(tc.get, status.DefaultHashing); hit != tc.hit {
				t.Errorf("hit = %v, want %v", hit, tc.hit)
			}
		})
	}
	t.Run("stays_within_budget", func(t *testing.T) {
		m := newMemo(8 * 100)
		for i := range 50 {
			o := observation("o", bytes.Repeat([]byte{'x'}, 100))
			o.Server = fmt.Sprintf("s%d", i)
			m.put(o, entry(o))
			if m.size > m.budget {
				t.Fatalf("size %d over budget %d after %d puts", m.size, m.budget, i+1)
			}
		}
	})
}

// TestStopWithoutNATS: a service stopped while NATS is unreachable stops
// within its drain timeout. A drain needs the server to answer, so it used
// to wait out the client library's own drain timeout.
func TestStopWithoutNATS(t *testing.T) {
	b := natstest.StartBus(t)
	e := &env{nc: b.NC, js: b.JS, h: b.Handles}
	cfg := testConfig
	cfg.DrainTimeout = time.Second
	_, stop := e.start(t, cfg, Deps{})
	poll.Eventually(t, wait, func() error {
		_, err := e.js.Consumer(context.Background(), bus.StreamObservations, DefaultConfig.Durable)
		return err
	})
	b.Server.Stop()
	poll.Eventually(t, wait, func() error {
		if e.nc.IsConnected() {
			return fmt.Errorf("the client is still connected (%v) after NATS stopped", e.nc.Status())
		}
		return nil
	})
	began := time.Now()
	err := stop()
	if d := time.Since(began); d > 3*cfg.DrainTimeout {
		t.Errorf("stopping without NATS took %v; the drain timeout is %v", d, cfg.DrainTimeout)
	}
	t.Logf("Run returned %v", err)
}
