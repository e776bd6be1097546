// Package settings resolves the drift settings (posture, action on drift,
// guard, hash algorithm, annotations) and the risk modes of each server
// from its tenant's policy in the policy bucket (policy.Stored, one key per
// tenant, written by the drift service's admin API), over a service's
// defaults: a server's override, then the tenant's setting, then the
// defaults. The drift service records the resolved settings with each
// server (status.Policy); the fingerprint service hashes each observation
// by them; neither takes the hashing from a flag of its own.
// docs/policy-drift-settings.md describes the precedence.
package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Drift returns the drift settings of server under its tenant's compiled
// policy set (nil when the tenant has none) over defaults: each field the
// server's override sets, else the tenant's setting (policy.Set.Drift),
// else the default.
//
// The canonical form is never a default's: it is the policy's when it
// names one, else status.FormLatest, so that a server first seen is hashed
// in the newest form whatever the service's defaults hold (they have no
// form: no service judges a server by a form of its own).
func Drift(set *policy.Set, server string, defaults status.Policy) status.Policy {
	out := defaults
	if set == nil {
		h := out.Hashing()
		h.Form = status.FormLatest
		return out.WithHashing(h)
	}
	ds := set.Drift(server)
	if ds.Posture != "" {
		out.Posture = ds.Posture
	}
	if ds.OnDrift != "" {
		out.OnDrift = ds.OnDrift
	}
	if ds.Guard != nil {
		out.Guard = *ds.Guard
	}
	h := out.Hashing()
	if ds.Hash != "" {
		h.Hash = ds.Hash
	}
	if ds.Annotations != nil {
		h.Annotations = *ds.Annotations
	}
	h.Form = status.FormLatest
	if ds.Form != "" {
		h.Form = ds.Form
		if ds.Form == policy.FormV1 {
			h.Form = status.FormV1
		}
	}
	return out.WithHashing(h)
}

// Watch keeps every tenant's policy as the policy bucket holds it,
// compiled, from a KV watch: a service reads it from memory per message. A
// value it cannot read or compile keeps the tenant's last good policy (and
// is logged).
type Watch struct {
	kv  jetstream.KeyValue
	log zerolog.Logger

	mu       sync.Mutex
	policies map[string]*policy.Set
	revs     map[string]uint64 // the bucket revision each held policy came from
	loaded   chan struct{}
	once     sync.Once
	changed  func(tenant string)
	revision atomic.Uint64 // the highest bucket revision taken in
}

// Revision is the highest revision of the policy bucket the watch has
// taken in (a policy applied or refused, or a removal); 0 before any.
// Compared with the bucket's last sequence, it says whether a change has
// reached the service.
func (w *Watch) Revision() uint64 { return w.revision.Load() }

// Tenants is the number of tenants whose policy the watch holds.
func (w *Watch) Tenants() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.policies)
}

// Collectors are the watch's gauges for a service's metrics:
// mcpdrift_<service>_policy_revision (Revision) and
// mcpdrift_<service>_policies (Tenants).
func (w *Watch) Collectors(service string) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpdrift_" + service + "_policy_revision",
			Help: "The highest revision of the policy bucket (mcpdrift_policy) the service has taken in: a policy applied or refused, or a removal.",
		}, func() float64 { return float64(w.Revision()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpdrift_" + service + "_policies",
			Help: "Tenants whose policy the service holds.",
		}, func() float64 { return float64(w.Tenants()) }),
	}
}

// Notify has f called with the tenant each time the watch takes in a
// tenant's new policy or its removal (not a value it refuses), from the
// watch's goroutine: f must not block. Call it before Run.
func (w *Watch) Notify(f func(tenant string)) { w.changed = f }

// NewWatch returns a Watch of the policy bucket kv; Run runs it.
func NewWatch(kv jetstream.KeyValue, log zerolog.Logger) (*Watch, error) {
	if kv == nil {
		return nil, errors.New("settings: the policy bucket is nil")
	}
	return &Watch{kv: kv, log: log, policies: map[string]*policy.Set{}, revs: map[string]uint64{}, loaded: make(chan struct{})}, nil
}

// Policy returns tenant's compiled policy, nil when it has none.
func (w *Watch) Policy(tenant string) *policy.Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.policies[tenant]
}

// Drift is Drift with tenant's policy from the watch.
func (w *Watch) Drift(tenant, server string, defaults status.Policy) status.Policy {
	return Drift(w.Policy(tenant), server, defaults)
}

// RiskMode is the enforcement mode of band for server under tenant's
// policy (policy.Set.RiskMode): allow without one.
func (w *Watch) RiskMode(tenant, server string, band policy.Band) policy.Mode {
	return w.Policy(tenant).RiskMode(server, band)
}

// Loaded is closed once the policies that existed when the watch started
// are in: a service resolves no setting before (it would take the
// defaults for a tenant whose policy has not arrived yet).
func (w *Watch) Loaded() <-chan struct{} { return w.loaded }

// WaitLoaded waits for Loaded or ctx.
func (w *Watch) WaitLoaded(ctx context.Context) error {
	select {
	case <-w.loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the policies of %s: %w", policy.Bucket, ctx.Err())
	}
}

// Start runs the watch until ctx ends and waits for Loaded: what a service
// does before it consumes anything. stop ends the watch and waits for it;
// err is ctx's when ctx ended first (the watch is stopped then).
func (w *Watch) Start(ctx context.Context) (stop func(), err error) {
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(watchCtx) }()
	stop = func() { cancel(); <-done }
	if err := w.WaitLoaded(ctx); err != nil {
		stop()
		return func() {}, err
	}
	return stop, nil
}

// Run watches the bucket until ctx ends, watching again after a failure.
func (w *Watch) Run(ctx context.Context) error {
	delay := 100 * time.Millisecond
	for {
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.log.Warn().Err(err).Dur("retry_in", delay).Msg("policy watch stopped; keeping the policies it delivered")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (w *Watch) watch(ctx context.Context) error {
	kw, err := w.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching %s: %w", policy.Bucket, err)
	}
	defer func() { _ = kw.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil {
				w.once.Do(func() { close(w.loaded) })
				continue
			}
			w.apply(e)
		}
	}
}

func (w *Watch) apply(e jetstream.KeyValueEntry) {
	defer w.seen(e.Revision())
	tenant := e.Key()
	// A watch started again after a failure delivers every value again:
	// what the watch holds already is neither logged nor notified twice.
	w.mu.Lock()
	_, held := w.policies[tenant]
	again := held && w.revs[tenant] == e.Revision()
	w.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		if held {
			w.mu.Lock()
			delete(w.policies, tenant)
			delete(w.revs, tenant)
			w.mu.Unlock()
			w.notify(tenant)
		}
		return
	}
	if again {
		return
	}
	st := new(policy.Stored)
	err := json.Unmarshal(e.Value(), st)
	if err == nil && st.Tenant != tenant {
		err = fmt.Errorf("stored under %q for tenant %q", tenant, st.Tenant)
	}
	var set *policy.Set
	if err == nil {
		set, err = policy.CompileStored(st)
	}
	if err != nil {
		w.log.Error().Err(err).Str("tenant", tenant).Uint64("revision", e.Revision()).
			Msg("stored policy unreadable; keeping the tenant's last good one")
		return
	}
	w.mu.Lock()
	w.policies[tenant] = set
	w.revs[tenant] = e.Revision()
	w.mu.Unlock()
	w.log.Info().Str("tenant", tenant).Int64("version", set.Version()).Uint64("revision", e.Revision()).
		Str("hash", set.Hash()).Int("rules", set.Len()).Msg("policy applied")
	w.notify(tenant)
}

// seen raises Revision to rev.
func (w *Watch) seen(rev uint64) {
	for {
		cur := w.revision.Load()
		if rev <= cur || w.revision.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (w *Watch) notify(tenant string) {
	if w.changed != nil {
		w.changed(tenant)
	}
}
