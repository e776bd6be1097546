package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Statuses of a status record that the gate tells apart (values of the
// drift service's state.Status, as written to the status bucket).
const (
	StatusUnknown     = "unknown"
	StatusVerified    = "verified"
	StatusChanged     = "changed"
	StatusQuarantined = "quarantined"
)

// onDriftAlert is the drift policy under which a changed server is still served.
const onDriftAlert = "alert"

// Timings of the gate. They are variables of the Gate so that tests can
// shorten them.
const (
	defaultManifestRetry = time.Second      // a failed manifest read is not retried sooner
	defaultPrefetchWait  = 30 * time.Second // one background manifest read
	defaultBindTimeout   = 10 * time.Second // binding the status bucket and the object store
	minRewatch           = 100 * time.Millisecond
	maxRewatch           = 5 * time.Second
)

var (
	_ session.Gate     = (*Gate)(nil)
	_ session.Observer = (*Publisher)(nil)
)

var (
	errNotConnected     = errors.New("not connected to NATS")
	errManifestMismatch = errors.New("manifest does not hash to its name")
	errWatchClosed      = errors.New("status watch closed by the client library")
	errReconnected      = errors.New("reconnected to NATS")
)

// Gate answers for one server's approved surface (session.Gate) from a
// watch of the server's keys in the status bucket: the server record
// (<tenant>.<server>), whose hold quarantines every listing variant,
// present and future, and the record of each listing variant.
// Create it with NewGate and run it with Run; View may be called before Run
// starts and after it returns (it then answers from what it last knew).
type Gate struct {
	js             jetstream.JetStream
	tenant, server string
	prefix         string // "<tenant>.<server>."
	serverKey      string // "<tenant>.<server>"
	log            zerolog.Logger
	now            func() time.Time
	manifestRetry  time.Duration
	bindTimeout    time.Duration
	watches        atomic.Int64 // status watches started, for tests
	prefetch       chan string  // baseline hashes to read in the background

	mu      sync.Mutex
	records map[string]record // by variant
	// held: the server record holds the server (quarantined as a whole,
	// or unreadable): no variant is served, whatever its own record says.
	held      bool
	wake      chan struct{} // closed and replaced whenever records change
	manifests map[string]*manifest
	warned    map[string]bool       // baseline hashes whose failure was logged
	objects   jetstream.ObjectStore // bound by Run; nil until then
	// loaded: the first watch delivered its initial values, or a watch
	// failed; records that exist are known by then, so a View that does
	// not await a verdict stops waiting for one.
	loaded bool
	// watching: the current watch has delivered its initial values and
	// runs (the proxy is ready).
	watching bool
}

// record is what the gate keeps of one status record.
type record struct {
	status       string
	serve        bool
	alert        bool // the record's policy is on_drift alert
	baselineHash string
	revision     uint64
}

// serverRecord is the part of the drift service's server record (JSON,
// docs/bus.md) the proxy needs.
type serverRecord struct {
	Held *bool `json:"held"`
}

// statusRecord is the part of the drift service's status record (JSON,
// docs/bus.md) the proxy needs. The proxy does not import the drift
// service: this is the contract as published.
type statusRecord struct {
	Status string `json:"status"`
	Policy struct {
		OnDrift string `json:"on_drift"`
	} `json:"policy"`
	BaselineHash string `json:"baseline_hash"`
}

// manifest is one baseline's item hashes, read once per hash. done is
// closed when the read ended; items and err are set before that and never
// written after.
type manifest struct {
	done      chan struct{}
	items     map[session.ItemKey]surface.Digest
	err       error
	failedAt  time.Time
	abandoned bool // the reader gave up (its context ended): read again
}

// NewGate returns the gate of one server. log must not name the tenant or
// the server: the gate adds both to its lines. It does no I/O, so that a proxy
// starts while NATS is unreachable (and then fails closed until it knows
// better); ctx is accepted for symmetry with the other constructors and is
// not retained.
func NewGate(ctx context.Context, js jetstream.JetStream, tenant, server string, log zerolog.Logger) (*Gate, error) {
	_ = ctx
	if js == nil {
		return nil, errors.New("fleet gate: jetstream is nil")
	}
	if err := errors.Join(bus.ValidID("tenant", tenant), bus.ValidID("server", server)); err != nil {
		return nil, fmt.Errorf("fleet gate: %w", err)
	}
	return &Gate{
		js: js, tenant: tenant, server: server,
		prefix:        tenant + "." + server + ".",
		serverKey:     bus.ServerKey(tenant, server),
		log:           log.With().Str("tenant", tenant).Str("server", server).Logger(),
		now:           time.Now,
		manifestRetry: defaultManifestRetry,
		bindTimeout:   defaultBindTimeout,
		prefetch:      make(chan string, 16),
		records:       map[string]record{},
		wake:          make(chan struct{}),
		manifests:     map[string]*manifest{},
		warned:        map[string]bool{},
	}, nil
}

// View implements session.Gate. A held server (quarantined as a whole)
// answers status quarantined, Serve false, for every variant, also one
// with no record. When nothing is known of the variant yet it
// waits until a record arrives or ctx ends (the caller bounds it), but only
// while one can arrive soon: while the gate is still loading the records
// that exist (its first watch has not delivered them yet), and, when
// awaiting is set, while the verdict on a surface the proxy published is
// due. With NATS down nothing can arrive and it answers at once. ok false
// means nothing is known and the proxy fails closed.
//
// A served record is served only with its baseline's item hashes: when the
// baseline manifest cannot be read, View answers the record's status with
// Serve false. A manifest that does not hash to the record's baseline hash
// is answered as status unknown. The Items map is shared: do not modify it.
//
// It waits at most wait (0: until ctx ends); the deadline is made only when
// it has to wait, so that the common answer, from memory, sets no timer.
func (g *Gate) View(ctx context.Context, variant string, awaiting bool, wait time.Duration) (session.View, bool) {
	b := &bounded{parent: ctx, wait: wait}
	defer b.release()
	rec, ok := g.record(b, variant, awaiting)
	if !ok {
		return session.View{}, false
	}
	v := session.View{Status: rec.status, Serve: rec.serve, Alert: rec.alert, BaselineHash: rec.baselineHash}
	if rec.baselineHash == "" {
		v.Serve = false // nothing approved to compare items with
		return v, true
	}
	items, err := g.items(b, rec.baselineHash)
	if err != nil {
		v.Serve = false
		if errors.Is(err, errManifestMismatch) {
			v.Status = StatusUnknown
		}
		return v, true
	}
	v.Items = items
	return v, true
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
// nothing waits for one.
func (g *Gate) record(b *bounded, variant string, awaiting bool) (record, bool) {
	for {
		g.mu.Lock()
		rec, ok := g.records[variant]
		wake, loaded, held := g.wake, g.loaded, g.held
		g.mu.Unlock()
		if held {
			return record{status: StatusQuarantined}, true
		}
		if ok {
			return rec, true
		}
		if variant == "" || !g.connected() || (loaded && !awaiting) {
			return record{}, false
		}
		select {
		case <-wake:
		case <-b.get().Done():
			return record{}, false
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
	if g.held || len(g.records) == 0 {
		return false
	}
	for _, r := range g.records {
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

// items returns the item hashes of the manifest with the given surface
// hash, reading it at most once at a time and once per hash while it
// succeeds; a failure is remembered for manifestRetry.
func (g *Gate) items(b *bounded, hash string) (map[session.ItemKey]surface.Digest, error) {
	for {
		g.mu.Lock()
		m, ok := g.manifests[hash]
		if ok && m.isDone() && m.err != nil && g.now().Sub(m.failedAt) >= g.manifestRetry {
			delete(g.manifests, hash)
			ok = false
		}
		if !ok {
			objects := g.objects
			if objects == nil || !g.connected() {
				g.mu.Unlock()
				return nil, errNotConnected
			}
			m = &manifest{done: make(chan struct{})}
			g.manifests[hash] = m
			g.mu.Unlock()
			return g.read(b.get(), objects, hash, m)
		}
		g.mu.Unlock()
		if !m.isDone() { // read by another View or the prefetch: wait for it
			select {
			case <-m.done:
			case <-b.get().Done():
				return nil, b.get().Err()
			}
		}
		if m.abandoned {
			continue // its reader gave up; read it ourselves
		}
		return m.items, m.err
	}
}

func (m *manifest) isDone() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// read fetches and parses one manifest into m.
func (g *Gate) read(ctx context.Context, objects jetstream.ObjectStore, hash string, m *manifest) (map[session.ItemKey]surface.Digest, error) {
	items, err := fetchItems(ctx, objects, hash)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		m.abandoned = true
		if g.manifests[hash] == m {
			delete(g.manifests, hash)
		}
	case err != nil:
		m.err, m.failedAt = err, g.now()
		if !g.warned[hash] {
			g.warned[hash] = true
			ev := g.log.Warn()
			if errors.Is(err, errManifestMismatch) {
				ev = g.log.Error()
			}
			ev.Err(err).Str("baseline_hash", hash).Msg("baseline manifest unusable, failing closed")
		}
	default:
		m.items = items
		delete(g.warned, hash)
	}
	close(m.done)
	return items, err
}

func fetchItems(ctx context.Context, objects jetstream.ObjectStore, hash string) (map[session.ItemKey]surface.Digest, error) {
	raw, err := objects.GetBytes(ctx, bus.ManifestName(hash))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", bus.ManifestName(hash), err)
	}
	sf, err := surface.Parse(raw, surface.Options{})
	if err != nil {
		return nil, fmt.Errorf("parsing manifest %s: %w", bus.ManifestName(hash), err)
	}
	if sf.Hash.String() != hash {
		return nil, fmt.Errorf("%w: %s hashes to %s", errManifestMismatch, bus.ManifestName(hash), sf.Hash)
	}
	items := make(map[session.ItemKey]surface.Digest, len(sf.Items))
	for _, it := range sf.Items {
		items[session.ItemKey{Kind: it.Kind, Name: it.Name}] = it.Hash
	}
	return items, nil
}

// Run watches the server's status keys until ctx ends. When the watch
// breaks or the connection comes back after an outage it starts a new
// watch, whose first values replace what the gate knew; in between, View
// answers from memory. Run returns nil when ctx ends.
func (g *Gate) Run(ctx context.Context) error {
	nc := g.js.Conn()
	if nc == nil {
		return errors.New("fleet gate: jetstream has no connection")
	}
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { g.prefetchLoop(ctx) })

	delay, failing := minRewatch, false
	for {
		err := g.watch(ctx, reconnected, &failing)
		g.setWatch(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errReconnected) {
			g.log.Debug().Msg("reconnected to nats, watching status again")
			delay = minRewatch
			continue
		}
		if !failing {
			failing = true
			g.log.Warn().Err(err).Msg("status watch down, answering from memory")
		} else {
			g.log.Debug().Err(err).Dur("retry_in", delay).Msg("status watch still down")
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

// watch runs one watch until ctx ends, it breaks, or the connection was
// re-established.
func (g *Gate) watch(ctx context.Context, reconnected <-chan nats.Status, failing *bool) error {
	bindCtx, cancel := context.WithTimeout(ctx, g.bindTimeout)
	defer cancel()
	kv, err := g.js.KeyValue(bindCtx, bus.BucketStatus)
	if err != nil {
		return fmt.Errorf("binding bucket %s: %w", bus.BucketStatus, err)
	}
	objects, err := g.js.ObjectStore(bindCtx, bus.BucketManifests)
	if err != nil {
		return fmt.Errorf("binding object store %s: %w", bus.BucketManifests, err)
	}
	g.mu.Lock()
	g.objects = objects
	g.mu.Unlock()
	// The watches live as long as ctx: the client library stops a watch
	// when its context ends, so they must not share the bind's deadline.
	// Two watches of one key filter each (a proxy's NATS permissions allow
	// a consumer per filter under its tenant, not one of several filters),
	// the server record's first: its initial value is in before any
	// variant's record is, so that a held server is never served while
	// the watch starts.
	ws, err := kv.Watch(ctx, g.serverKey)
	if err != nil {
		return fmt.Errorf("watching %s: %w", g.serverKey, err)
	}
	defer func() { _ = ws.Stop() }()
	g.watches.Add(1)
	sawServer := false // the initial values held the server record
initialServer:
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			return errReconnected
		case e, ok := <-ws.Updates():
			switch {
			case !ok:
				return errWatchClosed
			case e == nil:
				break initialServer
			default:
				g.applyServer(e)
				sawServer = true
			}
		}
	}
	w, err := kv.Watch(ctx, g.prefix+"*")
	if err != nil {
		return fmt.Errorf("watching %s*: %w", g.prefix, err)
	}
	defer func() { _ = w.Stop() }()
	if *failing {
		*failing = false
		g.log.Info().Msg("status watch resumed")
	}
	seen := map[string]bool{} // variants of the initial values
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			return errReconnected
		case e, ok := <-ws.Updates():
			if !ok {
				return errWatchClosed
			}
			if e != nil {
				g.applyServer(e)
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errWatchClosed
			case e == nil: // the initial values are all in
				if initial {
					initial = false
					g.retain(seen, sawServer)
					g.setWatch(true)
				}
			default:
				v := g.apply(e)
				if initial && v != "" {
					seen[v] = true
				}
			}
		}
	}
}

// applyServer stores the watched server record: whether the server is
// held. A record that cannot be read holds it (fail closed); a deleted one
// does not.
func (g *Gate) applyServer(e jetstream.KeyValueEntry) {
	held := false
	if e.Operation() == jetstream.KeyValuePut {
		var sr serverRecord
		if err := json.Unmarshal(e.Value(), &sr); err != nil || sr.Held == nil {
			held = true
			g.log.Error().Err(err).Uint64("revision", e.Revision()).Msg("server record unreadable, failing closed")
		} else {
			held = *sr.Held
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if held != g.held {
		g.log.Info().Bool("held", held).Uint64("revision", e.Revision()).Msg("server record")
	}
	g.held = held
	g.changedLocked()
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
	rec := record{revision: e.Revision()}
	var sr statusRecord
	if err := json.Unmarshal(e.Value(), &sr); err != nil || sr.Status == "" {
		// Known to be there and unreadable: fail closed at once rather than
		// wait for a record that is already here.
		rec.status = StatusUnknown
		g.log.Error().Err(err).Str("variant", variant).Uint64("revision", e.Revision()).Msg("status record unreadable, failing closed")
	} else {
		rec.status = sr.Status
		rec.baselineHash = sr.BaselineHash
		rec.alert = sr.Policy.OnDrift == onDriftAlert
		rec.serve = sr.Status == StatusVerified || (sr.Status == StatusChanged && rec.alert)
	}
	g.records[variant] = rec
	g.changedLocked()
	if !had || old.status != rec.status || old.serve != rec.serve || old.alert != rec.alert || old.baselineHash != rec.baselineHash {
		g.log.Info().Str("variant", variant).Str("status", rec.status).Bool("serve", rec.serve).Bool("alert", rec.alert).
			Str("baseline_hash", rec.baselineHash).Uint64("revision", rec.revision).Msg("status record")
	}
	if rec.baselineHash != "" && g.manifests[rec.baselineHash] == nil {
		select {
		case g.prefetch <- rec.baselineHash:
		default: // View reads it on demand
		}
	}
	return variant
}

// retain forgets the variants a fresh watch did not deliver, and the hold
// when it did not deliver the server record: their keys are gone (removed
// while the gate was not watching).
func (g *Gate) retain(seen map[string]bool, sawServer bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !sawServer && g.held {
		g.held = false
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

// changedLocked wakes waiting Views and forgets manifests no record refers to.
func (g *Gate) changedLocked() {
	close(g.wake)
	g.wake = make(chan struct{})
	used := make(map[string]bool, len(g.records))
	for _, r := range g.records {
		used[r.baselineHash] = true
	}
	for h, m := range g.manifests {
		if !used[h] && m.isDone() {
			delete(g.manifests, h)
		}
	}
	for h := range g.warned {
		if !used[h] {
			delete(g.warned, h)
		}
	}
}

// prefetchLoop reads new baseline manifests in the background, so that the
// first decision after an approval does not wait for them.
func (g *Gate) prefetchLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-g.prefetch:
			rctx, cancel := context.WithTimeout(ctx, defaultPrefetchWait)
			_, _ = g.items(&bounded{parent: rctx}, h) // remembered, and logged once, by items
			cancel()
		}
	}
}
