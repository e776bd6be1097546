package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

func newPublisher(t *testing.T, js jetstream.JetStream, dir string, mod func(*Config)) *Publisher {
	t.Helper()
	cfg := Config{Tenant: tenant, Server: "mem", Proxy: "px1", Dir: dir, RetryInterval: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewPublisher(cfg, Deps{JS: js, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// streamed is one observation of the observations stream: a listing, or
// one call of a batch.
type streamed struct {
	subject, msgID, eventID string
	seq                     uint64 // the stream message it came in
	call                    bool
	list                    *mcpdriftv1.ListObservation
	callObs                 *mcpdriftv1.CallObservation
	seen                    *mcpdriftv1.ListingSeen // one compact listing of a batch
}

// readStream returns every observation of the observations stream, in
// order, checking the message ids: a listing's is its event id, a batch's
// its first call's event id, followed by "+<further calls>" when it holds
// more than one.
func readStream(t *testing.T, js jetstream.JetStream) []streamed {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.StreamObservations)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []streamed
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("reading stream message %d: %v", seq, err)
		}
		msgID := m.Header.Get(jetstream.MsgIDHeader)
		if strings.HasPrefix(m.Subject, bus.Prefix+".obs.seen.") {
			var b mcpdriftv1.ListingsSeen
			if err := proto.Unmarshal(m.Data, &b); err != nil {
				t.Fatalf("decoding stream message %d: %v", seq, err)
			}
			if len(b.Seen) == 0 {
				t.Fatalf("stream message %d: a batch of no compact listings", seq)
			}
			want := b.Seen[0].GetEventId()
			if len(b.Seen) > 1 {
				want += fmt.Sprintf("+%d", len(b.Seen)-1)
			}
			if b.Seen[0].GetEventId() == "" || msgID != want {
				t.Errorf("message %d: message id %q, want %q", seq, msgID, want)
			}
			for _, l := range b.Seen {
				out = append(out, streamed{subject: m.Subject, msgID: msgID, eventID: l.GetEventId(), seq: seq, seen: l})
			}
			continue
		}
		if strings.HasPrefix(m.Subject, bus.Prefix+".obs.calls.") {
			var b mcpdriftv1.CallObservations
			if err := proto.Unmarshal(m.Data, &b); err != nil {
				t.Fatalf("decoding stream message %d: %v", seq, err)
			}
			if len(b.Calls) == 0 {
				t.Fatalf("stream message %d: a batch of no calls", seq)
			}
			want := b.Calls[0].GetEventId()
			if len(b.Calls) > 1 {
				want += fmt.Sprintf("+%d", len(b.Calls)-1)
			}
			if b.Calls[0].GetEventId() == "" || msgID != want {
				t.Errorf("message %d: message id %q, want %q", seq, msgID, want)
			}
			for _, c := range b.Calls {
				out = append(out, streamed{subject: m.Subject, msgID: msgID, eventID: c.GetEventId(), seq: seq, call: true, callObs: c})
			}
			continue
		}
		r := streamed{subject: m.Subject, msgID: msgID, seq: seq, list: &mcpdriftv1.ListObservation{}}
		if err := proto.Unmarshal(m.Data, r.list); err != nil {
			t.Fatalf("decoding stream message %d: %v", seq, err)
		}
		r.eventID = r.list.GetEventId()
		if r.eventID == "" || r.msgID != r.eventID {
			t.Errorf("message %d: message id %q, event id %q; want equal and set", seq, r.msgID, r.eventID)
		}
		out = append(out, r)
	}
	return out
}

// kindsAndIDs summarizes a stream: "list" or "call" per message, and the ids.
func kindsAndIDs(msgs []streamed) ([]string, []string) {
	var kinds, ids []string
	for _, m := range msgs {
		k := kindList
		switch {
		case m.call:
			k = kindCall
		case m.seen != nil:
			k = kindSeen
		}
		kinds = append(kinds, k)
		ids = append(ids, m.eventID)
	}
	return kinds, ids
}

func outboxFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), ".") {
			names = append(names, de.Name())
		}
	}
	return names
}

func TestPublisherPublishes(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), nil)
	runInBackground(t, p.Run)

	capture := []byte(`{"tools":{"pages":[{"tools":[]}]}}`)
	p.Listing(session.Listed{Variant: "v1a2b"}, capture)
	p.Listing(session.Listed{}, capture)
	calls := []struct {
		name        string
		call        session.Call
		wantOutcome mcpdriftv1.CallOutcome
	}{
		{"forwarded", session.Call{Tool: "read", Latency: 1500 * time.Microsecond, ArgsDigest: "sha256:aa"}, mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED},
		{"full_arguments", session.Call{Tool: "read", ArgsDigest: "sha256:bb", Arguments: []byte(`{"path":"/tmp/x"}`)}, mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED},
		{"refused", session.Call{Tool: "write", Refused: true, RefusalCode: "server_changed"}, mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED},
		{"server_error", session.Call{Tool: "read", Error: true}, mcpdriftv1.CallOutcome_CALL_OUTCOME_ERROR},
		{"alerted", session.Call{Tool: "read", AlertCode: "server_changed"}, mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED},
	}
	for _, c := range calls {
		p.Call(c.call)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != 7 {
			return statsSeen("Published == 7", st)
		}
		return nil
	})
	msgs := readStream(t, b.JS)
	if len(msgs) != 7 {
		t.Fatalf("stream holds %d observations, want 7", len(msgs))
	}

	for i, want := range []string{"v1a2b", "default"} {
		m := msgs[i]
		if m.call || m.subject != bus.ListObservationSubject(tenant, "mem") {
			t.Fatalf("message %d: subject %s, want the list subject", i, m.subject)
		}
		l := m.list
		if l.Tenant != tenant || l.Server != "mem" || l.Proxy != "px1" || l.Variant != want || string(l.Capture) != string(capture) || l.ObservedAtUnixMs == 0 {
			t.Errorf("list observation %d = %v", i, l)
		}
	}
	for i, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			m := msgs[2+i]
			if !m.call || m.subject != bus.CallObservationsSubject(tenant, "mem") {
				t.Fatalf("subject %s, want the calls subject", m.subject)
			}
			o := m.callObs
			if o.Outcome != c.wantOutcome || o.Tool != c.call.Tool || o.RefusalCode != string(c.call.RefusalCode) || o.AlertCode != string(c.call.AlertCode) ||
				o.LatencyUs != c.call.Latency.Microseconds() || o.ArgumentsDigest != c.call.ArgsDigest || string(o.Arguments) != string(c.call.Arguments) ||
				o.Tenant != tenant || o.Server != "mem" || o.Proxy != "px1" || o.ObservedAtUnixMs == 0 {
				t.Errorf("call observation = %v", o)
			}
		})
	}
	_, ids := kindsAndIDs(msgs)
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
		t.Errorf("event ids are not unique: %v", ids)
	}
}

func TestPublisherEventIDsDifferAcrossRestarts(t *testing.T) {
	b := natstest.StartBus(t)
	dir := t.TempDir()
	var ids []string
	for range 2 {
		p := newPublisher(t, b.JS, dir, nil)
		ids = append(ids, p.nextID(), p.nextID())
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 4 {
		t.Errorf("event ids of two publishers of the same proxy collide: %v", ids)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "px1-") || len(id) > 200 || strings.ContainsAny(id, " \t\r\n") {
			t.Errorf("event id %q: want px1-..., printable, at most 200 characters", id)
		}
	}
}

// Events observed while NATS is down are spooled in order, and published
// in that order, once each, when it is back.
func TestPublisherSpoolsWhileNATSIsDown(t *testing.T) {
	b := natstest.StartBus(t)
	dir := t.TempDir()
	p := newPublisher(t, b.JS, dir, nil)
	runInBackground(t, p.Run)

	p.Listing(session.Listed{Variant: "default"}, []byte(`{"tools":{"pages":[{"tools":[]}]}}`))
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != 1 {
			return statsSeen("Published == 1", st)
		}
		return nil
	})

	port := stopBus(t, b)
	start := time.Now()
	p.Listing(session.Listed{Variant: "default"}, []byte(`{"n":1}`))
	p.Call(session.Call{Tool: "a"})
	p.Call(session.Call{Tool: "b"})
	p.Listing(session.Listed{Variant: "default"}, []byte(`{"n":2}`))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("observing 4 events took %v while NATS is down; Listing and Call must not wait", d)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Spooled != 4 {
			return statsSeen("Spooled == 4", st)
		}
		return nil
	})
	files := outboxFiles(t, filepath.Join(dir, "0"))
	var kinds []string
	for _, f := range files {
		_, k, _ := strings.Cut(f, ".")
		kinds = append(kinds, k)
	}
	if want := []string{"list", "call", "call", "list"}; !slices.Equal(kinds, want) {
		t.Fatalf("outbox files %v, want kinds %v in order", files, want)
	}
	if st := p.Stats(); st.OutboxDepth != 4 || st.Published != 1 || st.Dropped != 0 {
		t.Errorf("stats while down = %+v", st)
	}

	restartBus(t, b, port)
	poll.Eventually(t, 30*time.Second, func() error {
		if st := p.Stats(); !(st.OutboxDepth == 0 && st.Published == 5) {
			return statsSeen("OutboxDepth == 0 && Published == 5", st)
		}
		return nil
	})
	if files := outboxFiles(t, filepath.Join(dir, "0")); len(files) != 0 {
		t.Errorf("outbox files left after replay: %v", files)
	}
	// New events go straight out again.
	p.Call(session.Call{Tool: "c"})
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != 6 {
			return statsSeen("Published == 6", st)
		}
		return nil
	})

	msgs := readStream(t, b.JS)
	kinds, ids := kindsAndIDs(msgs)
	if want := []string{"list", "list", "call", "call", "list", "call"}; !slices.Equal(kinds, want) {
		t.Errorf("stream kinds %v, want %v", kinds, want)
	}
	if !slices.IsSortedFunc(ids, func(a, b string) int { return seqOf(a) - seqOf(b) }) {
		t.Errorf("stream ids out of order: %v", ids)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
		t.Errorf("duplicate events in the stream: %v", ids)
	}
	if tools := []string{msgs[2].callObs.GetTool(), msgs[3].callObs.GetTool(), msgs[5].callObs.GetTool()}; !slices.Equal(tools, []string{"a", "b", "c"}) {
		t.Errorf("call tools in stream order %v, want a b c", tools)
	}
}

func seqOf(id string) int {
	n := 0
	for _, c := range id[strings.LastIndexByte(id, '-')+1:] {
		n = 10*n + int(c-'0')
	}
	return n
}

// A publisher shut down while NATS is down leaves its queue in the outbox;
// the next publisher on the same directory publishes it.
func TestPublisherRestartDrainsOutbox(t *testing.T) {
	b := natstest.StartBus(t)
	port := stopBus(t, b)
	dir := t.TempDir()

	p1 := newPublisher(t, b.JS, dir, nil)
	p1.Listing(session.Listed{Variant: "default"}, []byte(`{"n":1}`)) // queued: p1 is not running yet
	p1.Call(session.Call{Tool: "a"})
	p1.Listing(session.Listed{Variant: "default"}, []byte(`{"n":2}`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p1.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p1.Stats(); st.Queued != 0 || st.Spooled != 3 || st.OutboxDepth != 3 {
		t.Fatalf("after shutdown without NATS: %+v; want the queue spooled", st)
	}
	p1.Call(session.Call{Tool: "late"}) // after Run returned: spooled directly
	if st := p1.Stats(); st.Spooled != 4 {
		t.Fatalf("event after Run returned: %+v; want it spooled", st)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	p1.Call(session.Call{Tool: "closed"})
	if st := p1.Stats(); st.Dropped != 1 || st.Spooled != 4 {
		t.Errorf("event after Close: %+v; want it dropped and counted", st)
	}
	// A file that a crash left half written, and one that is damaged.
	slot := filepath.Join(dir, "0")
	if err := os.WriteFile(filepath.Join(slot, "00000000000000000009.list.tmp"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(slot, "00000000000000000008.call"), []byte(outboxMagic+" x y 3 00000000\nabc"), 0o600); err != nil {
		t.Fatal(err)
	}

	restartBus(t, b, port)
	p2 := newPublisher(t, b.JS, dir, nil)
	if _, err := os.Stat(filepath.Join(slot, "00000000000000000009.list.tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary file left by a crash is still there (stat: %v)", err)
	}
	runInBackground(t, p2.Run)
	poll.Eventually(t, 30*time.Second, func() error {
		if st := p2.Stats(); !(st.OutboxDepth == 0 && st.Published == 4) {
			return statsSeen("OutboxDepth == 0 && Published == 4", st)
		}
		return nil
	})
	if st := p2.Stats(); st.Dropped != 1 {
		t.Errorf("damaged outbox file: stats %+v, want 1 dropped", st)
	}
	msgs := readStream(t, b.JS)
	kinds, ids := kindsAndIDs(msgs)
	if want := []string{"list", "call", "list", "call"}; !slices.Equal(kinds, want) {
		t.Errorf("stream kinds %v, want %v", kinds, want)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, p1.idPrefix) {
			t.Errorf("event %s does not carry the first publisher's id", id)
		}
	}
	if got := msgs[3].callObs.GetTool(); got != "late" {
		t.Errorf("last event tool %q, want late", got)
	}
}

// Shutting down with NATS up publishes what is queued.
func TestPublisherShutdownPublishesQueue(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), nil)
	for _, tool := range []string{"a", "b", "c"} {
		p.Call(session.Call{Tool: tool})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Published != 3 || st.Spooled != 0 || st.Queued != 0 {
		t.Errorf("after shutdown: %+v; want 3 published", st)
	}
	if n := len(readStream(t, b.JS)); n != 3 {
		t.Errorf("stream holds %d messages, want 3", n)
	}
}

// Replaying an event whose earlier publish was stored but not
// acknowledged (a lost ack, a crash before the file was deleted) stores it
// once: the message id is the event id.
func TestPublisherReplayIsStoredOnce(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), nil)
	id := p.nextID()
	data, err := proto.Marshal(&mcpdriftv1.CallObservation{EventId: id, Tenant: tenant, Server: "mem", Proxy: "px1", Tool: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ev := &event{id: id, subject: bus.CallObservationSubject(tenant, "mem"), kind: kindCall, data: data}
	if _, err := bus.Publish(context.Background(), b.JS, ev.subject, ev.data, ev.id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ob.add([]*event{ev}); err != nil {
		t.Fatal(err)
	}
	runInBackground(t, p.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.OutboxDepth != 0 {
			return statsSeen("OutboxDepth == 0", st)
		}
		return nil
	})
	if n := len(readStream(t, b.JS)); n != 1 {
		t.Errorf("stream holds %d messages, want the event once", n)
	}
}

// When the outbox is full, the oldest calls go first and listings stay.
func TestPublisherOutboxBoundDropsCallsFirst(t *testing.T) {
	b := natstest.StartBus(t)
	dir := t.TempDir()
	p := newPublisher(t, b.JS, dir, func(c *Config) { c.MaxEvents = 4 })
	runInBackground(t, p.Run)
	port := stopBus(t, b)

	p.Listing(session.Listed{Variant: "default"}, []byte(`{"n":1}`))
	for _, tool := range []string{"c1", "c2", "c3", "c4"} {
		p.Call(session.Call{Tool: tool})
	}
	p.Listing(session.Listed{Variant: "default"}, []byte(`{"n":2}`))
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Spooled != 6 {
			return statsSeen("Spooled == 6", st)
		}
		return nil
	})
	if st := p.Stats(); st.Dropped != 2 || st.DroppedListings != 0 || st.OutboxDepth != 4 {
		t.Errorf("stats = %+v; want 2 calls dropped, 4 events kept", st)
	}

	restartBus(t, b, port)
	poll.Eventually(t, 30*time.Second, func() error {
		if st := p.Stats(); st.OutboxDepth != 0 {
			return statsSeen("OutboxDepth == 0", st)
		}
		return nil
	})
	msgs := readStream(t, b.JS)
	var got []string
	for _, m := range msgs {
		if m.call {
			got = append(got, m.callObs.Tool)
		} else {
			got = append(got, string(m.list.Capture))
		}
	}
	if want := []string{`{"n":1}`, "c3", "c4", `{"n":2}`}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v (the two oldest calls dropped)", got, want)
	}
}

func TestPublisherConfigValidate(t *testing.T) {
	ok := Config{Tenant: "acme", Server: "fs", Proxy: "p1", Dir: "/tmp/x"}
	for _, tt := range []struct {
		name    string
		mod     func(*Config)
		wantErr bool
	}{
		{"defaults", func(*Config) {}, false},
		{"no_dir", func(c *Config) { c.Dir = "" }, true},
		{"bad_proxy", func(c *Config) { c.Proxy = "a b" }, true},
		{"bad_server", func(c *Config) { c.Server = "fs.x" }, true},
		{"negative_events", func(c *Config) { c.MaxEvents = -1 }, true},
		{"negative_timeout", func(c *Config) { c.PublishTimeout = -time.Second }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// A full in-memory queue does not make the caller wait: the event goes to
// the outbox.
func TestPublisherQueueOverflowSpools(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), func(c *Config) { c.QueueEvents = 2 })
	for _, tool := range []string{"a", "b", "c", "d"} { // Run not started: nothing drains
		p.Call(session.Call{Tool: tool})
	}
	if st := p.Stats(); st.Queued != 2 || st.Spooled != 2 || st.OutboxDepth != 2 {
		t.Fatalf("stats = %+v; want 2 queued and 2 spooled", st)
	}
	runInBackground(t, p.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); !(st.Published == 4 && st.OutboxDepth == 0 && st.Queued == 0) {
			return statsSeen("Published == 4 && OutboxDepth == 0 && Queued == 0", st)
		}
		return nil
	})
	if n := len(readStream(t, b.JS)); n != 4 {
		t.Errorf("stream holds %d messages, want 4", n)
	}
}

// TestPublisherCompactListings: compact listings are batched as calls are
// (one message of several, its id the first one's followed by "+<n>"),
// never merged with calls, and carry what the session said of them.
func TestPublisherCompactListings(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), func(c *Config) { c.Linger = time.Minute })
	runInBackground(t, p.Run)
	hash := "sha256:" + strings.Repeat("ab", 32)
	p.Seen(session.Listed{Variant: "v1a2b", Agent: "alice", Session: "s1", Hash: hash})
	p.Seen(session.Listed{Agent: "bob", Session: "s2", Hash: hash})
	p.Call(session.Call{Tool: "read"})
	p.Seen(session.Listed{Variant: "v1a2b", Session: "s1", Hash: hash})
	// A whole listing ends the minute's linger at once.
	p.Listing(session.Listed{Variant: "v1a2b", Session: "s3", Hash: hash}, []byte(`{"tools":{"pages":[{"tools":[]}]}}`))
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Published != 5 {
			return statsSeen("Published == 5", st)
		}
		return nil
	})
	obs := readStream(t, b.JS)
	kinds, _ := kindsAndIDs(obs)
	if want := []string{kindSeen, kindSeen, kindCall, kindSeen, kindList}; !slices.Equal(kinds, want) {
		t.Fatalf("stream kinds %v, want %v", kinds, want)
	}
	if obs[0].seq != obs[1].seq || obs[1].seq == obs[2].seq || obs[2].seq == obs[3].seq {
		t.Errorf("messages %d %d %d %d: want the first two compact listings in one message, the call and the third apart",
			obs[0].seq, obs[1].seq, obs[2].seq, obs[3].seq)
	}
	first, second := obs[0].seen, obs[1].seen
	if obs[0].subject != bus.ListingsSeenSubject(tenant, "mem") || first.Tenant != tenant || first.Server != "mem" || first.Proxy != "px1" ||
		first.Variant != "v1a2b" || first.Agent != "alice" || first.Session != "s1" || first.SurfaceHash != hash || first.ObservedAtUnixMs == 0 {
		t.Errorf("first compact listing %v on %s", first, obs[0].subject)
	}
	if second.Variant != bus.DefaultVariant || second.Agent != "bob" {
		t.Errorf("second compact listing %v: want the default variant and agent bob", second)
	}
	if l := obs[4].list; l.Session != "s3" || l.SurfaceHash != hash {
		t.Errorf("whole listing session %q hash %q, want s3 and the proxy's hash", l.Session, l.SurfaceHash)
	}
}

// TestPublisherSpoolsCompactListings: with NATS down compact listings go
// to the outbox (as a batch once merged), are evicted before whole
// listings when it is full, and are published once NATS is back.
func TestPublisherSpoolsCompactListings(t *testing.T) {
	b := natstest.StartBus(t)
	p := newPublisher(t, b.JS, t.TempDir(), func(c *Config) { c.MaxEvents = 3 })
	runInBackground(t, p.Run)
	port := stopBus(t, b)

	hash := "sha256:" + strings.Repeat("cd", 32)
	p.Listing(session.Listed{Variant: "default"}, []byte(`{"n":1}`))
	for _, s := range []string{"s1", "s2", "s3"} {
		p.Seen(session.Listed{Variant: "default", Session: s, Hash: hash})
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if st := p.Stats(); st.Spooled != 4 {
			return statsSeen("Spooled == 4", st)
		}
		return nil
	})
	if st := p.Stats(); st.Dropped != 1 || st.DroppedListings != 1 || st.OutboxDepth != 3 {
		t.Errorf("stats = %+v; want the oldest compact listing dropped (a listing), the whole one kept", st)
	}
	restartBus(t, b, port)
	poll.Eventually(t, 30*time.Second, func() error {
		if st := p.Stats(); st.OutboxDepth != 0 {
			return statsSeen("OutboxDepth == 0", st)
		}
		return nil
	})
	var got []string
	for _, m := range readStream(t, b.JS) {
		switch {
		case m.seen != nil:
			got = append(got, m.seen.Session)
		case m.list != nil:
			got = append(got, string(m.list.Capture))
		}
	}
	if want := []string{`{"n":1}`, "s2", "s3"}; !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}
