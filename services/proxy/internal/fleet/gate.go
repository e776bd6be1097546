package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Timings of the status watch. The bind timeout is a variable of the
// StatusWatch so that tests can shorten it.
const (
	defaultBindTimeout = 10 * time.Second // binding the status bucket
	minRewatch         = 100 * time.Millisecond
	maxRewatch         = 5 * time.Second
)

var (
	_ session.Gate     = (*Gate)(nil)
	_ session.Observer = (*Publisher)(nil)
)

var (
	errWatchClosed = errors.New("status watch closed by the client library")
	errReconnected = errors.New("reconnected to NATS")
)

// Gate answers for one server's approved surface (session.Gate) from the
// server's keys in the status bucket, which its proxy's StatusWatch hands
// it: the server record (<tenant>.<server>), whose hold quarantines every
// listing variant, present and future, and the record of each listing
// variant. Make it with StatusWatch.Gate and give it its status copy with
// UseCopies before the watch runs; View may be called before the watch
// starts and after it ends (it then answers from what it last knew).
type Gate struct {
	js             jetstream.JetStream
	tenant, server string
	prefix         string // "<tenant>.<server>."
	serverKey      string // "<tenant>.<server>"
	log            zerolog.Logger

	mu      lockorder.Mutex[lockorder.GateMu]
	records map[string]record // by variant
	// held: the server record holds the server (quarantined as a whole,
	// or unreadable): no variant is served, whatever its own record says.
	held bool
	// risk is the server record's risk mode (status.Server.Risk.Mode, ""
	// when the server was never rated): every variant's View carries it.
	risk string
	wake chan struct{} // closed and replaced whenever records change
	// loaded: the first watch delivered its initial values, or a watch
	// failed; records that exist are known by then, so a View that does
	// not await a verdict stops waiting for one.
	loaded bool
	// watching: the current watch has delivered its initial values and
	// runs (the proxy is ready).
	watching bool

	// baselines are the baseline versions' item hashes the gate fetched
	// (by baseline hash), checked against it; the records that name a
	// version read their items from here.
	baselines map[string]*fetchedItems
	// fetch asks the status watch to fetch a baseline version's entry.
	fetch func(g *Gate, key, hash string)

	// The status copy (UseCopies): what the gate knew, kept on disk.
	copies *StatusCopies
	// copy answers while no watch has loaded and NATS is unreachable; nil
	// once a watch has delivered its initial values (they replace it).
	copy *copied
	// serverEntry is the server record as the watch delivered it, nil
	// when there is none; each record keeps its value too.
	serverEntry *copyEntry
	// synced: records and serverEntry are what a watch delivered after its
	// initial values, not a mix of two watches'; liveAt is when that watch
	// was last known live.
	synced bool
	liveAt time.Time
	gen    uint64        // changes so far, for the copy writer
	dirty  chan struct{} // a change to write to the copy (capacity 1)
	// The copy writer's, under copyMu: what it wrote last.
	copyMu       lockorder.Mutex[lockorder.GateCopyMu]
	writtenGen   uint64
	writtenLive  time.Time
	writeFailing bool
	// Counters of CopyStats.
	copyIgnored     [3]atomic.Uint64 // by CopyReasons
	copyWriteErrors atomic.Uint64
}

// record is what the gate keeps of one status record (status.Record).
type record struct {
	status       string
	serve        bool // the serve rule (status.Record.Serve), items checked
	alert        bool // the record's policy is on_drift alert
	withhold     bool // the record's policy is on_drift withhold_changed
	baselineHash string
	liveHash     string // status.Record.Confirms
	// items: the baseline's item hashes, checked against baselineHash
	// (status.Items.Verify); nil when the record carries none that do.
	items    map[session.ItemKey]surface.Digest
	hashing  surface.Options // how the baseline's items were hashed (the record's settings)
	revision uint64
	value    []byte // as stored, for the status copy
	// itemsKey is the key of the baseline version entry whose item hashes
	// the record names (status.Record.ItemsInBaseline) while the gate does
	// not hold them yet: the record is not served until they arrive.
	itemsKey string
}

// newGate returns the gate of one server, fed by its proxy's StatusWatch.
// log must not name the tenant or the server: the gate adds both to its
// lines.
func newGate(js jetstream.JetStream, tenant, server string, log zerolog.Logger) *Gate {
	return &Gate{
		js: js, tenant: tenant, server: server,
		prefix:    tenant + "." + server + ".",
		serverKey: bus.ServerKey(tenant, server),
		log:       log.With().Str("tenant", tenant).Str("server", server).Logger(),
		records:   map[string]record{},
		baselines: map[string]*fetchedItems{},
		wake:      make(chan struct{}),
		dirty:     make(chan struct{}, 1),
	}
}

// View implements session.Gate. A held server (quarantined as a whole)
// answers status quarantined, Serve false, for every variant, also one
// with no record. When nothing is known of the variant yet it
// waits until a record arrives or ctx ends (the caller bounds it), but only
// while one can arrive soon: while the gate is still loading the records
// that exist (its first watch has not delivered them yet), and, when
// awaiting is set, while the verdict on a surface the proxy published is
// due. With NATS down nothing can arrive and it answers at once: from
// what it knows, or, when no watch has loaded since the proxy started, from
// its status copy (UseCopies), which serves only verified variants and
// never under the alert or withhold_changed posture. ok false means
// nothing is known and the proxy fails closed.
//
// A record is served by the serve rule (status.Record.Serve), and only with
// its baseline's item hashes, which the record carries (the drift service
// writes them from the fingerprint event; the gate reads no manifest): a
// record without them (written by an earlier drift service) is answered
// with its status and Serve false. Item hashes that do not make up the
// record's baseline hash are answered as status unknown. The Items map is
// shared: do not modify it.
//
// It waits at most wait (0: until ctx ends); the deadline is made only when
// it has to wait, so that the common answer, from memory, sets no timer.
func (g *Gate) View(ctx context.Context, variant string, awaiting bool, wait time.Duration) (session.View, bool) {
	b := &bounded{parent: ctx, wait: wait}
	defer b.release()
	rec, risk, ok := g.record(b, variant, awaiting)
	if !ok {
		return session.View{}, false
	}
	return session.View{Status: rec.status, Serve: rec.serve, Alert: rec.alert, Withhold: rec.withhold, BaselineHash: rec.baselineHash, LiveHash: rec.liveHash, Items: rec.items, Hashing: rec.hashing, RiskMode: risk}, true
}

// bounded is the context of one View: its deadline is made on first use.
type bounded struct {
	parent context.Context
	wait   time.Duration
	ctx    context.Context
	cancel context.CancelFunc
}

func (b *bounded) get() context.Context {
	if b.ctx == nil {
		b.ctx = b.parent
		if b.wait > 0 {
			b.ctx, b.cancel = context.WithTimeout(b.parent, b.wait)
		}
	}
	return b.ctx
}

func (b *bounded) release() {
	if b.cancel != nil {
		b.cancel()
	}
}

// record returns the variant's record, waiting for one as View describes;
// a held server answers a record that holds every variant. There is no
// implicit variant: "" (a session that named none) has no record, and
// nothing waits for one. risk is the server's risk mode.
func (g *Gate) record(b *bounded, variant string, awaiting bool) (rec record, risk string, ok bool) {
	for {
		g.mu.Lock()
		rec, ok := g.records[variant]
		wake, loaded, held, cp, risk := g.wake, g.loaded, g.held, g.copy, g.risk
		g.mu.Unlock()
		if held {
			return record{status: string(status.Quarantined)}, risk, true
		}
		connected := g.connected()
		if ok && (rec.itemsKey == "" || !connected) {
			return rec, risk, true
		}
		if ok {
			// The baseline's item hashes are on their way (fetched from
			// the baselines bucket): wait for them as for a load.
			select {
			case <-wake:
				continue
			case <-b.get().Done():
				return rec, risk, true
			}
		}
		if cp != nil && !connected {
			rec, ok := g.fromCopyRecord(cp, variant)
			return rec, cp.risk, ok
		}
		if variant == "" || !connected || (loaded && !awaiting) {
			return record{}, "", false
		}
		select {
		case <-wake:
		case <-b.get().Done():
			return record{}, "", false
		}
	}
}

// Watching reports whether the gate's status watch is up and has
// delivered the records that exist: what readiness asks of a proxy.
func (g *Gate) Watching() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watching
}

// Serving reports whether the gate serves its server now in every listing
// variant it knows: at least one status record, and every record serves.
// A server never seen, or one variant closed, counts as not served.
func (g *Gate) Serving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	held, records := g.held, g.records
	if g.copyInUseLocked() {
		held, records = g.copy.held, g.copy.records
	}
	if held || len(records) == 0 {
		return false
	}
	for _, r := range records {
		if !r.serve {
			return false
		}
	}
	return true
}

// setWatch records the state of the watch; a watch that failed also ends
// the first load (nothing more will arrive soon).
func (g *Gate) setWatch(watching bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if watching || (g.watching && g.connected()) {
		g.liveAt = g.now()
	}
	if watching {
		// The initial values are in: they replace the copy, which is
		// never answered from again.
		g.synced = true
		if g.copy != nil {
			g.copy = nil
			g.log.Info().Msg("status watch loaded, the status copy no longer answers")
		}
		g.notifyCopyLocked()
	}
	g.watching = watching
	if !g.loaded {
		g.loaded = true
		g.changedLocked() // Views waiting for the load look again
	}
}

func (g *Gate) connected() bool {
	nc := g.js.Conn()
	return nc != nil && nc.Status() == nats.CONNECTED
}

// rewatch runs watch (one watch of what, until it breaks or the connection
// comes back after an outage) until ctx ends: again at once after a
// reconnect, and after a failure from minRewatch on, doubling up to
// maxRewatch, or at once when the connection comes back. The first failure
// of a run is logged at warn ("<what> watch down, <meanwhile>"); watch
// clears *failing (and says so) once a watch of its loads. It returns nil
// when ctx ends, and an error of watch's that wraps errFatal at once.
func rewatch(ctx context.Context, reconnected <-chan nats.Status, log zerolog.Logger, what, meanwhile string, watch func(failing *bool) error) error {
	delay, failing := minRewatch, false
	for {
		err := watch(&failing)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errFatal) {
			return err
		}
		if errors.Is(err, errReconnected) {
			log.Debug().Msg("reconnected to nats, watching " + what + " again")
			delay = minRewatch
			continue
		}
		if !failing {
			failing = true
			log.Warn().Err(err).Msg(what + " watch down, " + meanwhile)
		} else {
			log.Debug().Err(err).Dur("retry_in", delay).Msg(what + " watch still down")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			delay = minRewatch
		case <-time.After(delay):
			delay = min(2*delay, maxRewatch)
		}
	}
}

// applyServer stores the watched server record: whether the server is
// held. A record that cannot be read holds it (fail closed); a deleted one
// does not.
func (g *Gate) applyServer(e jetstream.KeyValueEntry) {
	held, risk := false, ""
	var entry *copyEntry
	if e.Operation() == jetstream.KeyValuePut {
		entry = &copyEntry{Key: e.Key(), Revision: e.Revision(), Value: e.Value()}
		srv, err := status.DecodeServer(e.Value())
		if err != nil {
			held = true
			g.log.Error().Err(err).Uint64("revision", e.Revision()).Msg("server record unreadable, failing closed")
		} else {
			held, risk = srv.Held, riskMode(srv)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if held != g.held || risk != g.risk {
		g.log.Info().Bool("held", held).Str("risk_mode", risk).Uint64("revision", e.Revision()).Msg("server record")
	}
	g.held, g.risk = held, risk
	g.serverEntry = entry
	g.changedLocked()
}

// riskMode is the risk mode of a server record ("" when never rated).
func riskMode(srv status.Server) string {
	if srv.Risk == nil {
		return ""
	}
	return srv.Risk.Mode
}

// apply stores one watched entry and returns its variant.
func (g *Gate) apply(e jetstream.KeyValueEntry) string {
	variant, ok := strings.CutPrefix(e.Key(), g.prefix)
	if !ok || variant == "" {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old, had := g.records[variant]
	if e.Operation() != jetstream.KeyValuePut {
		delete(g.records, variant)
		g.changedLocked()
		if had {
			g.log.Info().Str("variant", variant).Msg("status record deleted, failing closed")
		}
		return variant
	}
	var prev *record
	if had {
		prev = &old
	}
	rec := g.read(e.Value(), e.Revision(), variant, prev, g.fetchedLocked)
	g.records[variant] = rec
	g.changedLocked()
	if rec.itemsKey != "" && g.fetch != nil {
		g.fetch(g, rec.itemsKey, rec.baselineHash)
	}
	if !had || old.status != rec.status || old.serve != rec.serve || old.alert != rec.alert || old.withhold != rec.withhold || old.baselineHash != rec.baselineHash {
		g.log.Info().Str("variant", variant).Str("status", rec.status).Bool("serve", rec.serve).Bool("alert", rec.alert).Bool("withhold", rec.withhold).
			Str("baseline_hash", rec.baselineHash).Uint64("revision", rec.revision).Msg("status record")
	}
	return variant
}

// read makes what the gate keeps of a stored status record. A record that
// cannot be read is status unknown: known to be there and unreadable, it
// fails closed at once rather than waiting for a record that is already
// here. The baseline's item hashes are the record's own, checked against
// the baseline hash once per baseline (prev: the variant's record before,
// whose checked items are kept when the baseline did not move), or those
// of the baseline version the record names, which lookup returns once
// fetched and checked (the record has itemsKey set until then, and is not
// served).
func (g *Gate) read(value []byte, revision uint64, variant string, prev *record, lookup func(hash string) (*fetchedItems, bool)) record {
	rec := record{status: string(status.Unknown), revision: revision, value: value}
	sr, err := status.DecodeRecord(value)
	if err != nil {
		g.log.Error().Err(err).Str("variant", variant).Uint64("revision", revision).Msg("status record unreadable, failing closed")
		return rec
	}
	rec.status, rec.alert, rec.withhold, rec.baselineHash, rec.liveHash = string(sr.Status), sr.Alerting(), sr.Withholding(), sr.BaselineHash, sr.Confirms()
	if rec.hashing, err = sr.Policy.Hashing().Options(); err != nil {
		// Settings this proxy does not know: nothing it hashes could be
		// compared with the baseline.
		g.log.Error().Err(err).Str("variant", variant).Uint64("revision", revision).Msg("status record with unknown hashing settings, failing closed")
		return record{status: string(status.Unknown), revision: revision, value: value}
	}
	switch {
	case sr.BaselineHash == "":
		return rec // nothing approved to compare items with
	case prev != nil && prev.baselineHash == sr.BaselineHash && prev.items != nil && prev.hashing == rec.hashing:
		rec.items = prev.items // checked when the baseline arrived
	case sr.BaselineItems.Of(sr.BaselineHash):
		items, err := sr.BaselineItems.Verify()
		if err != nil {
			g.log.Error().Err(err).Str("variant", variant).Str("baseline_hash", sr.BaselineHash).
				Uint64("revision", revision).Msg("baseline item hashes unusable, failing closed")
			rec.status = string(status.Unknown)
			return rec
		}
		rec.items = itemMap(items)
	case sr.ItemsInBaseline():
		f, ok := lookup(sr.BaselineHash)
		switch {
		case !ok:
			rec.itemsKey = bus.BaselineKey(g.tenant, g.server, variant, sr.BaselineItemsVersion)
			return rec
		case f.items == nil: // fetched, and unusable (logged when fetched)
			rec.status = string(status.Unknown)
			return rec
		}
		rec.items = f.items
	default:
		if prev == nil || prev.baselineHash != sr.BaselineHash {
			g.log.Warn().Str("variant", variant).Str("baseline_hash", sr.BaselineHash).Bool("items_omitted", sr.ItemsOmitted).
				Uint64("revision", revision).Msg("status record without its baseline's item hashes, failing closed until the drift service writes them")
		}
		return rec
	}
	rec.serve = sr.Serve()
	return rec
}

// itemMap keys checked item hashes by kind and name.
func itemMap(items []surface.Item) map[session.ItemKey]surface.Digest {
	m := make(map[session.ItemKey]surface.Digest, len(items))
	for _, it := range items {
		m[session.ItemKey{Kind: it.Kind, Name: it.Name}] = it.Hash
	}
	return m
}

// fetchedItems are the item hashes of one baseline version as the gate
// fetched them: items nil when the entry's items do not make up its hash
// (fail closed). entry is the entry as stored, for the status copy.
type fetchedItems struct {
	items map[session.ItemKey]surface.Digest
	entry copyEntry
}

// fetchedLocked looks up the fetched items of a baseline hash.
func (g *Gate) fetchedLocked(hash string) (*fetchedItems, bool) {
	f, ok := g.baselines[hash]
	return f, ok
}

// baselineArrived takes the entry of a baseline version the gate asked for
// (key, with the baseline hash hash), checks its items against hash, and
// reads again the records that wait for them. An entry of another hash, or
// whose items do not make up hash, fails those records closed.
func (g *Gate) baselineArrived(key, hash string, e copyEntry) {
	f := &fetchedItems{entry: e}
	b, err := status.DecodeBaseline(e.Value)
	switch {
	case err != nil:
	case b.Hash != hash || !b.Items.Of(hash):
		err = fmt.Errorf("baseline version %s is of %s with items of %q, want %s", key, b.Hash, itemsSurface(b.Items), hash)
	default:
		var items []surface.Item
		if items, err = b.Items.Verify(); err == nil {
			f.items = itemMap(items)
		}
	}
	if err != nil {
		g.log.Error().Err(err).Str("key", key).Str("baseline_hash", hash).Msg("baseline item hashes unusable, failing closed")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.baselines[hash] = f
	for v, rec := range g.records {
		if rec.itemsKey == "" || rec.baselineHash != hash {
			continue
		}
		prev := rec
		rec = g.read(rec.value, rec.revision, v, nil, g.fetchedLocked)
		g.records[v] = rec
		if rec.serve != prev.serve || rec.status != prev.status {
			g.log.Info().Str("variant", v).Str("status", rec.status).Bool("serve", rec.serve).
				Str("baseline_hash", rec.baselineHash).Uint64("revision", rec.revision).Msg("status record")
		}
	}
	g.pruneLocked()
	g.changedLocked()
}

func itemsSurface(its *status.Items) string {
	if its == nil {
		return ""
	}
	return its.Surface
}

// wants reports whether a record of the gate still waits for the items of
// the baseline version key.
func (g *Gate) wants(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rec := range g.records {
		if rec.itemsKey == key {
			return true
		}
	}
	return false
}

// pruneLocked forgets fetched items no record's baseline is of.
func (g *Gate) pruneLocked() {
	for h := range g.baselines {
		used := false
		for _, rec := range g.records {
			if rec.baselineHash == h {
				used = true
				break
			}
		}
		if !used {
			delete(g.baselines, h)
		}
	}
}

// retain forgets the variants a fresh watch did not deliver, and the hold
// when it did not deliver the server record: their keys are gone (removed
// while the gate was not watching).
func (g *Gate) retain(seen map[string]bool, sawServer bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !sawServer && (g.held || g.serverEntry != nil) {
		g.held, g.serverEntry, g.risk = false, nil, ""
		g.changedLocked()
	}
	n := len(g.records)
	for v := range g.records {
		if !seen[v] {
			delete(g.records, v)
		}
	}
	if len(g.records) != n {
		g.changedLocked()
	}
}

// changedLocked wakes waiting Views, and tells the copy writer.
func (g *Gate) changedLocked() {
	close(g.wake)
	g.wake = make(chan struct{})
	g.gen++
	g.notifyCopyLocked()
}
