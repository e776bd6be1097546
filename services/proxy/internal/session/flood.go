package session

import (
	"errors"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
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
//     in flight and one more owed (relistState.dirty), however many
//     list_changed notifications the server sends meanwhile;
//   - a list_changed held until the proxy has re-listed (Decision.Wait)
//     holds every later one of the same listings while it waits: they are
//     dropped (DropCoalesced), the one held says all they would.
//
// What the transport's queue cannot take is dropped and counted
// (ErrServerBacklog, DropServerBacklog); a re-listing so dropped leaves the
// listing distrusted (relistState.dropped) until the proxy has listed it
// again, which it does once the queue has drained (Drained).
//
// What the session keeps of it is its own: relists, one relistState per
// kind of listing, under a lock of its own.

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

// relists is what a session keeps of its own re-listings, by kind of
// listing. Its lock is its own, a leaf, taken under the session's or
// alone.
type relists struct {
	mu lockorder.Mutex[lockorder.RelistsMu]
	of [surface.KindResourceTemplate + 1]relistState
}

// relistState is the proxy's own listing of one kind: one in flight since
// since, and dirty when another is owed after it; dropped when its request
// did not reach the server, and the kind is distrusted until it is listed
// again; relisting is closed when the re-listing a list_changed asked for
// is done; held counts the list_changed held until it is (holdChange).
type relistState struct {
	inFlight, dirty, dropped bool
	since                    time.Time
	relisting                chan struct{}
	held                     int
}

// soon is relistSoon's bookkeeping: whether to send a re-listing of k now
// (false: one is in flight, younger than timeout, and another is owed).
func (r *relists) soon(k surface.Kind, wait bool, timeout time.Duration) (send bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks := &r.of[k]
	if (wait || ks.dropped) && ks.relisting == nil {
		ks.relisting = make(chan struct{})
	}
	if ks.inFlight && time.Since(ks.since) < timeout {
		ks.dirty = true
		return false
	}
	ks.inFlight, ks.dirty, ks.dropped, ks.since = true, false, false, time.Now()
	return true
}

// start notes a listing of k sent whatever is in flight (ListAll); a kind
// distrusted stays so until it is listed.
func (r *relists) start(k surface.Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks := &r.of[k]
	if ks.dropped && ks.relisting == nil {
		ks.relisting = make(chan struct{})
	}
	ks.inFlight, ks.dirty, ks.dropped, ks.since = true, false, false, time.Now()
}

// drop notes that the re-listing of k did not reach the server.
func (r *relists) drop(k surface.Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.of[k].dropped, r.of[k].dirty = true, false
}

// end ends the re-listing of k: again says that the one owed is to be sent
// now; else the wait for a re-listing of k ends.
func (r *relists) end(k surface.Kind) (again bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks := &r.of[k]
	if ks.inFlight && ks.dirty && !ks.dropped {
		ks.dirty, ks.since = false, time.Now()
		return true
	}
	ks.inFlight, ks.dirty = false, false
	if ch := ks.relisting; ch != nil {
		close(ch)
		ks.relisting = nil
	}
	return false
}

// waits returns what decisions on kind (0: every kind) wait for: the
// re-listings under way, or distrusted when one never reached the server.
func (r *relists) waits(kind surface.Kind) (chans []chan struct{}, distrusted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.of {
		if kind != 0 && surface.Kind(k) != kind {
			continue
		}
		if r.of[k].dropped {
			return nil, true
		}
		if ch := r.of[k].relisting; ch != nil {
			chans = append(chans, ch)
		}
	}
	return chans, false
}

// inFlight reports whether a listing of k is in flight.
func (r *relists) inFlight(k surface.Kind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.of[k].inFlight
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
	if !s.relists.soon(k, wait, s.cfg.Timeout) {
		return nil
	}
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
	s.relists.drop(k) // under s.mu: no newer listing of k starts meanwhile
	s.mu.Unlock()
	s.failListing(k, listingRef{by: byProxy, gen: gen}, why, false)
}

// Drained lists again each kind whose re-listing was dropped: the
// transport calls it once its queue to the server has drained after it
// refused a message (ErrServerBacklog).
func (s *Session) Drained() {
	var kinds []surface.Kind
	s.relists.mu.Lock()
	for k := range s.relists.of {
		if s.relists.of[k].dropped && !s.relists.of[k].inFlight {
			kinds = append(kinds, surface.Kind(k))
		}
	}
	s.relists.mu.Unlock()
	for _, k := range kinds {
		_ = s.relistSoon(k, true)
	}
}

// holdChange notes a list_changed of kinds held until the proxy has
// re-listed; false when one of the same kinds is held already, which
// says all this one would once delivered (it waits for the same
// re-listing, and for the one owed after it).
func (s *Session) holdChange(kinds []surface.Kind) bool {
	r := &s.relists
	r.mu.Lock()
	defer r.mu.Unlock()
	covered := true
	for _, k := range kinds {
		covered = covered && r.of[k].held > 0
	}
	if covered {
		return false
	}
	for _, k := range kinds {
		r.of[k].held++
	}
	return true
}

// releaseChange ends a hold of holdChange, once the list_changed is decided.
func (s *Session) releaseChange(kinds []surface.Kind) {
	r := &s.relists
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range kinds {
		r.of[k].held--
	}
}
