package driftsvc

import (
	"container/list"
	"sync"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

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
