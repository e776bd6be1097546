package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// batchCalls are the calls from to to-1 (callEvent), all on one server, as
// one proxy batches them.
func batchCalls(server string, from, to int) []*mcpdriftv1.CallObservation {
	var calls []*mcpdriftv1.CallObservation
	for i := from; i < to; i++ {
		c := callEvent(i)
		c.Server = server
		calls = append(calls, c)
	}
	return calls
}

// batchMsgID is the Nats-Msg-Id a proxy gives a batch: the first call's
// event id, followed by "+<number of further calls>" when there are more.
func batchMsgID(calls []*mcpdriftv1.CallObservation) string {
	if len(calls) == 0 {
		return ""
	}
	id := calls[0].EventId
	if len(calls) > 1 {
		id += "+" + strconv.Itoa(len(calls)-1)
	}
	return id
}

func marshalBatch(t testing.TB, calls []*mcpdriftv1.CallObservation) []byte {
	t.Helper()
	data, err := proto.Marshal(&mcpdriftv1.CallObservations{Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// publishBatch publishes calls as one CallObservations on the subject of
// tenant and server, under the batch's message id followed by msgIDSuffix.
func (e *env) publishBatch(tenant, server string, calls []*mcpdriftv1.CallObservation, msgIDSuffix string) {
	e.t.Helper()
	e.publish(bus.CallObservationsSubject(tenant, server), marshalBatch(e.t, calls), batchMsgID(calls)+msgIDSuffix)
}

// TestCallBatchesWriteARowPerCall: a CallObservations of N calls is N rows,
// each with its own event id, time and fields, and the single form that
// proxies before the batch form publish is written alongside.
func TestCallBatchesWriteARowPerCall(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	e.publishBatch("acme", "b1", batchCalls("b1", 0, 1), "")
	e.publishBatch("acme", "b5", batchCalls("b5", 1, 6), "")
	e.publishBatch("acme", "b100", batchCalls("b100", 6, 106), "")
	e.publishCalls(200, 204, "") // singles (servers s0 to s3), from a proxy not yet upgraded

	// Calls without an event id: the message id plus "#<index>", or, for a
	// message without one, the digest of subject and payload plus "#<index>".
	anon := batchCalls("anon", 300, 303)
	anon[0].EventId, anon[2].EventId = "", ""
	e.publish(bus.CallObservationsSubject("acme", "anon"), marshalBatch(t, anon), "batch-without-ids")
	bare := batchCalls("bare", 400, 402)
	bare[0].EventId, bare[1].EventId = "", ""
	bareData := marshalBatch(t, bare)
	if _, err := e.bus.JS.Publish(context.Background(), bus.CallObservationsSubject("acme", "bare"), bareData); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(bus.CallObservationsSubject("acme", "bare") + "\x00" + string(bareData)))
	digest := "sha256:" + hex.EncodeToString(sum[:])

	poll.Eventually(t, wait, e.allSettled)
	const rows = 1 + 5 + 100 + 4 + 3 + 2
	if st := e.svc.Stats(); st.Written != rows || st.Poison != 0 {
		t.Fatalf("stats %+v: want %d written, no poison", st, rows)
	}
	for _, tc := range []struct {
		name, q string
		args    []any
		want    uint64
	}{
		{"all_rows", "SELECT count() FROM DB.call_observations FINAL", nil, rows},
		{"distinct_ids", "SELECT uniqExact(event_id) FROM DB.call_observations", nil, rows},
		{"batch_of_one", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'b1' AND event_id = 'p1-0'", nil, 1},
		{"batch_of_five", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'b5' AND event_id IN ('p1-1', 'p1-2', 'p1-3', 'p1-4', 'p1-5')", nil, 5},
		{"batch_of_hundred", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'b100'", nil, 100},
		// Every call keeps its own fields and time (callEvent: at_ms 1760000000000+i).
		{"own_fields", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'b100' AND at_ms = 1760000000000 + toInt64OrZero(substring(event_id, 4)) AND latency_us = 100 + toInt64OrZero(substring(event_id, 4)) AND tool = concat('tool', toString(toInt64OrZero(substring(event_id, 4)) % 5))", nil, 100},
		{"refused_in_batch", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'b100' AND outcome = 'refused' AND refusal_code = 'server_changed'", nil, 34},
		{"one_stream_seq_per_batch", "SELECT uniqExact(stream_seq) FROM DB.call_observations WHERE server IN ('b1', 'b5', 'b100')", nil, 3},
		{"singles", "SELECT count() FROM DB.call_observations FINAL WHERE event_id IN ('p1-200', 'p1-201', 'p1-202', 'p1-203')", nil, 4},
		{"missing_id_from_msg_id", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'anon' AND event_id IN ('batch-without-ids#0', 'p1-301', 'batch-without-ids#2')", nil, 3},
		{"missing_id_from_digest", "SELECT count() FROM DB.call_observations FINAL WHERE server = 'bare' AND event_id IN (?, ?)", []any{digest + "#0", digest + "#1"}, 2},
		{"rollup", "SELECT sum(c) FROM (SELECT uniqExactMerge(calls) AS c FROM DB.calls_hourly GROUP BY tenant, server, tool, outcome, refusal_code, hour)", nil, rows},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.count(tc.q, tc.args...); got != tc.want {
				t.Errorf("%s = %d, want %d", tc.q, got, tc.want)
			}
		})
	}
}

// TestCallBatchDuplicatesCollapse publishes every call twice, in batches
// split differently and under different message ids (as a proxy whose
// retry fell outside the duplicate window would), and some of them a third
// time in the single form: every copy is written, and the copies collapse
// by event id as singles do.
func TestCallBatchDuplicatesCollapse(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond, BatchSize: 50, MaxAckPending: 1000})
	const n = 300
	for from := 0; from < n; from += 10 {
		e.publishBatch("acme", "s1", batchCalls("s1", from, from+10), "")
	}
	for from := 0; from < n; from += 7 {
		e.publishBatch("acme", "s1", batchCalls("s1", from, min(from+7, n)), "-retry")
	}
	for _, c := range batchCalls("s1", 0, 20) {
		data, _ := proto.Marshal(c)
		e.publish(bus.CallObservationSubject("acme", "s1"), data, c.EventId+"-single")
	}
	poll.Eventually(t, wait, e.allSettled)
	if got := e.svc.Stats().Written; got != 2*n+20 {
		t.Fatalf("written %d rows, want %d (every copy)", got, 2*n+20)
	}
	e.requireCallsOnce(t, n)
}

// poisonedBatches are batches that can never be written, each for a server
// named after its case: five calls of which one is bad, or bytes that are
// not a CallObservations.
func poisonedBatches(t testing.TB) []struct {
	name, code string
	data       []byte
} {
	bad := func(name string, i int, spoil func(c *mcpdriftv1.CallObservation)) []byte {
		calls := batchCalls(name, 0, 5)
		for j, c := range calls {
			c.EventId = name + "-" + strconv.Itoa(j)
		}
		spoil(calls[i])
		return marshalBatch(t, calls)
	}
	return []struct {
		name, code string
		data       []byte
	}{
		{"malformed", bus.CodeMalformedEvent, []byte{0x0a, 0xff, 0xff}},
		// Two good calls, then a third whose bytes are no CallObservation.
		{"malformed_call", bus.CodeMalformedEvent, append(marshalBatch(t, batchCalls("malformed_call", 0, 2)), 0x0a, 0x03, 0xff, 0xff, 0xff)},
		{"mismatch_tenant", bus.CodeSubjectMismatch, bad("mismatch_tenant", 2, func(c *mcpdriftv1.CallObservation) { c.Tenant = "other" })},
		{"mismatch_server", bus.CodeSubjectMismatch, bad("mismatch_server", 4, func(c *mcpdriftv1.CallObservation) { c.Server = "other" })},
		{"future_time", bus.CodeInvalidTime, bad("future_time", 3, func(c *mcpdriftv1.CallObservation) { c.ObservedAtUnixMs = 5_000_000_000_000 })},
		{"negative_time", bus.CodeInvalidTime, bad("negative_time", 0, func(c *mcpdriftv1.CallObservation) { c.ObservedAtUnixMs = -1 })},
		{"long_id", bus.CodeInvalidEventID, bad("long_id", 1, func(c *mcpdriftv1.CallObservation) { c.EventId = strings.Repeat("x", MaxEventIDLen+1) })},
	}
}

// TestCallBatchPoisonIsDeadLetteredWhole: a batch with one call that can
// never be written, or that is no protobuf, is dead-lettered whole with the
// code of what is wrong, and none of its calls is written, while the good
// batches and singles around it are.
func TestCallBatchPoisonIsDeadLetteredWhole(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	e.publishBatch("acme", "good", batchCalls("good", 0, 3), "")
	cases := poisonedBatches(t)
	for _, tc := range cases {
		e.publish(bus.CallObservationsSubject("acme", tc.name), tc.data, "bad-"+tc.name)
	}
	e.publishBatch("acme", "good", batchCalls("good", 3, 6), "")
	e.publishCalls(10, 12, "")
	poll.Eventually(t, wait, e.allSettled)
	poll.Eventually(t, wait, func() error {
		return e.hasCount(uint64(len(cases)), "SELECT count() FROM DB.dead_letters FINAL WHERE service = 'audit'")
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			subject := bus.CallObservationsSubject("acme", tc.name)
			if got := e.count("SELECT count() FROM DB.dead_letters FINAL WHERE service = 'audit' AND subject = ? AND error_code = ?", subject, tc.code); got != 1 {
				t.Errorf("%d dead letters with code %s for %s, want 1", got, tc.code, subject)
			}
			if got := e.count("SELECT count() FROM DB.call_observations WHERE server = ?", tc.name); got != 0 {
				t.Errorf("%d rows of the poisoned batch written, want none", got)
			}
		})
	}
	if got := e.count("SELECT count() FROM DB.call_observations FINAL"); got != 8 {
		t.Errorf("%d call rows, want the 8 good ones (two batches of 3, two singles)", got)
	}
	// Written counts the audit's own dead letters too, in dead_letters.
	if st := e.svc.Stats(); st.Poison != uint64(len(cases)) || st.Written != 8+uint64(len(cases)) {
		t.Errorf("stats %+v: want %d poison, %d written", st, len(cases), 8+len(cases))
	}
}

// TestEmptyCallBatchIsAcked: a CallObservations of no calls (the empty
// payload is its encoding) is well formed and says nothing: it is acked
// with no rows and is not dead-lettered.
func TestEmptyCallBatchIsAcked(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	e.publish(bus.CallObservationsSubject("acme", "s1"), nil, "empty-1")
	e.publish(bus.CallObservationsSubject("acme", "s1"), marshalBatch(t, nil), "empty-2")
	e.publishCalls(1, 2, "")
	poll.Eventually(t, wait, e.allSettled)
	if st := e.svc.Stats(); st.Written != 1 || st.Poison != 0 {
		t.Errorf("stats %+v: want 1 written (the single), no poison", st)
	}
	if got := e.count("SELECT count() FROM DB.call_observations FINAL"); got != 1 {
		t.Errorf("%d call rows, want 1", got)
	}
	if got := e.count("SELECT count() FROM DB.dead_letters FINAL"); got != 0 {
		t.Errorf("%d dead letters, want none", got)
	}
}

// TestDecodeCallBatchAllOrNothing: a batch that fails leaves the batch it
// was decoded into exactly as it was, rows already there included.
func TestDecodeCallBatchAllOrNothing(t *testing.T) {
	s := &Service{cfg: DefaultConfig}
	now := time.UnixMilli(1_760_000_000_000)
	for _, tc := range poisonedBatches(t) {
		t.Run(tc.name, func(t *testing.T) {
			b := &batch{}
			good := envelope{subject: bus.CallObservationsSubject("acme", "good"), seq: 1, stamp: now}
			if p := s.decode(good, marshalBatch(t, batchCalls("good", 0, 4)), b); p != nil {
				t.Fatalf("good batch: %v", p)
			}
			before := cloneCalls(&b.calls)
			env := envelope{subject: bus.CallObservationsSubject("acme", tc.name), seq: 2, stamp: now,
				msgID: func() string { return "bad-" + tc.name }}
			p := s.decode(env, tc.data, b)
			if p == nil || coded.CodeOf(p) != tc.code || !bus.IsPoison(p) {
				t.Fatalf("decode = %v, want poison with code %s", p, tc.code)
			}
			if !reflect.DeepEqual(cloneCalls(&b.calls), before) || b.rows() != 4 {
				t.Errorf("the failed batch changed the rows: %d rows, want the 4 there before", b.rows())
			}
		})
	}
}

// cloneCalls copies the rows' slices (up to their lengths).
func cloneCalls(r *callRows) callRows {
	c := *r
	c.common = common{eventID: clone(r.eventID), at: clone(r.at), atMs: clone(r.atMs), seq: clone(r.seq)}
	for _, s := range []*[]string{&c.tenant, &c.server, &c.proxy, &c.tool, &c.outcome, &c.refusal, &c.alert, &c.digest, &c.args} {
		*s = clone(*s)
	}
	c.latency = clone(r.latency)
	return c
}

func clone[T any](s []T) []T { return append([]T(nil), s...) }

// FuzzDecodeCallBatch: whatever a publisher sends on obs.calls, decode
// either adds one row per call, every column the same length, or reports
// poison and adds nothing.
func FuzzDecodeCallBatch(f *testing.F) {
	f.Add(marshalBatch(f, batchCalls("s1", 0, 3)))
	f.Add([]byte{})
	for _, tc := range poisonedBatches(f) {
		f.Add(tc.data)
	}
	anon := batchCalls("s1", 0, 2)
	anon[1].EventId, anon[1].Tenant = "", ""
	f.Add(marshalBatch(f, anon))
	s := &Service{cfg: Config{Arguments: ArgumentsFull}.WithDefaults()}
	f.Fuzz(func(t *testing.T, data []byte) {
		env := envelope{subject: bus.CallObservationsSubject("acme", "s1"), seq: 7, stamp: time.UnixMilli(1_760_000_000_000),
			msgID: func() string { return "m" }}
		b := &batch{}
		p := s.decode(env, data, b)
		var ev mcpdriftv1.CallObservations
		decodes := proto.Unmarshal(data, &ev) == nil
		switch {
		case p != nil && b.rows() != 0:
			t.Fatalf("poison %s and %d rows", coded.CodeOf(p), b.rows())
		case p == nil && !decodes:
			t.Fatal("no poison for a payload that does not decode")
		case p == nil && b.rows() != len(ev.Calls):
			t.Fatalf("%d rows for %d calls", b.rows(), len(ev.Calls))
		}
		r := &b.calls
		for i, n := range []int{len(r.at), len(r.atMs), len(r.seq), len(r.tenant), len(r.server), len(r.proxy), len(r.tool),
			len(r.outcome), len(r.refusal), len(r.alert), len(r.digest), len(r.args), len(r.latency)} {
			if n != r.len() {
				t.Fatalf("column %d holds %d values, event_id %d", i, n, r.len())
			}
		}
		for i, id := range r.eventID {
			if id == "" || len(id) > MaxEventIDLen {
				t.Fatalf("row %d: event id %q", i, id)
			}
			if ev.Calls[i].EventId == "" && id != fmt.Sprintf("m#%d", i) {
				t.Fatalf("row %d: event id %q for a call without one, want m#%d", i, id, i)
			}
		}
	})
}
