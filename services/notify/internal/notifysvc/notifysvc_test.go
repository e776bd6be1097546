package notifysvc

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// wait bounds every poll of these tests.
const wait = 30 * time.Second

// request is one request a receiver got.
type request struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP webhook receiver: it records every request and
// answers with the status answer gives for the nth request (from 1).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []request
	answer func(n int) int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	r := &receiver{answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, request{header: req.Header.Clone(), body: body})
		n := len(r.got)
		r.mu.Unlock()
		status := http.StatusOK
		if r.answer != nil {
			status = r.answer(n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// accepted is the Idempotency-Key of every request answered 2xx, in order.
func (r *receiver) keys() []string {
	var out []string
	for _, q := range r.requests() {
		out = append(out, q.header.Get(HeaderIdempotencyKey))
	}
	return out
}

// always answers every request with status.
func always(status int) func(int) int { return func(int) int { return status } }

// testConfig retries fast.
func testConfig(dests ...Destination) Config {
	return Config{Destinations: dests, RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond,
		AckWait: 5 * time.Second, Timeout: 2 * time.Second, DrainTimeout: 3 * time.Second, MaxDeliver: 6}
}

func dest(t *testing.T, url, name, format, filter string) Destination {
	t.Helper()
	d, err := ParseDestination(1, url, name, format, filter)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// running is a Service running until the test ends or stop is called.
type running struct {
	svc  *Service
	m    *Metrics
	stop func()
}

func start(t *testing.T, js jetstream.JetStream, cfg Config, secret string) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	svc, err := New(cfg, Deps{JS: js, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Secret: []byte(secret), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	// Consumers start with what is published after they exist: wait for them.
	for _, d := range cfg.Destinations {
		for _, rt := range cfg.Routes(d) {
			poll.Eventually(t, wait, func() error {
				_, err := js.Consumer(context.Background(), rt.Stream, rt.Consumer.Durable)
				return err
			})
		}
	}
	return &running{svc: svc, m: m, stop: stop}
}

// publishVerdict publishes v as the drift service does: JSON, on the
// verdict subject of its tenant and server, with its event id as message id.
func publishVerdict(t *testing.T, js jetstream.JetStream, v *mcpdriftv1.Verdict) {
	t.Helper()
	data, err := bus.MarshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(context.Background(), js, bus.VerdictSubject(v.Tenant, v.Server), data, v.EventId); err != nil {
		t.Fatal(err)
	}
}

func verdict(tenant, server string, rev int, st mcpdriftv1.Status, severity string) *mcpdriftv1.Verdict {
	return &mcpdriftv1.Verdict{
		EventId: fmt.Sprintf("verdict-%s.%s.v1-%d", tenant, server, rev), Tenant: tenant, Server: server, Variant: "v1",
		Status: st, PreviousStatus: mcpdriftv1.Status_STATUS_VERIFIED, Serve: st == mcpdriftv1.Status_STATUS_VERIFIED,
		Posture: "discovery", OnDrift: "block", BaselineVersion: 1, BaselineHash: "sha256:aa", LiveHash: "sha256:bb",
		Severity: severity, ReasonCode: "drift", Reason: "tool <!channel> changed & more", Actor: "system",
		AtUnixMs: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli() + int64(rev),
	}
}

// holdCall stores a held call in the approvals bucket as the drift service
// does, and returns its id.
func holdCall(t *testing.T, kv jetstream.KeyValue, tenant, server string) string {
	t.Helper()
	id := approval.NewID()
	now := time.Now()
	r := &mcpdriftv1.ApprovalRequest{Id: id, Tenant: tenant, Server: server, Proxy: "p1", Tool: "rm", Agent: "bob",
		Rule: "destructive", Reason: "deletes files", ArgumentsDigest: "sha256:cc", Arguments: []byte(`{"path":"/secret-arg"}`),
		RequestedAtUnixMs: now.UnixMilli(), ExpiresAtUnixMs: now.Add(time.Minute).UnixMilli()}
	value, err := approval.Encode(&mcpdriftv1.Approval{Request: r})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(context.Background(), approval.Key(tenant, id), value); err != nil {
		t.Fatal(err)
	}
	return id
}

// resolveCall writes a resolution as the drift service does.
func resolveCall(t *testing.T, kv jetstream.KeyValue, tenant, id, outcome string) {
	t.Helper()
	e, err := kv.Get(context.Background(), approval.Key(tenant, id))
	if err != nil {
		t.Fatal(err)
	}
	a, err := approval.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	a.Resolution = &mcpdriftv1.ApprovalResolution{Id: id, Tenant: tenant, Outcome: outcome, Actor: "alice", Reason: "ok",
		ResolvedAtUnixMs: time.Now().UnixMilli()}
	value, err := approval.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(context.Background(), e.Key(), value, e.Revision()); err != nil {
		t.Fatal(err)
	}
}

// waitRequests waits until r got n requests.
func waitRequests(t *testing.T, r *receiver, n int) []request {
	t.Helper()
	poll.Eventually(t, wait, func() error {
		if got := len(r.requests()); got < n {
			return fmt.Errorf("receiver got %d requests, want %d: %q", got, n, r.keys())
		}
		return nil
	})
	return r.requests()
}

// hmacHex is the signature computed here, independently of Sign.
func hmacHex(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// TestDeliversEachFormat: a verdict published as the drift service
// publishes it reaches three receivers, one per format, each request in
// its format, signed, with the event's id as idempotency key.
func TestDeliversEachFormat(t *testing.T) {
	b := natstest.StartBus(t)
	const secret = "hmac-key-1"
	recv := map[string]*receiver{}
	var dests []Destination
	for _, f := range Formats {
		recv[f] = newReceiver(t, nil)
		dests = append(dests, dest(t, recv[f].URL+"/hook/"+f, f, f, ""))
	}
	start(t, b.JS, testConfig(dests...), secret)
	v := verdict("acme", "files", 7, mcpdriftv1.Status_STATUS_CHANGED, "high")
	publishVerdict(t, b.JS, v)

	for _, f := range Formats {
		t.Run(f, func(t *testing.T) {
			q := waitRequests(t, recv[f], 1)[0]
			if got := q.header.Get(HeaderIdempotencyKey); got != v.EventId {
				t.Errorf("Idempotency-Key %q, want %q", got, v.EventId)
			}
			ts := q.header.Get(HeaderTimestamp)
			if got, want := q.header.Get(HeaderSignature), hmacHex(secret, ts, q.body); got != want || ts == "" {
				t.Errorf("signature %q over timestamp %q, want %q", got, ts, want)
			}
			if hmacHex("another-key", ts, q.body) == q.header.Get(HeaderSignature) {
				t.Error("the signature verifies with another key")
			}
			ct := q.header.Get("Content-Type")
			switch f {
			case FormatJSON:
				var env Envelope
				if err := json.Unmarshal(q.body, &env); err != nil || ct != "application/json" {
					t.Fatalf("%s %s: %v", ct, q.body, err)
				}
				var back mcpdriftv1.Verdict
				if err := bus.UnmarshalJSON(env.Event, &back); err != nil || back.LiveHash != v.LiveHash {
					t.Errorf("event %s: %v", env.Event, err)
				}
				if env.ID != v.EventId || env.Kind != KindVerdict || env.Tenant != "acme" || env.Server != "files" || env.Variant != "v1" ||
					env.Status != "changed" || env.Severity != "high" || env.Time != "2026-05-01T12:00:00.007Z" || env.Subject != "mcpdrift.drift.acme.files" ||
					!strings.Contains(env.Summary, "acme/files") {
					t.Errorf("envelope %+v", env)
				}
			case FormatCloudEvents:
				if ct != "application/cloudevents+json; charset=utf-8" {
					t.Errorf("content type %q", ct)
				}
				var ce map[string]any
				if err := json.Unmarshal(q.body, &ce); err != nil {
					t.Fatal(err)
				}
				// The attributes CloudEvents 1.0 requires, and ours.
				want := map[string]any{"specversion": "1.0", "id": v.EventId, "source": "/mcpdrift/acme/files", "type": "io.mcpdrift.verdict.v1",
					"subject": "acme/files/v1", "time": "2026-05-01T12:00:00.007Z", "datacontenttype": "application/json",
					"tenant": "acme", "status": "changed", "severity": "high"}
				for k, w := range want {
					if ce[k] != w {
						t.Errorf("attribute %s = %v, want %v", k, ce[k], w)
					}
				}
				if data, _ := ce["data"].(map[string]any); data["id"] != v.EventId || data["event"] == nil {
					t.Errorf("data %v", ce["data"])
				}
			case FormatSlack:
				var msg struct {
					Text   string `json:"text"`
					Blocks []struct {
						Type     string            `json:"type"`
						Text     map[string]string `json:"text"`
						Elements []map[string]string
					} `json:"blocks"`
				}
				if err := json.Unmarshal(q.body, &msg); err != nil || ct != "application/json" {
					t.Fatalf("%s %s: %v", ct, q.body, err)
				}
				if !strings.Contains(msg.Text, "acme/files") || len(msg.Blocks) != 2 || msg.Blocks[0].Type != "section" || msg.Blocks[1].Type != "context" {
					t.Errorf("slack message %s", q.body)
				}
				// A reason cannot mention a channel or make a link.
				if strings.Contains(string(q.body), "<!channel>") || !strings.Contains(msg.Text, "&lt;!channel&gt;") || !strings.Contains(msg.Text, "&amp;") {
					t.Errorf("slack text not escaped: %q", msg.Text)
				}
			}
		})
	}
}

// TestHeldCallsAndResolutions: a call held for approval and its
// resolution, stored in the approvals bucket as the drift service stores
// them, are delivered as held_call and call_resolved, without the call's
// arguments.
func TestHeldCallsAndResolutions(t *testing.T) {
	b := natstest.StartBus(t)
	r := newReceiver(t, nil)
	start(t, b.JS, testConfig(dest(t, r.URL, "", FormatJSON, "")), "")
	id := holdCall(t, b.Handles.Approvals, "acme", "files")
	waitRequests(t, r, 1)
	resolveCall(t, b.Handles.Approvals, "acme", id, approval.Denied)
	got := waitRequests(t, r, 2)
	for i, want := range []struct{ kind, status, key string }{
		{KindHeldCall, StatusHeld, "call-held-acme-" + id},
		{KindCallResolved, approval.Denied, "call-denied-acme-" + id},
	} {
		var env Envelope
		if err := json.Unmarshal(got[i].body, &env); err != nil {
			t.Fatal(err)
		}
		if env.Kind != want.kind || env.Status != want.status || env.ID != want.key || got[i].header.Get(HeaderIdempotencyKey) != want.key {
			t.Errorf("request %d: kind %s status %s id %s, want %+v", i, env.Kind, env.Status, env.ID, want)
		}
		if strings.Contains(string(got[i].body), "secret-arg") || !strings.Contains(string(got[i].body), "sha256:cc") {
			t.Errorf("request %d carries the arguments, or not their digest: %s", i, got[i].body)
		}
		if got[i].header.Get(HeaderSignature) != "" {
			t.Errorf("request %d signed without a secret", i)
		}
	}
	// A key deleted (the bucket's own operation) notifies nothing.
	if err := b.Handles.Approvals.Delete(context.Background(), approval.Key("acme", id)); err != nil {
		t.Fatal(err)
	}
	holdCall(t, b.Handles.Approvals, "acme", "files")
	if got := waitRequests(t, r, 3); len(got) != 3 || !strings.HasPrefix(got[2].header.Get(HeaderIdempotencyKey), "call-held-") {
		t.Errorf("after a deletion and a new held call: %q", r.keys())
	}
}

// TestFilter: each destination gets only the events its filter selects;
// the others are acked and counted as filtered.
func TestFilter(t *testing.T) {
	b := natstest.StartBus(t)
	high, quarantines := newReceiver(t, nil), newReceiver(t, nil)
	run := start(t, b.JS, testConfig(
		dest(t, high.URL, "high", FormatJSON, "tenant=acme severity>=high"),
		dest(t, quarantines.URL, "quarantines", FormatJSON, "kind=quarantine,held_call"),
	), "")
	publishVerdict(t, b.JS, verdict("acme", "files", 1, mcpdriftv1.Status_STATUS_CHANGED, "medium"))
	publishVerdict(t, b.JS, verdict("beta", "files", 2, mcpdriftv1.Status_STATUS_CHANGED, "critical"))
	publishVerdict(t, b.JS, verdict("acme", "files", 3, mcpdriftv1.Status_STATUS_CHANGED, "critical"))
	publishVerdict(t, b.JS, verdict("acme", "db", 4, mcpdriftv1.Status_STATUS_QUARANTINED, ""))
	holdCall(t, b.Handles.Approvals, "beta", "db")
	// Every event settled at both: 5 each.
	poll.Eventually(t, wait, func() error {
		for _, name := range []string{"high", "quarantines"} {
			var n float64
			for _, r := range []string{ResultDelivered, ResultFiltered} {
				n += testutil.ToFloat64(run.m.events.WithLabelValues(name, r))
			}
			if n != 5 {
				return fmt.Errorf("%s settled %v events, want 5", name, n)
			}
		}
		return nil
	})
	if got, want := high.keys(), []string{"verdict-acme.files.v1-3"}; !slices.Equal(got, want) {
		t.Errorf("severity>=high of acme got %q, want %q", got, want)
	}
	got := quarantines.keys()
	slices.Sort(got)
	if len(got) != 2 || got[1] != "verdict-acme.db.v1-4" || !strings.HasPrefix(got[0], "call-held-beta-") {
		t.Errorf("kind=quarantine,held_call got %q", got)
	}
	if n := testutil.ToFloat64(run.m.events.WithLabelValues("high", ResultFiltered)); n != 4 {
		t.Errorf("high filtered %v, want 4", n)
	}
}

// TestRetriesAfterFailure: a destination that answers 500 and then 200
// gets the event again, with the same idempotency key, and the failure
// and the retry are counted.
func TestRetriesAfterFailure(t *testing.T) {
	b := natstest.StartBus(t)
	r := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	run := start(t, b.JS, testConfig(dest(t, r.URL, "flaky", FormatCloudEvents, "")), "k")
	publishVerdict(t, b.JS, verdict("acme", "files", 1, mcpdriftv1.Status_STATUS_CHANGED, "low"))
	poll.Eventually(t, wait, func() error {
		if n := testutil.ToFloat64(run.m.events.WithLabelValues("flaky", ResultDelivered)); n != 1 {
			return fmt.Errorf("delivered %v, want 1 (requests %q)", n, r.keys())
		}
		return nil
	})
	if got := r.keys(); len(got) != 2 || got[0] != got[1] || got[0] != "verdict-acme.files.v1-1" {
		t.Errorf("requests %q, want the same event twice", got)
	}
	for name, want := range map[string]float64{
		"failures_5xx": testutil.ToFloat64(run.m.failures.WithLabelValues("flaky", Fail5xx)),
		"retries":      testutil.ToFloat64(run.m.retries.WithLabelValues("flaky")),
	} {
		if want != 1 {
			t.Errorf("%s = %v, want 1", name, want)
		}
	}
	if st := run.svc.Stats(); st.Delivered != 1 || st.Failures != 1 || st.Retries != 1 || st.DeadLettered != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestDeadDestinationDoesNotBlock: with one destination that hangs, one
// that refuses everything and one unreachable, a live destination gets
// every event while the hanging one still holds its first requests; the
// dead ones try each event MaxDeliver times, then dead-letter it
// (mcpdrift.dead.notify-<name>, counted) and terminate it.
func TestDeadDestinationDoesNotBlock(t *testing.T) {
	b := natstest.StartBus(t)
	release := make(chan struct{})
	live, refusing := newReceiver(t, nil), newReceiver(t, always(http.StatusServiceUnavailable))
	hanging := newReceiver(t, func(int) int { <-release; return http.StatusServiceUnavailable })
	var once sync.Once
	unhang := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhang) // before the receiver closes: it waits for its handlers
	gone := newReceiver(t, nil)
	goneURL := gone.URL
	gone.Close() // nothing listens there any more
	cfg := testConfig(
		dest(t, hanging.URL, "hanging", FormatJSON, ""),
		dest(t, refusing.URL, "refusing", FormatJSON, ""),
		dest(t, goneURL, "gone", FormatSlack, ""),
		dest(t, live.URL, "live", FormatJSON, ""),
	)
	// The hanging destination's requests outlast the test's waits: only
	// the release ends them.
	cfg.MaxDeliver, cfg.Timeout, cfg.AckWait = 3, 5*time.Minute, 6*time.Minute
	run := start(t, b.JS, cfg, "")
	const n = 20
	for i := range n {
		publishVerdict(t, b.JS, verdict("acme", fmt.Sprintf("s%d", i), i, mcpdriftv1.Status_STATUS_CHANGED, "high"))
	}
	waitRequests(t, live, n)
	if held, done := len(hanging.requests()), testutil.ToFloat64(run.m.failures.WithLabelValues("hanging", Fail5xx)); held == 0 || done != 0 {
		t.Fatalf("live got every event; hanging got %d requests and answered %v: want some, all still held", held, done)
	}
	unhang()
	// The dead destinations give up on every event: 3 attempts each.
	poll.Eventually(t, wait, func() error {
		for _, name := range []string{"hanging", "refusing", "gone"} {
			if got := testutil.ToFloat64(run.m.deadLetters.WithLabelValues(name, bus.CodeRetriesExhausted)); got != n {
				return fmt.Errorf("%s dead-lettered %v events, want %d", name, got, n)
			}
		}
		return nil
	})
	for _, c := range []struct{ name, reason string }{{"hanging", Fail5xx}, {"refusing", Fail5xx}, {"gone", FailConnect}} {
		if got := testutil.ToFloat64(run.m.failures.WithLabelValues(c.name, c.reason)); got != 3*n {
			t.Errorf("%s: %v %s failures, want %d", c.name, got, c.reason, 3*n)
		}
		if got := testutil.ToFloat64(run.m.events.WithLabelValues(c.name, ResultDeadLettered)); got != n {
			t.Errorf("%s: %v events dead_lettered, want %d", c.name, got, n)
		}
	}
	if got := len(live.requests()); got != n {
		t.Errorf("live got %d requests, want %d", got, n)
	}
	// The dead letters are on the bus, one per event and destination.
	s, err := b.JS.Stream(context.Background(), bus.StreamAdmin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hanging", "refusing", "gone"} {
		subject := bus.DeadLetterSubject(ConsumerPrefix + name)
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		if got := info.State.Subjects[subject]; got != n {
			t.Errorf("%d dead letters on %s, want %d", got, subject, n)
		}
	}
}

// TestRestartLosesNothing: events published while notify is stopped, and
// one its destination failed before the stop, are delivered after a
// restart; nothing is lost (at least once).
func TestRestartLosesNothing(t *testing.T) {
	b := natstest.StartBus(t)
	var down sync.Mutex
	failing := true
	r := newReceiver(t, func(n int) int {
		down.Lock()
		defer down.Unlock()
		if failing {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	cfg := testConfig(dest(t, r.URL, "siem", FormatCloudEvents, ""))
	cfg.MaxDeliver = -1
	first := start(t, b.JS, cfg, "")
	publishVerdict(t, b.JS, verdict("acme", "files", 1, mcpdriftv1.Status_STATUS_CHANGED, "high"))
	waitRequests(t, r, 1) // tried, refused
	first.stop()

	for i := 2; i <= 4; i++ {
		publishVerdict(t, b.JS, verdict("acme", "files", i, mcpdriftv1.Status_STATUS_CHANGED, "high"))
	}
	holdCall(t, b.Handles.Approvals, "acme", "files")
	down.Lock()
	failing = false
	down.Unlock()
	start(t, b.JS, cfg, "")
	want := []string{"verdict-acme.files.v1-1", "verdict-acme.files.v1-2", "verdict-acme.files.v1-3", "verdict-acme.files.v1-4", "call-held-acme-"}
	poll.Eventually(t, wait, func() error {
		got := map[string]bool{}
		for _, q := range r.requests() {
			k := q.header.Get(HeaderIdempotencyKey)
			if strings.HasPrefix(k, "call-held-acme-") {
				k = "call-held-acme-"
			}
			got[k] = true
		}
		for _, w := range want {
			if !got[w] {
				return fmt.Errorf("%s not delivered after the restart; requests %q", w, r.keys())
			}
		}
		return nil
	})
}

// TestRunFailsWithoutStreams: without the streams, Run fails at once
// (the consumers cannot be created) instead of delivering nothing.
func TestRunFailsWithoutStreams(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	svc, err := New(testConfig(dest(t, "http://127.0.0.1:1/", "x", FormatJSON, "")), Deps{JS: js, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := svc.Run(ctx); err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("Run without the streams: %v, want stream not found", err)
	}
}
