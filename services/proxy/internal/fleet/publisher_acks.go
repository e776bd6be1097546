package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// acks publishes to JetStream and reads the acknowledgements itself, for
// one goroutine (drain's, or replay's): each message goes out with a reply
// subject of its own under an inbox, and NATS's reader hands each
// acknowledgement straight to the publishing goroutine through the
// subscription's channel. JetStream's asynchronous publishing takes one
// more hand-off per round (the acknowledgement goes to a subscription
// goroutine of its own, which wakes the publisher) and decodes each
// acknowledgement with encoding/json. What is published, with what message
// id, and what counts as acknowledged are the same: an acknowledgement that
// names its stream, or JetStream's error; no responders is retried as there.
type acks struct {
	nc     *nats.Conn
	prefix string // the inbox and a dot: a message's reply subject is prefix and its number
	ch     chan *nats.Msg
	sub    *nats.Subscription
	seq    uint64 // the number of the last message published
}

// newAcks subscribes to an inbox of its own; nil when there is no
// connection or the subscription fails (the publisher then publishes
// through JetStream's asynchronous publishing).
func (p *Publisher) newAcks() *acks {
	nc := p.js.Conn()
	if nc == nil {
		return nil
	}
	// One round's acknowledgements fit (batchEvents); one that does not
	// is dropped by NATS's reader, and its event retried after
	// PublishTimeout (JetStream stores it once: its message id).
	a := &acks{nc: nc, prefix: nc.NewInbox() + ".", ch: make(chan *nats.Msg, 2*batchEvents)}
	sub, err := nc.ChanSubscribe(a.prefix+"*", a.ch)
	if err != nil {
		p.log.Warn().Err(err).Msg("subscribing to acknowledgements; publishing through JetStream's asynchronous publishing")
		return nil
	}
	a.sub = sub
	return a
}

func (a *acks) close() {
	if a != nil {
		_ = a.sub.Unsubscribe()
	}
}

// publish sends evs without waiting between them, then waits for their
// acknowledgements until ctx ends, and returns the error of each event
// (nil: acknowledged), ctx's for those still unacknowledged when it ends.
// Acknowledgements of an earlier call's events, late, are skipped.
func (a *acks) publish(ctx context.Context, evs []*event) []error {
	errs := make([]error, len(evs))
	done := make([]bool, len(evs))
	first := a.seq + 1
	a.seq += uint64(len(evs))
	send := func(i int) error {
		ev := evs[i]
		return a.nc.PublishMsg(&nats.Msg{Subject: ev.subject, Reply: a.prefix + strconv.FormatUint(first+uint64(i), 10), Data: ev.data,
			Header: nats.Header{jetstream.MsgIDHeader: []string{ev.id}}})
	}
	waiting := 0
	for i := range evs {
		if errs[i] = send(i); errs[i] != nil {
			done[i] = true
			continue
		}
		waiting++
	}
	// No responders (no stream leader at the moment) is retried as
	// JetStream's asynchronous publishing retries it: twice, 250 ms apart.
	var tries []int
	var due []int
	var retry <-chan time.Time
	for waiting > 0 {
		select {
		case m := <-a.ch:
			n, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, a.prefix), 10, 64)
			if err != nil || n < first || n-first >= uint64(len(evs)) || done[n-first] {
				continue // not one of these events'
			}
			i := int(n - first)
			err = ackError(m)
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				if tries == nil {
					tries = make([]int, len(evs))
				}
				if tries[i] < jetstream.DefaultPubRetryAttempts {
					tries[i]++
					due = append(due, i)
					if retry == nil {
						retry = time.After(jetstream.DefaultPubRetryWait)
					}
					continue
				}
			}
			done[i], errs[i] = true, err
			waiting--
		case <-retry:
			for _, i := range due {
				if errs[i] = send(i); errs[i] != nil {
					done[i] = true
					waiting--
				}
			}
			due, retry = due[:0], nil
		case <-ctx.Done():
			for i := range evs {
				if !done[i] {
					errs[i] = ctx.Err()
				}
			}
			return errs
		}
	}
	return errs
}

// ackError reads JetStream's answer to a publish: nil for an
// acknowledgement (it names the stream that stored the message), else why
// not, as JetStream's asynchronous publishing names it.
func ackError(m *nats.Msg) error {
	if len(m.Data) == 0 {
		if st := m.Header.Get("Status"); st == "503" {
			return jetstream.ErrNoStreamResponse
		} else if st != "" {
			return fmt.Errorf("%w: status %s %s", jetstream.ErrInvalidJSAck, st, m.Header.Get("Description"))
		}
		return jetstream.ErrInvalidJSAck
	}
	// The common answer, {"stream":"...","seq":...}, read without
	// reflection; anything else (an error) as encoding/json reads it.
	d := canonjson.Borrow()
	defer canonjson.Return(d)
	if d.Parse(m.Data, canonjson.Limits{LaxNumbers: true}) == nil && d.Kind(canonjson.Root) == canonjson.Object {
		if _, hasErr := d.Get(canonjson.Root, "error"); !hasErr {
			if s, ok := d.Get(canonjson.Root, "stream"); ok && d.Kind(s) == canonjson.String && !d.StringIs(s, "") {
				return nil
			}
			return jetstream.ErrInvalidJSAck
		}
	}
	var pa struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
	}
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		return jetstream.ErrInvalidJSAck
	}
	if pa.Error != nil {
		return pa.Error
	}
	if pa.Stream == "" {
		return jetstream.ErrInvalidJSAck
	}
	return nil
}
