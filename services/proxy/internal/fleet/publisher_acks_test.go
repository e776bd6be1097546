package fleet

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// TestAckError: the publisher reads JetStream's answers to a publish as
// JetStream's asynchronous publishing does: an acknowledgement names its
// stream; an error is JetStream's APIError (a 400 is permanent); no
// responders and anything unreadable are errors to retry.
func TestAckError(t *testing.T) {
	for _, c := range []struct {
		name      string
		data      string
		status    string
		ok        bool
		permanent bool
		is        error
	}{
		{name: "ack", data: `{"stream":"OBSERVATIONS","seq":12}`, ok: true},
		{name: "duplicate", data: `{"stream":"OBSERVATIONS","seq":12,"duplicate":true}`, ok: true},
		{name: "ack with domain", data: `{"stream":"OBSERVATIONS","domain":"hub","seq":1}`, ok: true},
		{name: "no stream", data: `{"seq":12}`, is: jetstream.ErrInvalidJSAck},
		{name: "empty stream", data: `{"stream":"","seq":12}`, is: jetstream.ErrInvalidJSAck},
		{name: "not json", data: `stream`, is: jetstream.ErrInvalidJSAck},
		{name: "bad request", data: `{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`, permanent: true},
		{name: "unavailable", data: `{"error":{"code":503,"err_code":10039,"description":"jetstream not enabled"}}`},
		{name: "no responders", status: "503", is: jetstream.ErrNoStreamResponse},
		{name: "other status", status: "408", is: jetstream.ErrInvalidJSAck},
		{name: "nothing", is: jetstream.ErrInvalidJSAck},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &nats.Msg{Data: []byte(c.data), Header: nats.Header{}}
			if c.status != "" {
				m.Header.Set("Status", c.status)
			}
			err := ackError(m)
			switch {
			case c.ok && err != nil:
				t.Fatalf("ackError = %v, want nil", err)
			case !c.ok && err == nil:
				t.Fatal("ackError = nil, want an error")
			case c.is != nil && !errors.Is(err, c.is):
				t.Fatalf("ackError = %v, want %v", err, c.is)
			case permanent(err) != c.permanent:
				t.Fatalf("permanent(%v) = %v, want %v", err, permanent(err), c.permanent)
			}
		})
	}
}

// TestAcksPublish: against a real JetStream, each event gets its own
// answer: stored, refused for good (larger than the stream takes), no
// stream at all (after the two retries of no responders); and a later
// round is not confused by the answers of an
// earlier one that gave up waiting.
func TestAcksPublish(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	if _, err := b.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "ACKTEST", Subjects: []string{"acktest.>"}, MaxMsgSize: 64, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, b.JS, t.TempDir(), nil)
	a := p.newAcks()
	if a == nil {
		t.Fatal("no acknowledgement subscription")
	}
	defer a.close()
	evs := []*event{
		{id: "e1", subject: "acktest.a", data: []byte("small")},
		{id: "e2", subject: "acktest.a", data: bytes.Repeat([]byte("x"), 200)},
		{id: "e3", subject: "nostream.a", data: []byte("small")},
		{id: "e1", subject: "acktest.a", data: []byte("small")}, // the same message id: a duplicate, acknowledged
	}
	errs := a.publish(ctx, evs)
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("stored events: errors %v, %v", errs[0], errs[3])
	}
	if !permanent(errs[1]) {
		t.Fatalf("too large: %v, want a permanent error", errs[1])
	}
	if !errors.Is(errs[2], jetstream.ErrNoStreamResponse) || permanent(errs[2]) {
		t.Fatalf("no stream: %v, want no responders, to retry", errs[2])
	}

	// A round that stops waiting at once leaves its answers to arrive
	// late; the next round reads only its own.
	done, cancel := context.WithCancel(ctx)
	cancel()
	late := a.publish(done, []*event{{id: "e4", subject: "nostream.b", data: []byte("x")}, {id: "e5", subject: "acktest.b", data: bytes.Repeat([]byte("y"), 100)}})
	for _, err := range late {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round given up: %v, want context.Canceled", err)
		}
	}
	errs = a.publish(ctx, []*event{{id: "e6", subject: "acktest.c", data: []byte("ok")}})
	if errs[0] != nil {
		t.Fatalf("after late answers: %v", errs[0])
	}
	s, err := b.JS.Stream(ctx, "ACKTEST")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (e1 once, e6)", info.State.Msgs)
	}
}
