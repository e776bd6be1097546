package driftsvc

import (
	"container/list"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// lanes hands fingerprint messages to the workers: a server's messages
// always go to the same lane, by a hash of the subject (trusted: our own
// subject names), so that they are applied in order and do not fight over
// one record. A lane's queue has no bound of its own: pushing never blocks,
// so a lane whose worker is slow (a KV write retrying, a large manifest)
// holds up only its own servers, never the consumer's callback and with it
// every other lane. The consumer's MaxAckPending bounds what all the lanes
// hold together: the server delivers no more than that unsettled.
type lanes struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queues [][]jetstream.Msg
	closed bool
}

func newLanes(n int) *lanes {
	l := &lanes{queues: make([][]jetstream.Msg, n)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// lane is the lane of a subject.
func (l *lanes) lane(subject string) int {
	return int(xxhash.Sum64String(subject) % uint64(len(l.queues)))
}

// push queues msg on its subject's lane; it never blocks.
func (l *lanes) push(msg jetstream.Msg) {
	i := l.lane(msg.Subject())
	l.mu.Lock()
	l.queues[i] = append(l.queues[i], msg)
	l.mu.Unlock()
	l.cond.Broadcast()
}

// next waits for lane i's next message; false once the lanes are closed
// and lane i is empty.
func (l *lanes) next(i int) (jetstream.Msg, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.queues[i]) == 0 {
		if l.closed {
			return nil, false
		}
		l.cond.Wait()
	}
	msg := l.queues[i][0]
	l.queues[i][0] = nil
	l.queues[i] = l.queues[i][1:]
	if len(l.queues[i]) == 0 {
		l.queues[i] = nil // let a long queue's array go
	}
	return msg, true
}

// close lets each worker finish its lane and stop.
func (l *lanes) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cond.Broadcast()
}

// DefaultManifestCacheBytes is the default budget of parsed manifests the
// service keeps, counted in bytes of their stored form.
const DefaultManifestCacheBytes = 64 << 20

// manifestCache keeps the most recently used parsed manifests, by surface
// hash, within a budget of their stored bytes. A manifest is added only
// after its bytes were checked to hash to its key, so the key says what the
// value is. A manifest larger than the whole budget is not kept.
type manifestCache struct {
	mu     sync.Mutex
	budget int
	used   int
	order  *list.List // front: most recently used *cached
	byHash map[string]*list.Element
}

type cached struct {
	hash string
	sf   *surface.Surface
	size int
}

func newManifestCache(budget int) *manifestCache {
	return &manifestCache{budget: budget, order: list.New(), byHash: make(map[string]*list.Element)}
}

func (c *manifestCache) get(hash string) (*surface.Surface, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byHash[hash]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cached).sf, true
}

func (c *manifestCache) put(hash string, sf *surface.Surface, size int) {
	if size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byHash[hash]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.byHash[hash] = c.order.PushFront(&cached{hash: hash, sf: sf, size: size})
	c.used += size
	for c.used > c.budget {
		e := c.order.Back()
		old := e.Value.(*cached)
		c.order.Remove(e)
		delete(c.byHash, old.hash)
		c.used -= old.size
	}
}

// len returns how many manifests and how many bytes the cache holds.
func (c *manifestCache) len() (n, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.used
}
