package fleet

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// CopyStats is what a gate did with its status copy.
type CopyStats struct {
	// InUse: the gate answers from its copy now (it has not loaded a
	// watch, and NATS is unreachable).
	InUse bool
	// Ignored counts the copies ignored, by reason (CopyReasons).
	Ignored map[string]uint64
	// WriteErrors counts the writes of the copy that failed.
	WriteErrors uint64
}

// CopyStats reports what the gate did with its status copy.
func (g *Gate) CopyStats() CopyStats {
	g.mu.Lock()
	inUse := g.copyInUseLocked()
	g.mu.Unlock()
	st := CopyStats{InUse: inUse, Ignored: make(map[string]uint64, len(CopyReasons)), WriteErrors: g.copyWriteErrors.Load()}
	for i, r := range CopyReasons {
		st.Ignored[r] = g.copyIgnored[i].Load()
	}
	return st
}

// UseCopies makes the gate keep a copy of its server's status in c, and
// reads the copy there now: until its status watch has delivered its
// initial values, and only while NATS is unreachable, the gate answers
// from it (View, "the status copy" in docs/services/proxy-fleet.md). Call
// it before Run; a copy that is not there or is ignored (logged at warn,
// counted in CopyStats) leaves the gate as without one: it fails closed.
func (g *Gate) UseCopies(c *StatusCopies) {
	g.copies = c
	doc, err := c.read(g.tenant, g.server)
	var ce *copyError
	switch {
	case errors.Is(err, errNoCopy):
		g.log.Debug().Msg("no status copy")
		return
	case errors.As(err, &ce):
		g.copyIgnored[slices.Index(CopyReasons, ce.Reason)].Add(1)
		g.log.Warn().Err(err).Str("reason", ce.Reason).Msg("status copy ignored")
		return
	case err != nil:
		g.log.Warn().Err(err).Msg("status copy ignored")
		return
	}
	cp := g.fromCopy(doc)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.synced {
		return // a watch has loaded already
	}
	g.copy = cp
	g.log.Info().Time("live_at", cp.liveAt).Bool("held", cp.held).Int("variants", len(cp.records)).
		Msg("status copy read: it answers while nats is unreachable and no status watch has loaded")
}

// fromCopy reads a copy's records with a stricter rule than a watch's: a
// variant is served only when its record is verified, carries its
// baseline's item hashes and they make up its baseline hash; it is served
// by those items alone, without the alert posture (which would serve
// items outside the baseline) and without the withhold_changed one (a
// drift this proxy sees closes the whole server, as under block). Everything else the copy holds is known and
// closed; what it does not hold is unknown. A server record that cannot
// be read holds the server.
func (g *Gate) fromCopy(doc *copyDoc) *copied {
	live := time.UnixMilli(doc.LiveAtMs)
	cp := &copied{records: make(map[string]record, len(doc.Variants)), liveAt: live, expires: live.Add(g.copies.cfg.MaxAge)}
	if doc.Hold != nil {
		srv, err := status.DecodeServer(doc.Hold.Value)
		cp.held = err != nil || srv.Held
		if err == nil {
			cp.risk = riskMode(srv)
		}
	}
	// The baseline versions whose item hashes records name, as fetched.
	fetched := map[string]*fetchedItems{}
	for _, e := range doc.Baselines {
		b, err := status.DecodeBaseline(e.Value)
		if err != nil || !b.Items.Of(b.Hash) {
			continue
		}
		if items, err := b.Items.Verify(); err == nil {
			fetched[b.Hash] = &fetchedItems{items: itemMap(items), entry: e}
		}
	}
	lookup := func(hash string) (*fetchedItems, bool) {
		f, ok := fetched[hash]
		return f, ok
	}
	for _, e := range doc.Variants {
		variant := strings.TrimPrefix(e.Key, g.prefix) // checked by read
		rec := g.read(e.Value, e.Revision, variant, nil, lookup)
		rec.serve = rec.serve && rec.status == string(status.Verified)
		rec.alert, rec.withhold = false, false
		if !rec.serve {
			rec.items = nil
		}
		cp.records[variant] = rec
	}
	return cp
}

// copied is what the gate answers from its status copy: the server's hold,
// and each variant's record narrowed (fromCopy).
type copied struct {
	held    bool
	risk    string // the server record's risk mode
	records map[string]record
	liveAt  time.Time
	expires time.Time // liveAt + MaxAge: too old from then on
}

// fromCopyRecord answers a View from the copy: a held server holds every
// variant. A copy that grew older than MaxAge while it answered is dropped:
// the gate then fails closed until a watch loads.
func (g *Gate) fromCopyRecord(cp *copied, variant string) (record, bool) {
	if !g.now().Before(cp.expires) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.copy == cp {
			g.copy = nil
			g.copyIgnored[slices.Index(CopyReasons, CopyExpired)].Add(1)
			g.log.Warn().Time("live_at", cp.liveAt).Dur("max_age", g.copies.cfg.MaxAge).
				Msg("status copy expired while nats is unreachable, failing closed")
		}
		return record{}, false
	}
	if cp.held {
		return record{status: string(status.Quarantined)}, true
	}
	rec, ok := cp.records[variant]
	return rec, ok
}

// copyInUseLocked reports whether Views are answered from the copy: the
// gate has one (no watch has loaded), NATS is unreachable, and no watch
// delivered anything of the server since.
func (g *Gate) copyInUseLocked() bool {
	return g.copy != nil && !g.held && len(g.records) == 0 && !g.connected() && g.now().Before(g.copy.expires)
}

// notifyCopyLocked tells the copy writer that something changed.
func (g *Gate) notifyCopyLocked() {
	if g.copies == nil {
		return
	}
	select {
	case g.dirty <- struct{}{}:
	default:
	}
}

// keepCopy writes the copy until ctx ends: a change after a short delay,
// so that changes that come together are written once, and the same
// content again while the watch is live, so that the time it was last
// live stays fresh. It never runs on the path of a decision.
func (g *Gate) keepCopy(ctx context.Context) {
	refresh := time.NewTicker(g.copies.cfg.Refresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.dirty:
			select {
			case <-ctx.Done():
				return
			case <-time.After(g.copies.cfg.Debounce):
			}
		case <-refresh.C:
		}
		g.writeCopy()
	}
}

// writeCopy writes what the gate knows to the copy, when it is what a
// watch delivered after its initial values and anything changed since the
// last write (the records, or the time the watch was last live).
func (g *Gate) writeCopy() {
	if g.copies == nil {
		return
	}
	g.copyMu.Lock()
	defer g.copyMu.Unlock()
	doc, gen, ok := g.snapshot()
	if !ok || (gen == g.writtenGen && doc.LiveAtMs == g.writtenLive.UnixMilli()) {
		return
	}
	if err := g.copies.write(doc); err != nil {
		g.copyWriteErrors.Add(1)
		if !g.writeFailing {
			g.writeFailing = true
			g.log.Warn().Err(err).Msg("status copy not written")
		}
		return
	}
	if g.writeFailing {
		g.writeFailing = false
		g.log.Info().Msg("status copy written again")
	}
	g.writtenGen, g.writtenLive = gen, time.UnixMilli(doc.LiveAtMs)
}

// snapshot returns the copy of what the gate knows, if it is in sync with
// a watch, and the change count it reflects.
func (g *Gate) snapshot() (*copyDoc, uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.synced {
		return nil, 0, false
	}
	if g.watching && g.connected() {
		g.liveAt = g.now()
	}
	if g.liveAt.IsZero() {
		return nil, 0, false
	}
	doc := &copyDoc{Tenant: g.tenant, Server: g.server, Proxy: g.copies.cfg.Proxy, LiveAtMs: g.liveAt.UnixMilli(),
		Variants: make([]copyEntry, 0, len(g.records))}
	if g.serverEntry != nil {
		e := *g.serverEntry
		doc.Hold = &e
	}
	for v, r := range g.records {
		doc.Variants = append(doc.Variants, copyEntry{Key: g.prefix + v, Revision: r.revision, Value: r.value})
	}
	slices.SortFunc(doc.Variants, func(a, b copyEntry) int { return strings.Compare(a.Key, b.Key) })
	for _, f := range g.baselines {
		if f.items != nil {
			doc.Baselines = append(doc.Baselines, f.entry)
		}
	}
	slices.SortFunc(doc.Baselines, func(a, b copyEntry) int { return strings.Compare(a.Key, b.Key) })
	return doc, g.gen, true
}

// now is the copies' clock (time.Now without copies).
func (g *Gate) now() time.Time {
	if g.copies != nil {
		return g.copies.cfg.Now()
	}
	return time.Now()
}
