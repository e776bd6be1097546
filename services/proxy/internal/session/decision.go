package session

import (
	"context"
	"errors"
)

// Decision is the session's decision on one message, from the client
// (Client) or from the server (Server): the bytes to send on, each way,
// decided at once or still to be made. It is consumed one way, on every
// transport: Wait returns the decision made, at once when nothing waits.
// A decision waits for the verdict on a listing that is due, for the
// proxy's own re-listing after a list_changed, for a server's request on
// first sight, or for an admin's approval of a call held by the policy; a
// serial transport makes it off its reader, in order (package ordered, to
// which Decision is an ordered.Decision), and any other transport where it
// stands.
type Decision struct {
	// ToServer is what to send the server: the client's message as judged
	// (untouched, sanitized, a batch without the elements refused), or nil.
	ToServer []byte
	// ToClient is what to deliver to the client: the proxy's own answer
	// (a refusal), the server's message as judged (the original, a
	// listing with unapproved items taken out, the proxy's error in place
	// of an answer it could not judge), or nil.
	ToClient []byte
	// Opened: the client opened the session (notifications/initialized);
	// the transport calls ListAll once ToServer is sent.
	Opened bool
	// Err is the error of what the session sent the server meanwhile (a
	// re-listing): the message itself is decided all the same.
	Err error

	later func(ctx context.Context) Decision // the part still to be made; nil once made
	seen  Seen                               // what the message showed, reported once delivered
}

// Waits reports whether the decision is still to be made: Wait blocks.
func (d Decision) Waits() bool { return d.later != nil }

// Wait returns the decision made: d itself when it does not wait, else
// the decision made on ctx (bounded by Config.Timeout, or by the approval's
// own bound for a held call; ctx ending, the client gone, refuses a held
// call), with the errors of both parts.
func (d Decision) Wait(ctx context.Context) Decision {
	if d.later == nil {
		return d
	}
	made := d.later(ctx)
	made.Err = errors.Join(d.Err, made.Err)
	made.seen = d.seen
	return made
}

// Delivery returns what to deliver to the client and the decision's
// error: of a decision made, what Wait returned (package ordered reads it
// so).
func (d Decision) Delivery() ([]byte, error) { return d.ToClient, d.Err }

// Report hands what the message showed (the calls it answered) to the
// observer; call it once, when the message is delivered.
func (d Decision) Report() { d.seen.Report() }

// Shed drops the message, when it is a notification decided at once or a
// request of the server's, for a transport whose backlog to the client is
// over its bound (package ordered): it is counted (DropBacklog) and never
// delivered; a request so dropped is answered in the client's stead with
// an error (DropBacklog), so that the server does not wait for an answer
// that cannot come. false: the message is not one to shed (a response,
// which the client waits for, a list_changed held for the re-listing, any
// message of the client's), and must be delivered.
func (d Decision) Shed() bool {
	switch {
	case d.seen.s == nil:
		return false // not a message of the server's
	case !d.seen.request && (!d.seen.notice || d.later != nil):
		return false
	case d.later == nil && d.ToClient == nil:
		return true // nothing to deliver: nothing lost
	}
	d.seen.s.Dropped(DropBacklog)
	if d.seen.request {
		// Best effort: a queue to the server that is full too drops the
		// answer like any of the proxy's own messages (ErrServerBacklog).
		_ = d.seen.s.toServer(Reply(d.seen.id, DropBacklog, "mcpdrift proxy: the client is not reading; the server's request was dropped"))
	}
	return true
}
