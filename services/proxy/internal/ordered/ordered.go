// Package ordered delivers what a serial transport reads (stdio, HTTP+SSE
// and each event stream of Streamable HTTP, where the server's messages
// come one after another on one reader) in the order the server sent it,
// while a decision that must wait (a verdict that is due, the proxy's own
// re-listing) is made off the reader, so that the reader goes on reading
// the server's next messages meanwhile, the proxy's own listing among them
// (docs/adr/0007-fail-closed-by-construction.md). What is read behind a
// decision that waits is bounded (maxBacklog): past the bound, what may be
// shed is (Shedder). The goroutines it starts are its own: Wait joins them.
package ordered

import (
	"context"
	"errors"
	"sync"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// Decision is the judgement of one message read (session.Decision), of
// type D: its own Wait returns it made.
type Decision[D any] interface {
	// Waits reports whether the decision is still to be made: Wait
	// blocks, and the queue runs it off the reader.
	Waits() bool
	// Wait returns the decision made.
	Wait(ctx context.Context) D
	// Delivery returns, of a decision made, the bytes to deliver and the
	// error of what was done meanwhile.
	Delivery() (out []byte, err error)
	// Report hands what the message showed to its observer; it is called
	// once the message is delivered.
	Report()
}

// Shedder is a Decision the queue may drop rather than keep while its
// backlog is over the bound (a notification decided at once, behind a
// decision that waits): Shed drops it, counted by its owner, and reports
// whether it could (false: it must be delivered).
type Shedder interface {
	Shed() bool
}

// The backlog bound: messages read and not yet delivered, because one
// read before them waits for its decision. A Shedder pushed while the
// backlog is at the bound is shed; what cannot be shed is kept (a
// response, bounded by the client's requests; a decision that waits,
// bounded by the session: one list_changed held per listing).
const (
	maxBacklog      = 1024
	maxBacklogBytes = 32 << 20
)

// Queue delivers the decisions pushed to it with write, in the order they
// were pushed.
type Queue[D Decision[D]] struct {
	write func([]byte) error

	mu    lockorder.Mutex[lockorder.QueueMu]
	slots []*slot[D]
	bytes int   // of the messages settled in slots
	err   error // the first write that failed: nothing more is written
	first error // the first error of a write or of a decision made off the reader (Wait)
	fresh error // decisions' errors Push has not returned yet

	writing lockorder.Mutex[lockorder.QueueWriting] // one writer at a time, in order
	work    sync.WaitGroup                          // decisions made off the reader
}

type slot[D any] struct {
	done bool
	out  []byte
	d    D
}

// New returns a queue that delivers with write (one message per call).
func New[D Decision[D]](write func([]byte) error) *Queue[D] { return &Queue[D]{write: write} }

// Push queues d, read after everything pushed before, and delivers in order
// what is decided. A decision that must wait is made off the caller's
// goroutine, on ctx. frame, when not nil, wraps the bytes to deliver (an
// SSE event) and may return nil to deliver nothing. Push returns the error
// of a decision made at once, the write to the client that failed (on
// every Push once one has) and the errors of decisions made off the reader
// since the last Push (once): a decision that waits carries the error of
// what was done on the reader too (session.Decision.Wait), returned when
// it is made.
func (q *Queue[D]) Push(ctx context.Context, d D, frame func([]byte) []byte) error {
	if frame == nil {
		frame = func(b []byte) []byte { return b }
	}
	sl := &slot[D]{d: d}
	q.mu.Lock()
	over := len(q.slots) >= maxBacklog || q.bytes >= maxBacklogBytes
	if over {
		q.mu.Unlock()
		if sh, ok := any(d).(Shedder); ok && sh.Shed() {
			_, err := d.Delivery()
			return errors.Join(err, q.failed())
		}
		q.mu.Lock()
	}
	q.slots = append(q.slots, sl)
	q.mu.Unlock()
	var err error
	if !d.Waits() {
		var out []byte
		out, err = d.Delivery()
		q.settle(sl, frame(out), nil)
	} else {
		// Its error, with that of what was done on the reader, is the
		// made decision's (Wait): returned by a later Push, or Wait.
		q.work.Add(1)
		go func(ctx context.Context) {
			defer q.work.Done()
			out, err := d.Wait(ctx).Delivery()
			q.settle(sl, frame(out), err)
		}(ctx)
	}
	if werr := q.failed(); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// Wait waits for the decisions being made off the reader and returns the
// first error one of them met or a write met, nil when none did. Call it
// once the reader has stopped pushing.
func (q *Queue[D]) Wait() error {
	q.work.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.first
}

// failed returns the failed write to the client (every time) and the
// errors of decisions made off the reader since it was last asked (once).
func (q *Queue[D]) failed() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := errors.Join(q.err, q.fresh)
	q.fresh = nil
	return err
}

// record keeps err (a decision's, or a write's when write is set).
func (q *Queue[D]) record(err error, write bool) {
	if err == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.first == nil {
		q.first = err
	}
	if write {
		q.err = err
	} else {
		q.fresh = errors.Join(q.fresh, err)
	}
}

// settle records what sl delivers (and the error of its decision) and
// writes every settled message at the head of the queue, in order.
func (q *Queue[D]) settle(sl *slot[D], out []byte, err error) {
	q.record(err, false)
	q.mu.Lock()
	sl.done, sl.out = true, out
	q.bytes += len(out)
	q.mu.Unlock()
	q.writing.Lock()
	defer q.writing.Unlock()
	for {
		q.mu.Lock()
		if len(q.slots) == 0 || !q.slots[0].done {
			q.mu.Unlock()
			return
		}
		head := q.slots[0]
		q.slots[0] = nil
		q.slots = q.slots[1:]
		q.bytes -= len(head.out)
		failed := q.err != nil
		q.mu.Unlock()
		if len(head.out) > 0 && !failed {
			if err := q.write(head.out); err != nil {
				q.record(err, true)
			}
		}
		head.d.Report()
	}
}
