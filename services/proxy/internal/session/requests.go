package session

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// requests is a session's book of the requests in flight whose answers it
// judges: the client's, by their raw ids, and the proxy's own (its
// listings, its reads of UI resources, its gets of prompts), by the ids it
// made for them. It is the only place an answer is tied to its request. Its
// lock is its own, taken under the session's or alone, never around
// another.
type requests struct {
	mu     lockorder.Mutex[lockorder.RequestsMu]
	client map[string]pendingReq // the client's requests the session answers for
	keyed  map[string]string     // their ids by idKey (one each: addClient refuses a second)
	own    map[string]pendingReq // the proxy's own
	prefix string                // of the ids of the proxy's own requests
	seq    int
}

// pendingReq is what the session keeps of a request in flight.
type pendingReq struct {
	method string
	kind   surface.Kind
	tool   string
	start  time.Time
	digest string
	args   []byte // with Config.FullArguments
	alert  Code   // the refusal code a call was forwarded despite (alert posture)
	// partial: forwarded under withhold_changed while the server differs
	// from its baseline (an unchanged tool): rules see it as drifted.
	partial bool
	policy  Decided
	// rawArgs: the call's arguments during its decision only (a slice of
	// the transport's buffer, never kept).
	rawArgs []byte
	gen     int  // the proxy's own listing a page request belongs to (a read: its round)
	own     bool // a request of the proxy's own
	// got is what a resources/read or prompts/get gets whose answer is
	// pinned (the proxy's own, or an agent's whose answer is judged:
	// uiAnswer): a UI resource's contents, an argument-less prompt's
	// messages.
	got gotKey
	// again: a get of the proxy's own made a second time, its first
	// lost on the way (Session.OwnFailed).
	again bool
	key   string // a client's request: its id's idKey ("" when it has none)
}

// addClient books the client's request id; false, and nothing booked,
// when a request of the client's with that id is in flight already, or
// one whose id a client that coerces ids takes for it (1 and "1": idKey):
// an answer would be taken for either's (clientMessage refuses it).
func (b *requests) addClient(id []byte, p pendingReq) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.client == nil {
		b.client, b.keyed = map[string]pendingReq{}, map[string]string{}
	}
	if _, ok := b.client[string(id)]; ok {
		return false
	}
	if key, ok := idKey(id); ok {
		if _, taken := b.keyed[key]; taken {
			return false
		}
		p.key = key
		b.keyed[key] = string(id)
	}
	b.client[string(id)] = p
	return true
}

// inFlight reports whether a request of the client's with id, or with an
// id a client that coerces ids takes for it, is in flight.
func (b *requests) inFlight(id []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlightLocked(id)
}

func (b *requests) inFlightLocked(id []byte) bool {
	if len(b.client) == 0 {
		return false
	}
	if _, ok := b.client[string(id)]; ok {
		return true
	}
	key, ok := idKey(id)
	if !ok {
		return false
	}
	_, ok = b.keyed[key]
	return ok
}

// takeClientLocked returns the client's request id and forgets it.
func (b *requests) takeClientLocked(id string) (pendingReq, bool) {
	p, ok := b.client[id]
	if ok {
		delete(b.client, id)
		if p.key != "" {
			delete(b.keyed, p.key)
		}
	}
	return p, ok
}

// addOwn books a request of the proxy's own and returns the id made for
// it, as raw JSON: a string with a prefix no client can guess, so that no
// client request is taken for it.
func (b *requests) addOwn(p pendingReq) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prefix == "" {
		var r [6]byte
		_, _ = rand.Read(r[:])
		b.prefix = "mcpdrift-" + hex.EncodeToString(r[:]) + "-"
	}
	b.seq++
	id := `"` + b.prefix + strconv.Itoa(b.seq) + `"`
	p.own = true
	if b.own == nil {
		b.own = map[string]pendingReq{}
	}
	b.own[id] = p
	return id
}

// ownOf returns the proxy's own request id, still in flight, and leaves it
// booked.
func (b *requests) ownOf(id string) (pendingReq, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.own[id]
	return p, ok
}

// takeOwn returns the proxy's own request id and forgets it.
func (b *requests) takeOwn(id string) (pendingReq, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.own[id]
	delete(b.own, id)
	return p, ok
}

// take returns the request an answer with id answers, the proxy's own
// first, and forgets it; ok false when none is in flight.
func (b *requests) take(id string) (p pendingReq, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.own[id]; ok {
		delete(b.own, id)
		return p, true
	}
	return b.takeClientLocked(id)
}

// takeClientKeyed returns the id of a client's request in flight whose id
// a lenient client takes for key (idKey) and forgets the request; nil when
// there is none.
func (b *requests) takeClientKeyed(key string) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	pid, ok := b.keyed[key]
	if !ok {
		return nil
	}
	b.takeClientLocked(pid)
	return []byte(pid)
}

// unanswered returns those of ids the client still waits for, and the
// listing kinds they asked for, and forgets them.
func (b *requests) unanswered(ids [][]byte) (out [][]byte, lists []surface.Kind) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if p, ok := b.takeClientLocked(string(id)); ok {
			out = append(out, id)
			if p.kind != 0 {
				lists = append(lists, p.kind)
			}
		}
	}
	return out, lists
}

// ownGets returns the ids of the proxy's own gets (UI reads, prompt gets)
// of round still in flight.
func (b *requests) ownGets(round int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, p := range b.own {
		if p.got.kind != 0 && p.gen == round {
			ids = append(ids, id)
		}
	}
	return ids
}
