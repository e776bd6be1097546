package streamhttp

import (
	"context"
	"sync/atomic"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// maxOwnInFlight bounds the proxy's own requests of one session in flight
// upstream at once (its listings, its answers to the server's requests in
// the client's stead), each a request of its own: a re-listing takes at
// most one per kind of listing (the session coalesces them), so only a
// flood of the server's requests can reach the bound.
const maxOwnInFlight = 64

// ownBound is a session's count of its own requests in flight
// (maxOwnInFlight); its zero value is ready.
type ownBound struct {
	n       atomic.Int64
	refused atomic.Bool // one was refused since the count was last zero
}

// send runs do on a goroutine of the proxy's (spawn), or refuses with
// session.ErrServerBacklog when maxOwnInFlight are in flight; once the
// last in flight ends after a refusal, sess is told (Session.Drained).
func (b *ownBound) send(f *front, sess func() *session.Session, do func(ctx context.Context)) error {
	if b.n.Add(1) > maxOwnInFlight {
		b.n.Add(-1)
		b.refused.Store(true)
		return session.ErrServerBacklog
	}
	f.p.spawn(func(ctx context.Context) {
		do(ctx)
		if b.n.Add(-1) == 0 && b.refused.Swap(false) {
			sess().Drained()
		}
	})
	return nil
}
