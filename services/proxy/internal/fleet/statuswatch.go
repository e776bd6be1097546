package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// CodeStatusPermission is the code of the error a StatusWatch stops with
// when the proxy's NATS user may not bind the status bucket or watch its
// tenant's keys there (docs/services/proxy-fleet.md).
const CodeStatusPermission = "status_permission_denied"

// ErrStatusPermission matches (errors.Is) the error Run returns when NATS
// refuses the proxy what the status watch needs.
var ErrStatusPermission = coded.New(CodeStatusPermission, "")

// StatusWatch is a proxy's one watch of the status bucket: a single KV
// watch (one ordered JetStream consumer) of every key of its tenant,
// "<tenant>.>", whatever the number of servers the proxy fronts. It hands
// each record to the Gate of its server, and drops the records of servers
// the proxy does not front by their key, undecoded. Fronting one more server
// adds a Gate, never a consumer: the status fan-out grows with proxies, not
// with (proxy, server) pairs (docs/adr/0010-one-status-watch-per-proxy.md).
//
// One filter of the tenant's keys, not one filter per fronted key: NATS
// permissions see the filter of a single-filter consumer in the subject of
// its creation ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>), so
// auth.conf confines a proxy to its tenant; a consumer of several filters
// is created on a subject that names none, which no permission can confine.
//
// Make the gates with Gate before Run; Run watches until ctx ends.
type StatusWatch struct {
	js          jetstream.JetStream
	tenant      string
	filter      string // "<tenant>.>"
	prefix      string // "<tenant>."
	log         zerolog.Logger
	bindTimeout time.Duration
	watches     atomic.Int64 // watches started, for tests and metrics

	mu      lockorder.Mutex[lockorder.StatusWatchMu]
	gates   map[string]*Gate // by server; fixed once Run has started
	running bool

	// Baseline versions whose item hashes gates wait for (by key), and
	// the fetcher's wake-up.
	needMu   lockorder.Mutex[lockorder.StatusWatchNeed]
	needs    map[string]need
	needWake chan struct{}
}

// need is a baseline version's entry a gate waits for: its key in the
// baselines bucket and the baseline hash its items must make up.
type need struct {
	g         *Gate
	key, hash string
}

// NewStatusWatch returns the status watch of a proxy of tenant. It does no
// I/O, so that a proxy starts while NATS is unreachable. log must not name
// the tenant: the watch and its gates add it.
func NewStatusWatch(js jetstream.JetStream, tenant string, log zerolog.Logger) (*StatusWatch, error) {
	if js == nil {
		return nil, errors.New("fleet status watch: jetstream is nil")
	}
	if err := bus.ValidID("tenant", tenant); err != nil {
		return nil, fmt.Errorf("fleet status watch: %w", err)
	}
	return &StatusWatch{
		js: js, tenant: tenant, filter: tenant + ".>", prefix: tenant + ".",
		log:         log.With().Str("tenant", tenant).Logger(),
		bindTimeout: defaultBindTimeout,
		gates:       map[string]*Gate{},
		needs:       map[string]need{},
		needWake:    make(chan struct{}, 1),
	}, nil
}

// Gate returns the gate of server, made on first call. Every gate must be
// made before Run starts; log must not name the tenant or the server.
func (w *StatusWatch) Gate(server string, log zerolog.Logger) (*Gate, error) {
	if err := bus.ValidID("server", server); err != nil {
		return nil, fmt.Errorf("fleet gate: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g, ok := w.gates[server]; ok {
		return g, nil
	}
	if w.running {
		return nil, fmt.Errorf("fleet gate: server %s added after the status watch started", server)
	}
	g := newGate(w.js, w.tenant, server, log)
	g.fetch = w.request
	w.gates[server] = g
	return g, nil
}

// Watches reports how many watches Run has started (one, plus one after
// each break or reconnection).
func (w *StatusWatch) Watches() int64 { return w.watches.Load() }

// Run watches the tenant's status keys until ctx ends, and keeps each
// gate's status copy (UseCopies). When the watch breaks or the connection
// comes back after an outage it starts a new watch, whose initial values
// replace what the gates knew, at once for each gate; in between, the
// gates answer from memory. Run returns nil when ctx ends, and an error
// that matches ErrStatusPermission when NATS refuses the watch: the
// proxy's user lacks what auth.conf grants a proxy, and no retry mends it.
func (w *StatusWatch) Run(ctx context.Context) error {
	nc := w.js.Conn()
	if nc == nil {
		return errors.New("fleet status watch: jetstream has no connection")
	}
	// No gate is added once the watch runs: its own copy of the map
	// needs no lock.
	w.mu.Lock()
	w.running = true
	gates := maps.Clone(w.gates)
	w.mu.Unlock()
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)

	copyCtx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	for _, g := range gates {
		if g.copies != nil {
			writers.Go(func() { g.keepCopy(copyCtx) })
		}
	}
	defer func() {
		stopWriters()
		writers.Wait()
		for _, g := range gates {
			g.writeCopy() // the last changes, before the proxy stops
		}
	}()

	// The fetcher of baseline versions' item hashes runs beside the
	// watch; an error of its that no retry mends stops both.
	wctx, stop := context.WithCancelCause(ctx)
	var fetcher sync.WaitGroup
	fetcher.Go(func() {
		if err := w.fetchLoop(wctx, nc); err != nil {
			stop(err)
		}
	})
	defer func() {
		stop(nil)
		fetcher.Wait()
	}()
	err := rewatch(wctx, reconnected, w.log, "status", "answering from memory", func(failing *bool) error {
		err := w.watch(ctx, gates, reconnected, failing)
		for _, g := range gates {
			g.setWatch(false)
		}
		if err != nil && ctx.Err() == nil {
			if perm := permissionDenied(nc, "KV_"+bus.BucketStatus, nc.Opts.InboxPrefix); perm != nil {
				return coded.Errorf(CodeStatusPermission, "NATS refuses the proxy of tenant %s the status watch (%v); its user needs what deploy/nats/auth.conf grants PROXY_<TENANT>: %w",
					w.tenant, perm, errFatal)
			}
		}
		return err
	})
	if cause := context.Cause(wctx); err == nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// request asks for the entry of a baseline version (key) whose item
// hashes make up hash, for g; it never blocks.
func (w *StatusWatch) request(g *Gate, key, hash string) {
	w.needMu.Lock()
	w.needs[key] = need{g: g, key: key, hash: hash}
	w.needMu.Unlock()
	select {
	case w.needWake <- struct{}{}:
	default:
	}
}

// fetchLoop fetches the baseline versions gates ask for (request) until
// ctx ends: a direct get each from the baselines bucket, again after a
// failure (from minRewatch on, doubling up to maxRewatch), also when the
// entry is not there yet (a site's mirror of the baselines may lag behind
// its mirror of the status). It returns an error that matches
// ErrStatusPermission when NATS refuses the proxy the bucket.
func (w *StatusWatch) fetchLoop(ctx context.Context, nc *nats.Conn) error {
	var kv jetstream.KeyValue
	delay := minRewatch
	var retry <-chan time.Time
	warned := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.needWake:
		case <-retry:
		}
		retry = nil
		w.needMu.Lock()
		needs := w.needs
		w.needs = map[string]need{}
		w.needMu.Unlock()
		var failed []need
		var lastErr error
		for _, n := range needs {
			if !n.g.wants(n.key) {
				continue
			}
			entry, err := w.get(ctx, &kv, n.key)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if perm := permissionDenied(nc, "KV_"+bus.BucketBaselines, nc.Opts.InboxPrefix); perm != nil {
					return coded.Errorf(CodeStatusPermission, "NATS refuses the proxy of tenant %s the baselines' item hashes (%v); its user needs what deploy/nats/auth.conf grants PROXY_<TENANT>: %w",
						w.tenant, perm, errFatal)
				}
				failed, lastErr = append(failed, n), err
				if !warned[n.key] {
					warned[n.key] = true
					n.g.log.Warn().Err(err).Str("key", n.key).Msg("baseline item hashes not fetched yet, the variant is withheld meanwhile")
				}
				continue
			}
			delete(warned, n.key)
			n.g.baselineArrived(n.key, n.hash, entry)
		}
		if len(failed) == 0 {
			delay = minRewatch
			continue
		}
		w.log.Debug().Err(lastErr).Int("baselines", len(failed)).Dur("retry_in", delay).Msg("fetching baseline item hashes again")
		w.needMu.Lock()
		for _, n := range failed {
			if _, newer := w.needs[n.key]; !newer {
				w.needs[n.key] = n
			}
		}
		w.needMu.Unlock()
		retry = time.After(delay)
		delay = min(2*delay, maxRewatch)
	}
}

// get reads one entry of the baselines bucket, binding it first when *kv
// is nil; each step gets the bind timeout.
func (w *StatusWatch) get(ctx context.Context, kv *jetstream.KeyValue, key string) (copyEntry, error) {
	gctx, cancel := context.WithTimeout(ctx, w.bindTimeout)
	defer cancel()
	if *kv == nil {
		b, err := w.js.KeyValue(gctx, bus.BucketBaselines)
		if err != nil {
			return copyEntry{}, fmt.Errorf("binding bucket %s: %w", bus.BucketBaselines, err)
		}
		*kv = b
	}
	e, err := (*kv).Get(gctx, key)
	if err != nil {
		return copyEntry{}, fmt.Errorf("reading %s: %w", key, err)
	}
	return copyEntry{Key: e.Key(), Revision: e.Revision(), Value: e.Value()}, nil
}

// errFatal marks a watch error that no retry mends: rewatch returns it.
var errFatal = errors.New("not retried")

// permissionDenied returns the connection's last error when it is NATS
// refusing a subject that names one of about: the status stream (a
// JetStream request the client sent and the server dropped, so that the
// request itself only timed out), or the connection's inbox prefix (the
// subscription its answers come back on).
func permissionDenied(nc *nats.Conn, about ...string) error {
	err := nc.LastError()
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	for _, a := range about {
		if a != "" && strings.Contains(err.Error(), a) {
			return err
		}
	}
	return nil
}

// watch runs one watch until ctx ends, it breaks, or the connection was
// re-established. The initial values are gathered first and handed to each
// gate at once when they are all in: a gate never answers from a mix of
// two watches', and its server record is applied before its variants', so
// that a held server is never served while the watch starts.
func (w *StatusWatch) watch(ctx context.Context, gates map[string]*Gate, reconnected <-chan nats.Status, failing *bool) error {
	bindCtx, cancel := context.WithTimeout(ctx, w.bindTimeout)
	defer cancel()
	kv, err := w.js.KeyValue(bindCtx, bus.BucketStatus)
	if err != nil {
		return fmt.Errorf("binding bucket %s: %w", bus.BucketStatus, err)
	}
	ws, stopWatch, err := startWatch(ctx, kv, w.filter, w.bindTimeout)
	if err != nil {
		return err
	}
	defer stopWatch()
	w.watches.Add(1)
	initial := map[*Gate]*initialValues{}
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
			case e == nil: // the initial values are all in
				if initial == nil {
					continue
				}
				load(gates, initial)
				initial = nil
				if *failing {
					*failing = false
					w.log.Info().Msg("status watch resumed")
				}
			default:
				g, variant, ok := w.route(gates, e.Key())
				switch {
				case !ok:
				case initial != nil:
					iv := initial[g]
					if iv == nil {
						iv = &initialValues{variants: map[string]jetstream.KeyValueEntry{}}
						initial[g] = iv
					}
					if variant == "" {
						iv.server = e
					} else {
						iv.variants[variant] = e
					}
				case variant == "":
					g.applyServer(e)
				default:
					g.apply(e)
				}
			}
		}
	}
}

// initialValues are a watch's initial values for one gate.
type initialValues struct {
	server   jetstream.KeyValueEntry // nil: the server has no record
	variants map[string]jetstream.KeyValueEntry
}

// load hands the initial values to every gate, the gates without any too
// (their records are gone), and marks each watching.
func load(gates map[string]*Gate, initial map[*Gate]*initialValues) {
	for _, g := range gates {
		iv := initial[g]
		if iv == nil {
			iv = &initialValues{}
		}
		if iv.server != nil {
			g.applyServer(iv.server)
		}
		seen := make(map[string]bool, len(iv.variants))
		// In key order, so that a gate's log reads the same every time.
		for _, v := range slices.Sorted(maps.Keys(iv.variants)) {
			g.apply(iv.variants[v])
			seen[v] = true
		}
		g.retain(seen, iv.server != nil)
		g.setWatch(true)
	}
}

// route returns the gate a key of the tenant belongs to and the variant it
// names ("" for the server record); ok is false for a server the proxy
// does not front, or a key that is no status key.
func (w *StatusWatch) route(gates map[string]*Gate, key string) (g *Gate, variant string, ok bool) {
	rest, ok := strings.CutPrefix(key, w.prefix)
	if !ok {
		return nil, "", false
	}
	server, variant, _ := strings.Cut(rest, ".")
	g, ok = gates[server]
	return g, variant, ok
}

// startWatch starts a watch of filter in kv that lives as long as ctx, and
// returns it with the function that stops it. The client library stops a
// watch when its context ends, so the watch must not share a bind's
// deadline; but the library also waits on that context for the watch's
// consumer to be created, and NATS drops a request it refuses without an
// answer: the creation gets timeout, after which the watch's context ends.
func startWatch(ctx context.Context, kv jetstream.KeyValue, filter string, timeout time.Duration) (jetstream.KeyWatcher, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(timeout, cancel)
	ws, err := kv.Watch(wctx, filter)
	if err != nil {
		timer.Stop()
		cancel()
		return nil, nil, fmt.Errorf("watching %s: %w", filter, err)
	}
	stop := func() {
		_ = ws.Stop()
		cancel()
	}
	if !timer.Stop() {
		stop()
		return nil, nil, fmt.Errorf("watching %s: no consumer within %v", filter, timeout)
	}
	return ws, stop, nil
}
