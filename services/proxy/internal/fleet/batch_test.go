package fleet

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// callEvent is a fresh call event as Publisher.Call makes it: a
// CallObservations batch of one.
func callEvent(t *testing.T, id string) *event {
	t.Helper()
	data, err := proto.Marshal(&mcpdriftv1.CallObservations{Calls: []*mcpdriftv1.CallObservation{{EventId: id, Tool: "read"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &event{id: id, subject: bus.CallObservationsSubject(tenant, "mem"), kind: kindCall, n: 1, data: data}
}

// callIDs decodes a batch event's calls.
func callIDs(t *testing.T, ev *event) []string {
	t.Helper()
	var b mcpdriftv1.CallObservations
	if err := proto.Unmarshal(ev.data, &b); err != nil {
		t.Fatalf("event %s does not decode as CallObservations: %v", ev.id, err)
	}
	var ids []string
	for _, c := range b.Calls {
		ids = append(ids, c.EventId)
	}
	return ids
}

func TestMergeCalls(t *testing.T) {
	one := len(callEvent(t, "c1").data)
	tests := []struct {
		name  string
		in    string // c: a call, l: a listing
		limit int
		want  []string // per message: its id and, for calls, the ids it holds
	}{
		{"one_call_unchanged", "c", 1 << 20, []string{"c1 [c1]"}},
		{"a_run_becomes_one", "ccc", 1 << 20, []string{"c1+2 [c1 c2 c3]"}},
		{"listings_break_runs", "cclcc", 1 << 20, []string{"c1+1 [c1 c2]", "l3", "c4+1 [c4 c5]"}},
		{"listings_alone", "ll", 1 << 20, []string{"l1", "l2"}},
		{"limit_splits", "ccccc", 2 * one, []string{"c1+1 [c1 c2]", "c3+1 [c3 c4]", "c5 [c5]"}},
		{"limit_below_one_call", "cc", one - 1, []string{"c1 [c1]", "c2 [c2]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []*event
			var before [][]byte
			for i, k := range tt.in {
				id := fmt.Sprintf("%c%d", k, i+1)
				ev := testEvent(id, false, 10)
				if k == 'c' {
					ev = callEvent(t, id)
				}
				in = append(in, ev)
				before = append(before, slices.Clone(ev.data))
			}
			var got []string
			total := 0
			for _, ev := range mergeBatches(in, tt.limit) {
				if ev.kind != kindCall {
					got = append(got, ev.id)
					total++
					continue
				}
				ids := callIDs(t, ev)
				if len(ids) != ev.count() {
					t.Errorf("message %s holds %d calls, counts %d", ev.id, len(ids), ev.count())
				}
				total += ev.count()
				got = append(got, fmt.Sprintf("%s %v", ev.id, ids))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("merged into %q, want %q", got, tt.want)
			}
			if total != len(tt.in) {
				t.Errorf("%d observations out of %d", total, len(tt.in))
			}
			for i, ev := range in {
				if string(ev.data) != string(before[i]) || ev.id != fmt.Sprintf("%c%d", tt.in[i], i+1) {
					t.Errorf("event %d was changed: %s", i, ev.id)
				}
			}
		})
	}
}

// TestPublisherBatchesCalls: calls queued before the publisher runs go out
// as batches, one per publish round, each call once and in order.
func TestPublisherBatchesCalls(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), nil)
	const calls = batchEvents + 44
	for i := range calls {
		p.Call(session.Call{Tool: fmt.Sprint("t", i)})
	}
	runInBackground(t, p.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != calls {
			return statsSeen(fmt.Sprintf("Published == %d", calls), st)
		}
		return nil
	})
	obs := readStream(t, b.JS)
	if len(obs) != calls {
		t.Fatalf("%d calls in the stream, want %d", len(obs), calls)
	}
	messages := map[uint64]int{}
	for i, o := range obs {
		if o.callObs.Tool != fmt.Sprint("t", i) || seqOf(o.eventID) != i+1 {
			t.Fatalf("call %d is %s (%s): out of order", i, o.callObs.Tool, o.eventID)
		}
		messages[o.seq]++
	}
	if len(messages) != 2 {
		t.Errorf("%d calls came in %d messages (%v), want 2: one per publish round of at most %d", calls, len(messages), messages, batchEvents)
	}
}

// TestOutboxHoldsBatches: a batch of calls is one file that counts its
// calls, across a reopen, and is dropped whole with its calls counted.
func TestOutboxHoldsBatches(t *testing.T) {
	dir := t.TempDir()
	var d drops
	o, err := openOutbox(dir, 6, 1<<20, d.note)
	if err != nil {
		t.Fatal(err)
	}
	batch := mergeBatches([]*event{callEvent(t, "c1"), callEvent(t, "c2"), callEvent(t, "c3")}, 1<<20)[0]
	if _, err := o.add([]*event{testEvent("l1", false, 10), batch}); err != nil {
		t.Fatal(err)
	}
	if n, _ := o.depth(); n != 4 {
		t.Fatalf("depth %d, want 4 (a listing and three calls)", n)
	}
	if got, want := outboxFiles(t, o.dir), []string{"00000000000000000000.list", "00000000000000000001.call-3"}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	o.close()

	o, err = openOutbox(dir, 6, 1<<20, d.note)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	if n, _ := o.depth(); n != 4 {
		t.Fatalf("depth after reopening %d, want 4", n)
	}
	entries := o.head(10, 1<<20)
	ev, err := o.read(entries[1])
	if err != nil {
		t.Fatal(err)
	}
	if ev.id != "c1+2" || ev.count() != 3 || !slices.Equal(callIDs(t, ev), []string{"c1", "c2", "c3"}) {
		t.Fatalf("read back %s with %d calls", ev.id, ev.count())
	}
	for _, e := range entries {
		o.done(e, false)
	}
	// Three more calls fit (6); a fourth evicts the batch, whole.
	if _, err := o.add([]*event{callEvent(t, "c4"), callEvent(t, "c5")}); err != nil {
		t.Fatal(err)
	}
	if d != (drops{}) {
		t.Fatalf("dropped %+v while under the bound", d)
	}
	if _, err := o.add([]*event{callEvent(t, "c6"), callEvent(t, "c7")}); err != nil {
		t.Fatal(err)
	}
	if d != (drops{calls: 3}) {
		t.Errorf("dropped %+v, want the batch's 3 calls", d)
	}
	if got, want := idsIn(t, o), []string{"l1", "c4", "c5", "c6", "c7"}; !slices.Equal(got, want) {
		t.Errorf("outbox holds %v, want %v", got, want)
	}
	// A batch of more calls than the bound cannot be kept.
	big := mergeBatches([]*event{callEvent(t, "c8"), callEvent(t, "c9"), callEvent(t, "c10"), callEvent(t, "c11"), callEvent(t, "c12"), callEvent(t, "c13"), callEvent(t, "c14")}, 1<<20)[0]
	if _, err := o.add([]*event{big}); err != nil {
		t.Fatal(err)
	}
	if d != (drops{calls: 10}) {
		t.Errorf("dropped %+v, want 10 calls", d)
	}
}

// TestPublisherLingers: a round of calls waits for more calls to join it,
// and a listing ends the wait at once. The calls wait in the queue (a
// round collects them when it starts; queuing them wakes nobody), so both
// are still queued and none published until the listing comes.
func TestPublisherLingers(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), func(c *Config) { c.Linger = time.Minute })
	runInBackground(t, p.Run)
	p.Call(session.Call{Tool: "first"})
	p.Call(session.Call{Tool: "second"})
	if st := p.Stats(); st.Queued != 2 || st.Published != 0 {
		t.Fatalf("before the listing: %+v, want both calls queued, none published", st)
	}
	p.Listing(session.Listed{}, []byte(`{"tools":{"pages":[{"tools":[]}]}}`))
	// Well within the minute: the listing ended the wait.
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != 3 {
			return statsSeen("Published == 3", st)
		}
		return nil
	})
	obs := readStream(t, b.JS)
	if len(obs) != 3 || !obs[0].call || !obs[1].call || obs[2].call {
		t.Fatalf("stream: %+v", obs)
	}
	if obs[0].callObs.Tool != "first" || obs[1].callObs.Tool != "second" || obs[0].seq != obs[1].seq {
		t.Errorf("calls %s (message %d) and %s (message %d): want both in one message",
			obs[0].callObs.Tool, obs[0].seq, obs[1].callObs.Tool, obs[1].seq)
	}
}
