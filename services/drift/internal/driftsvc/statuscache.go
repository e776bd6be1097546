package driftsvc

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// DefaultStatusCacheRecords is the default number of decoded status records
// the service keeps.
const DefaultStatusCacheRecords = 1 << 14

// statusCache keeps status records as this instance last read or wrote them,
// decoded, at their revision, so that a fingerprint that changes nothing (a
// fleet re-listing an unchanged server: most of them) costs no read of the
// bucket and no decoding. A watch of the bucket (updates only) tells it of
// every later write, by any instance: a record written since it was kept is
// no longer served from the cache, and a read that began before such a
// write cannot put its older revision back.
//
// What the cache serves is a record as it was at some revision, as a read
// of the bucket is: a fingerprint applied on it that writes does so with
// compare-and-set on that revision (a conflict reads the bucket again), and
// one that writes nothing is decided on a state the record really had, a
// moment earlier at most (the watch's delay). Only the fingerprint path
// reads through it; the admin API and every retry read the bucket.
type statusCache struct {
	mu  sync.Mutex
	on  bool // the watch is running; off, nothing is served
	max int
	// recs holds, by key, the newest revision known (from a read, a write or
	// the watch) and the record at that revision when it is known; nil
	// when only the watch told of it.
	recs map[string]cachedStatus
}

type cachedStatus struct {
	rev uint64
	rec *state.Record // never changed once here; nil: not known at rev
}

func newStatusCache(max int) *statusCache {
	return &statusCache{max: max, recs: make(map[string]cachedStatus)}
}

// get returns a copy of the record at key and its revision when the cache
// holds the newest revision it knows of.
func (c *statusCache) get(key string) (*state.Record, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.recs[key]
	if !c.on || !ok || e.rec == nil {
		return nil, 0, false
	}
	r := *e.rec
	return &r, e.rev, true
}

// put keeps rec at revision rev, unless a newer revision is known (the
// watch may tell of a write before the writer hears back: then the
// revision is known without its record, and put supplies it).
func (c *statusCache) put(key string, rev uint64, rec *state.Record) {
	if rec == nil || rev == 0 {
		return
	}
	r := *rec
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.recs[key]; ok && (e.rev > rev || e.rev == rev && e.rec != nil) {
		return // a newer revision is known, or this one is kept already
	}
	c.evict()
	c.recs[key] = cachedStatus{rev: rev, rec: &r}
}

// written records that key changed at rev (from the watch): an older
// record kept for it is dropped, and a read that returns an older revision
// is not kept.
func (c *statusCache) written(key string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.recs[key]; ok && e.rev >= rev {
		return // our own write, kept already
	}
	c.evict()
	c.recs[key] = cachedStatus{rev: rev}
}

// evict makes room for one more key: at the bound, records go first (a
// revision known without its record must stay, or an older read could be
// kept after it).
func (c *statusCache) evict() {
	if len(c.recs) < c.max {
		return
	}
	for k, e := range c.recs {
		if e.rec != nil {
			c.recs[k] = cachedStatus{rev: e.rev}
			return
		}
	}
}

func (c *statusCache) setOn(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = on
	if !on {
		clear(c.recs)
	}
}

// watchStatus starts the watch that feeds the cache. It returns once the
// watch is in place; the cache serves records from then on, until ctx ends
// or the watch stops. stopped is closed when the watch goroutine is done.
func (s *Service) watchStatus(ctx context.Context) (stopped <-chan struct{}, err error) {
	w, err := s.h.Status.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	s.status.setOn(true)
	go func() {
		defer close(done)
		defer s.status.setOn(false)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					s.log.Warn().Msg("status watch stopped; reading every record from the bucket")
					return
				}
				if e != nil {
					s.status.written(e.Key(), e.Revision())
				}
			}
		}
	}()
	return done, nil
}

// maxCheckedItems bounds the itemsCache.
const maxCheckedItems = 4096

// itemsCache keeps item hashes that were checked to make up their surface
// hash (status.NewItems: up to 16 hashes of the surface document), by that
// hash. A fingerprint whose items are exactly those of a kept entry, same
// order, is not checked again: the fleet sends the same manifest again and
// again. The kept Items are shared and never changed.
type itemsCache struct {
	mu     sync.Mutex
	max    int
	byHash map[string]*status.Items
}

func newItemsCache(max int) *itemsCache {
	return &itemsCache{max: max, byHash: make(map[string]*status.Items)}
}

// get returns the checked items of fp's surface hash when fp carries exactly
// them; nil otherwise.
func (c *itemsCache) get(fp *mcpdriftv1.Fingerprint) *status.Items {
	c.mu.Lock()
	its := c.byHash[fp.SurfaceHash]
	c.mu.Unlock()
	if its == nil || len(its.Items) != len(fp.Items) {
		return nil
	}
	for i, it := range fp.Items {
		if have := its.Items[i]; have.Kind != it.Kind || have.Name != it.Name || have.Hash != it.Hash {
			return nil
		}
	}
	return its
}

func (c *itemsCache) put(its *status.Items) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byHash) >= c.max {
		clear(c.byHash)
	}
	c.byHash[its.Surface] = its
}
