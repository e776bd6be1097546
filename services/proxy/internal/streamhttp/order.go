package streamhttp

import (
	"context"
	"net/http"
	"time"
)

// The client's order, kept upstream. A client opens its session's GET
// stream right after notifications/initialized and goes on with its
// requests at once, without waiting for the stream's answer (the SDKs'
// clients do). Directly, the server takes the GET in the same moment as
// the request after it; servers on the TypeScript SDK send what they send
// outside a request's stream (sampling and elicitation requests made from
// the session, list changes, logs) on the GET stream only, and drop it
// while none is open. Through the proxy the two travel on two upstream
// connections beside the proxy's own listing at session start, and the
// request reached the server first often enough for its sampling or
// elicitation request to be lost (the conformance suite's
// tools-call-sampling and tools-call-elicitation, e2e/conformance_test.go).
// So, once a session is open, a request of the client waits until the
// server has answered the client's GET stream: at most getGrace for a GET
// that has not arrived yet (a client that opens none pays that once, on
// its first request), at most maxOrderWait for one under way.

const (
	// getGrace is how long after the session opened a request waits for
	// the client's GET to arrive.
	getGrace = 250 * time.Millisecond
	// maxOrderWait bounds the wait for a GET's answer: a server that holds
	// its answer back is not waited on forever.
	maxOrderWait = 5 * time.Second
)

// getGate orders a session's requests behind its GET stream.
type getGate struct {
	ch    chan struct{} // closed when the awaited GET has its answer; nil: nothing awaited
	until time.Time     // the wait ends then at the latest
	seen  bool          // a GET of the client was forwarded
}

// expectGet says that the session is open: requests wait for the client's
// GET stream (getGrace) unless one was already forwarded.
func (t *tracked) expectGet() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.gate.seen && t.gate.ch == nil {
		t.gate.ch, t.gate.until = make(chan struct{}), time.Now().Add(getGrace)
	}
}

// opening marks the start of the client's GET of t; done, called once the
// server's answer (or failure) is in, lets the requests behind it go.
func (t *tracked) opening() (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gate.seen = true
	if t.gate.ch == nil {
		t.gate.ch = make(chan struct{})
	}
	ch := t.gate.ch
	t.gate.until = time.Now().Add(maxOrderWait)
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.gate.ch == ch {
			close(ch)
			t.gate.ch = nil
		}
	}
}

// afterOpening waits until the GET stream the client opened (or is about
// to open) has its server's answer, r ends, or the gate's time is up.
func (t *tracked) afterOpening(r *http.Request) {
	t.mu.Lock()
	ch, until := t.gate.ch, t.gate.until
	t.mu.Unlock()
	if ch == nil {
		return
	}
	wait := time.Until(until)
	if wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
