package session

import (
	"errors"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Floods cost a bounded amount (docs/services/proxy.md, "Re-listing"):
//
//   - what the proxy sends the server of its own (a re-listing, an answer
//     in the client's stead) is handed to the transport's toServer, which
//     never blocks: HTTP sends each on a request of its own (at most 64
//     of a session's in flight), stdio queues it (at most 64) for a
//     writer goroutine of its own, so that the
//     goroutine that reads from the server never blocks on a write to that
//     same server (on stdio, a server that does not read its stdin until
//     its stdout is drained would otherwise hold both pipes full);
//   - a re-listing is asked for with relistSoon: at most one of each kind
//     in flight and one more owed (kindState.dirty), however many
//     list_changed notifications the server sends meanwhile;
//   - a list_changed held until the proxy has re-listed (Decision.Wait)
//     holds every later one of the same listings while it waits: they are
//     dropped (DropCoalesced), the one held says all they would.
//
// What the transport's queue cannot take is dropped and counted
// (ErrServerBacklog, DropServerBacklog); a re-listing so dropped leaves the
// listing distrusted (kindState.dropped) until the proxy has listed it
// again, which it does once the queue has drained (Drained).

// ErrServerBacklog is what a transport's toServer (New) returns for a
// message of the proxy's own it did not send because its queue to the
// server is full: the session counts it (DropServerBacklog) and fails
// closed (a re-listing so dropped leaves its listing distrusted), and
// goes on; any other error is a write that failed.
var ErrServerBacklog = errors.New("the queue to the server is full")

// sendOwn is the session's toServer: the transport's, with a message it
// could not queue counted rather than returned.
func (s *Session) sendOwn(b []byte) error {
	err := s.send(b)
	if errors.Is(err, ErrServerBacklog) {
		s.Dropped(DropServerBacklog)
		return nil
	}
	return err
}

// relistSoon asks for a re-listing of k on the proxy's own account: at
// once when none of k is in flight, else once the one in flight has ended
// (dirty), so that a burst of list_changed costs one re-listing in flight
// and one owed. wait makes decisions on k wait for it (waitRelisted), as
// after a list_changed. A re-listing in flight for longer than
// Config.Timeout (a server that never answered it) is given up for a new
// one. After a re-listing that was dropped, decisions on k wait for this
// one whatever wait says.
func (s *Session) relistSoon(k surface.Kind, wait bool) error {
	s.mu.Lock()
	ks := &s.kinds[k]
	if (wait || ks.dropped) && ks.relisting == nil {
		ks.relisting = make(chan struct{})
	}
	if ks.inFlight && time.Since(ks.since) < s.cfg.Timeout {
		ks.dirty = true
		s.mu.Unlock()
		return nil
	}
	ks.inFlight, ks.dirty, ks.dropped, ks.since = true, false, false, time.Now()
	s.mu.Unlock()
	return s.relist(k, "")
}

// relistDropped handles a request of the proxy's own listing of k (of
// generation gen) that did not reach the server: the listing fails, and k
// is distrusted (waitRelisted false) until the proxy has listed it again.
func (s *Session) relistDropped(k surface.Kind, gen int, why string) {
	s.mu.Lock()
	if gen != s.kinds[k].gen {
		s.mu.Unlock()
		return
	}
	s.kinds[k].dropped, s.kinds[k].dirty = true, false
	s.mu.Unlock()
	s.failListing(k, listingRef{by: byProxy, gen: gen}, why, false)
}

// Drained lists again each kind whose re-listing was dropped: the
// transport calls it once its queue to the server has drained after it
// refused a message (ErrServerBacklog).
func (s *Session) Drained() {
	var kinds []surface.Kind
	s.mu.Lock()
	for k := range s.kinds {
		if s.kinds[k].dropped && !s.kinds[k].inFlight {
			kinds = append(kinds, surface.Kind(k))
		}
	}
	s.mu.Unlock()
	for _, k := range kinds {
		_ = s.relistSoon(k, true)
	}
}

// holdChange notes a list_changed of kinds held until the proxy has
// re-listed; false when one of the same kinds is held already, which
// says all this one would once delivered (it waits for the same
// re-listing, and for the one owed after it).
func (s *Session) holdChange(kinds []surface.Kind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	covered := true
	for _, k := range kinds {
		covered = covered && s.kinds[k].held > 0
	}
	if covered {
		return false
	}
	for _, k := range kinds {
		s.kinds[k].held++
	}
	return true
}

// releaseChange ends a hold of holdChange, once the list_changed is decided.
func (s *Session) releaseChange(kinds []surface.Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range kinds {
		s.kinds[k].held--
	}
}
