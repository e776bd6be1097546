package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }

// env is one test's bus, ClickHouse database and running sink.
type env struct {
	t    *testing.T
	bus  *natstest.Bus
	ch   *chtest.Server
	db   string
	conn driver.Conn
	svc  *Service
	stop func() error // stops the sink and returns Run's error
}

func newEnv(t *testing.T, ch *chtest.Server, cfg Config) *env {
	t.Helper()
	e := &env{t: t, bus: natstest.StartBus(t), ch: ch, db: ch.Database(t)}
	conn, err := clickhouse.Open(ch.Options(e.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn = conn
	if _, err := schema.Migrate(context.Background(), conn, schema.Options{Database: e.db}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	cfg.Database = e.db
	e.start(cfg)
	return e
}

func (e *env) start(cfg Config) {
	e.t.Helper()
	svc, err := New(cfg, Deps{JS: e.bus.JS, Conn: e.conn, Log: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	stopped := false
	var runErr error
	e.svc = svc
	e.stop = func() error {
		if !stopped {
			cancel()
			runErr = <-done
			stopped = true
		}
		return runErr
	}
	e.t.Cleanup(func() { _ = e.stop() })
}

func (e *env) publish(subject string, data []byte, msgID string) {
	e.t.Helper()
	if _, err := bus.Publish(context.Background(), e.bus.JS, subject, data, msgID); err != nil {
		e.t.Fatal(err)
	}
}

func callEvent(i int) *mcpdriftv1.CallObservation {
	out := mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED
	code := ""
	if i%3 == 0 {
		out, code = mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED, "server_changed"
	}
	return &mcpdriftv1.CallObservation{
		EventId: fmt.Sprintf("p1-%d", i), Tenant: "acme", Server: fmt.Sprintf("s%d", i%4), Proxy: "p1",
		Tool: fmt.Sprintf("tool%d", i%5), Outcome: out, RefusalCode: code, LatencyUs: int64(100 + i),
		ArgumentsDigest: fmt.Sprintf("sha256:%064x", i), ObservedAtUnixMs: 1_760_000_000_000 + int64(i),
	}
}

func (e *env) publishCalls(from, to int, msgIDSuffix string) {
	e.t.Helper()
	for i := from; i < to; i++ {
		ev := callEvent(i)
		data, err := proto.Marshal(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		e.publish(bus.CallObservationSubject(ev.Tenant, ev.Server), data, ev.EventId+msgIDSuffix)
	}
}

// wait bounds every poll: it only stops a hung test.
const wait = 90 * time.Second

func (e *env) consumerInfo(durable, stream string) *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.bus.JS.Consumer(context.Background(), stream, durable)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// settled reports whether the consumer acked (or terminated) everything in
// its stream.
// settled returns nil when k's consumer has acked all of its stream, and
// otherwise what it holds.
func (e *env) settled(k Consumer) error {
	c, err := e.bus.JS.Consumer(context.Background(), k.Stream, k.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: not made yet", k.Durable)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	si, err := e.bus.JS.Stream(context.Background(), k.Stream)
	if err != nil {
		e.t.Fatal(err)
	}
	last := si.CachedInfo().State.LastSeq
	if sinfo, err := si.Info(context.Background()); err == nil {
		last = sinfo.State.LastSeq
	}
	if info.NumPending != 0 || info.NumAckPending != 0 || info.AckFloor.Stream != last {
		return fmt.Errorf("consumer %s: %d pending, %d unacked, ack floor %d of %d",
			k.Durable, info.NumPending, info.NumAckPending, info.AckFloor.Stream, last)
	}
	return nil
}

func (e *env) allSettled() error {
	for _, k := range Consumers {
		if err := e.settled(k); err != nil {
			return err
		}
	}
	return nil
}

// hasCount returns nil when the query q counts want, and otherwise the count.
func (e *env) hasCount(want uint64, q string, args ...any) error {
	if got := e.count(q, args...); got != want {
		return fmt.Errorf("%s = %d, want %d", q, got, want)
	}
	return nil
}

func (e *env) count(q string, args ...any) uint64 {
	e.t.Helper()
	var n uint64
	if err := e.conn.QueryRow(context.Background(), strings.ReplaceAll(q, "DB.", e.db+"."), args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestWritesEveryKind(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	list, _ := proto.Marshal(&mcpdriftv1.ListObservation{EventId: "l1", Tenant: "acme", Server: "fs", Proxy: "p1",
		Variant: "default", ObservedAtUnixMs: 1_760_000_000_000, Capture: []byte(`{"tools":{"pages":[]}}`)})
	e.publish(bus.ListObservationSubject("acme", "fs"), list, "l1")
	e.publishCalls(0, 1, "")
	alerted, _ := proto.Marshal(&mcpdriftv1.CallObservation{EventId: "alerted-1", Tenant: "acme", Server: "fs", Proxy: "p1",
		Tool: "read", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED, AlertCode: "server_changed",
		ObservedAtUnixMs: 1_760_000_000_500})
	e.publish(bus.CallObservationSubject("acme", "fs"), alerted, "alerted-1")
	v, _ := bus.MarshalJSON(&mcpdriftv1.Verdict{EventId: "v1", Tenant: "acme", Server: "fs", Variant: "default",
		Status: mcpdriftv1.Status_STATUS_CHANGED, PreviousStatus: mcpdriftv1.Status_STATUS_VERIFIED, Serve: false,
		Posture: "discovery", OnDrift: "block", BaselineVersion: 1, Severity: "critical", ReasonCode: "drift",
		Actor: "system", AtUnixMs: 1_760_000_001_000})
	e.publish(bus.VerdictSubject("acme", "fs"), v, "v1")
	a, _ := bus.MarshalJSON(&mcpdriftv1.AdminAction{EventId: "a1", Tenant: "acme", Server: "fs", Variant: "default",
		Action: "approve", Actor: "alice", Role: "write", Hash: "sha256:ab", Ok: true, AtUnixMs: 1_760_000_002_000})
	e.publish(bus.AdminSubject("acme", "fs"), a, "a1")
	st, _ := bus.MarshalJSON(&mcpdriftv1.AdminAction{EventId: "a2", Action: "status", Actor: "ops", Role: "read", Ok: true, AtUnixMs: 1_760_000_003_000})
	e.publish(bus.AdminSubject("_", "_"), st, "a2")
	d, _ := bus.MarshalJSON(&mcpdriftv1.DeadLetter{EventId: "dead-fingerprint-7", Service: "fingerprint",
		Subject: "mcpdrift.obs.list.acme.fs", StreamSequence: "7", ErrorCode: "malformed_event", AtUnixMs: 1_760_000_004_000})
	e.publish(bus.DeadLetterSubject("fingerprint"), d, "dead-fingerprint-7")

	poll.Eventually(t, wait, e.allSettled)
	for _, tc := range []struct {
		name, q string
		want    uint64
	}{
		{"list", "SELECT count() FROM DB.list_observations FINAL WHERE event_id = 'l1' AND tenant = 'acme' AND server = 'fs' AND capture_bytes = 22 AND capture_sha256 LIKE 'sha256:%' AND at_ms = 1760000000000", 1},
		{"call", "SELECT count() FROM DB.call_observations FINAL WHERE event_id = 'p1-0' AND outcome = 'refused' AND refusal_code = 'server_changed' AND arguments = '' AND arguments_digest != ''", 1},
		{"alerted_call", "SELECT count() FROM DB.call_observations FINAL WHERE event_id = 'alerted-1' AND outcome = 'forwarded' AND refusal_code = '' AND alert_code = 'server_changed'", 1},
		{"verdict", "SELECT count() FROM DB.verdicts FINAL WHERE event_id = 'v1' AND status = 'changed' AND previous_status = 'verified' AND serve = 0 AND severity = 'critical'", 1},
		{"approve", "SELECT count() FROM DB.admin_actions FINAL WHERE event_id = 'a1' AND action = 'approve' AND actor = 'alice' AND ok = 1", 1},
		{"serverless_admin", "SELECT count() FROM DB.admin_actions FINAL WHERE event_id = 'a2' AND tenant = '' AND server = ''", 1},
		{"dead_letter", "SELECT count() FROM DB.dead_letters FINAL WHERE service = 'fingerprint' AND error_code = 'malformed_event' AND stream_sequence = '7'", 1},
		{"calls_hourly", "SELECT uniqExactMerge(calls) FROM DB.calls_hourly WHERE outcome = 'refused'", 1},
		{"verdicts_hourly", "SELECT uniqExactMerge(verdicts) FROM DB.verdicts_hourly WHERE status = 'changed'", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.count(tc.q); got != tc.want {
				t.Errorf("%s = %d, want %d", tc.q, got, tc.want)
			}
		})
	}
	if st := e.svc.Stats(); st.Written != 7 || st.Poison != 0 {
		t.Errorf("stats %+v: want 7 written, no poison", st)
	}
}

// TestDuplicatesCollapse publishes every event twice under different
// message ids (as a proxy whose retry fell outside the duplicate window
// would), so JetStream stores both and the sink writes both.
func TestDuplicatesCollapse(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond, BatchSize: 50, MaxAckPending: 1000})
	const n = 300
	e.publishCalls(0, n, "")
	e.publishCalls(0, n, "-retry")
	poll.Eventually(t, wait, e.allSettled)
	if got := e.svc.Stats().Written; got != 2*n {
		t.Fatalf("written %d rows, want %d (every copy)", got, 2*n)
	}
	e.requireCallsOnce(t, n)
}

// TestOutageCatchUp stops the ClickHouse server while events arrive: the
// sink acks nothing it could not write, and writes everything once the
// server is back.
func TestOutageCatchUp(t *testing.T) {
	ch := chtest.Start(t)
	e := newEnv(t, ch, Config{BatchAge: 20 * time.Millisecond, BatchSize: 100, MaxAckPending: 1000,
		RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond, WriteTimeout: 5 * time.Second})
	const n = 1000
	obs := Consumers[0]
	e.publishCalls(0, n/2, "")
	poll.Eventually(t, wait, func() error { return e.settled(obs) })

	ch.Stop()
	e.publishCalls(n/2, n, "")
	poll.Eventually(t, wait, func() error {
		if st := e.svc.Stats(); !st.Down || st.WriteFailures < 3 {
			return fmt.Errorf("stats %+v, want down after 3 failed writes", st)
		}
		return nil
	})
	info := e.consumerInfo(obs.Durable, obs.Stream)
	if info.AckFloor.Stream != n/2 {
		t.Fatalf("ack floor %d while ClickHouse is down, want %d (nothing new acked)", info.AckFloor.Stream, n/2)
	}
	if w := e.svc.Stats().Written; w != n/2 {
		t.Fatalf("written %d while ClickHouse is down, want %d", w, n/2)
	}

	if err := ch.Restart(); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error { return e.settled(obs) })
	if got := e.count("SELECT uniqExact(event_id) FROM DB.call_observations"); got != n {
		t.Errorf("distinct events %d, want %d", got, n)
	}
	if got := e.count("SELECT count() FROM DB.call_observations FINAL"); got != n {
		t.Errorf("rows (FINAL) %d, want %d", got, n)
	}
	if st := e.svc.Stats(); st.Down || st.Poison != 0 {
		t.Errorf("stats after catch-up %+v", st)
	}
}

// TestGracefulShutdownWritesTheBatch stops the sink while it holds a batch
// that neither its size nor its age would write yet.
func TestGracefulShutdownWritesTheBatch(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 50 * time.Second, BatchSize: 100000, MaxAckPending: 200000})
	const n = 250
	e.publishCalls(0, n, "")
	obs := Consumers[0]
	poll.Eventually(t, wait, func() error {
		if got := e.consumerInfo(obs.Durable, obs.Stream).NumAckPending; got != n {
			return fmt.Errorf("the sink holds %d events unacked, want %d", got, n)
		}
		return nil
	})
	if got := e.count("SELECT count() FROM DB.call_observations"); got != 0 {
		t.Fatalf("%d rows written before shutdown; the batch should still be held", got)
	}
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if got := e.count("SELECT count() FROM DB.call_observations FINAL"); got != n {
		t.Errorf("rows after shutdown %d, want %d", got, n)
	}
	poll.Eventually(t, wait, func() error { return e.settled(obs) })
}

// TestPoisonIsDeadLettered sends messages that can never be written: each
// is terminated and copied to mcpdrift.dead.audit with its code, and the
// good events around them are written.
func TestPoisonIsDeadLettered(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	good, _ := proto.Marshal(callEvent(1))
	mismatch, _ := proto.Marshal(&mcpdriftv1.CallObservation{EventId: "x1", Tenant: "other", Server: "s1", ObservedAtUnixMs: 1})
	future, _ := proto.Marshal(&mcpdriftv1.CallObservation{EventId: "x2", Tenant: "acme", Server: "s1", ObservedAtUnixMs: 5_000_000_000_000})
	cases := []struct {
		name, subject string
		data          []byte
		code          string
	}{
		{"malformed_protobuf", bus.CallObservationSubject("acme", "s1"), []byte{0xff, 0xff, 0xff}, bus.CodeMalformedEvent},
		{"malformed_json", bus.VerdictSubject("acme", "s1"), []byte(`{"status": 12`), bus.CodeMalformedEvent},
		{"subject_mismatch", bus.CallObservationSubject("acme", "s1"), mismatch, bus.CodeSubjectMismatch},
		{"invalid_time", bus.CallObservationSubject("acme", "s1"), future, bus.CodeInvalidTime},
		{"unknown_subject", "mcpdrift.obs.other.acme.s1", good, bus.CodeUnknownSubject},
	}
	for i, tc := range cases {
		e.publish(tc.subject, tc.data, fmt.Sprintf("bad-%d", i))
	}
	e.publishCalls(1, 2, "")
	poll.Eventually(t, wait, e.allSettled)
	// The audit's own dead letters reach ClickHouse through the admin stream.
	poll.Eventually(t, wait, func() error {
		return e.hasCount(uint64(len(cases)), "SELECT count() FROM DB.dead_letters FINAL WHERE service = 'audit'")
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.count("SELECT count() FROM DB.dead_letters FINAL WHERE service = 'audit' AND subject = ? AND error_code = ?", tc.subject, tc.code); got < 1 {
				t.Errorf("no dead letter with code %s for %s", tc.code, tc.subject)
			}
		})
	}
	if got := e.count("SELECT count() FROM DB.call_observations FINAL"); got != 1 {
		t.Errorf("%d call rows, want the 1 good one", got)
	}
	if st := e.svc.Stats(); st.Poison != uint64(len(cases)) {
		t.Errorf("poison %d, want %d", st.Poison, len(cases))
	}
}

func TestArguments(t *testing.T) {
	args := []byte(`{"path":"/etc/hosts","api_key":"abc123","note":"use ghp_abcdefghijklmnopqrstuvwxyz0123456789 now","n":12345678901234567890}`)
	for _, tc := range []struct {
		mode      string
		want      string
		forbidden []string
	}{
		{ArgumentsDigest, "", nil},
		{ArgumentsFull, `"path":"/etc/hosts"`, []string{"abc123", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond, Arguments: tc.mode})
			ev := callEvent(7)
			ev.Arguments = args
			data, _ := proto.Marshal(ev)
			e.publish(bus.CallObservationSubject(ev.Tenant, ev.Server), data, ev.EventId)
			poll.Eventually(t, wait, e.allSettled)
			var stored, digest string
			if err := e.conn.QueryRow(context.Background(), "SELECT arguments, arguments_digest FROM "+e.db+".call_observations FINAL").Scan(&stored, &digest); err != nil {
				t.Fatal(err)
			}
			if digest != ev.ArgumentsDigest {
				t.Errorf("digest %q, want %q", digest, ev.ArgumentsDigest)
			}
			if tc.want == "" && stored != "" {
				t.Errorf("digest mode stored arguments %q", stored)
			}
			if !strings.Contains(stored, tc.want) {
				t.Errorf("stored %q, want it to hold %q", stored, tc.want)
			}
			for _, f := range tc.forbidden {
				if strings.Contains(stored, f) {
					t.Errorf("stored %q holds the secret %q", stored, f)
				}
			}
			if tc.mode == ArgumentsFull && !strings.Contains(stored, "12345678901234567890") {
				t.Errorf("stored %q lost the digits of a number", stored)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"secret_key", `{"password":"hunter2","user":"bob"}`, `{"password":"[REDACTED]","user":"bob"}`},
		{"nested_token", `{"cfg":{"Authorization":"Basic eA=="},"list":["AKIAABCDEFGHIJKLMNOP"]}`, `{"cfg":{"Authorization":"[REDACTED]"},"list":["[REDACTED]"]}`},
		{"jwt_in_text", `{"q":"tok eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4"}`, `{"q":"tok [REDACTED]"}`},
		{"url_password", `{"dsn":"postgres://app:s3cret@db:5432/x"}`, `{"dsn":"[REDACTED]db:5432/x"}`},
		{"not_json", `password=x sk-abcdefghijklmnopqrstuvwx`, `password=x [REDACTED]`},
		{"pem", `{"k":"-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----"}`, `{"k":"[REDACTED]"}`},
		{"clean", `{"path":"/tmp","n":1.5}`, `{"n":1.5,"path":"/tmp"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Redact([]byte(tc.in)); got != tc.want {
				t.Errorf("Redact(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"bad_arguments", Config{Arguments: "all"}, false},
		{"ack_pending_below_two_batches", Config{BatchSize: 1000, MaxAckPending: 1500}, false},
		{"write_timeout_over_ack_wait", Config{WriteTimeout: time.Minute, AckWait: 30 * time.Second}, false},
		{"batch_age_over_ack_wait", Config{BatchAge: time.Minute, AckWait: 30 * time.Second, WriteTimeout: time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// requireCallsOnce checks that the call rows written count n distinct
// calls, by FINAL, by event id and in the hourly rollup, and that merging
// removes the copies for good.
func (e *env) requireCallsOnce(t *testing.T, n uint64) {
	t.Helper()
	for _, tc := range []struct {
		name, q string
	}{
		{"final", "SELECT count() FROM DB.call_observations FINAL"},
		{"distinct", "SELECT uniqExact(event_id) FROM DB.call_observations"},
		{"rollup", "SELECT sum(c) FROM (SELECT uniqExactMerge(calls) AS c FROM DB.calls_hourly GROUP BY tenant, server, tool, outcome, refusal_code, hour)"},
	} {
		if got := e.count(tc.q); got != n {
			t.Errorf("%s: %s = %d, want %d", tc.name, tc.q, got, n)
		}
	}
	// OPTIMIZE ... FINAL returns without merging when the server cannot
	// schedule the merge now (a background merge of the same parts under
	// way, as on a loaded machine), so it is asked again until the parts
	// are merged; the duplicates must collapse then.
	poll.Eventually(t, wait, func() error {
		if err := e.conn.Exec(context.Background(), "OPTIMIZE TABLE "+e.db+".call_observations FINAL"); err != nil {
			return fmt.Errorf("OPTIMIZE FINAL: %w", err)
		}
		if got := e.count("SELECT count() FROM DB.call_observations"); got != n {
			return fmt.Errorf("after OPTIMIZE FINAL, %d rows, want %d", got, n)
		}
		return nil
	})
}
