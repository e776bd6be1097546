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
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Drift returns the drift settings of server under its tenant's stored
// policy st (nil when the tenant has none) over defaults: each field the
// server's override sets, else the tenant's setting, else the default.
func Drift(st *policy.Stored, server string, defaults status.Policy) status.Policy {
	out := defaults
	if st == nil {
		return out
	}
	apply := func(ds policy.DriftSetting) {
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
		out = out.WithHashing(h)
	}
	for pass := range 2 { // the tenant's setting, then the server's override
		for _, ds := range st.Document.Drift {
			if ds.Tenant != st.Tenant {
				continue
			}
			if (pass == 0 && ds.Server == "") || (pass == 1 && ds.Server == server) {
				apply(ds)
			}
		}
	}
	return out
}

// RiskMode returns the enforcement mode of band for server under its
// tenant's stored policy st: the server's risk setting when it names the
// band, else the tenant's, else allow.
func RiskMode(st *policy.Stored, server string, band policy.Band) policy.Mode {
	if st == nil {
		return policy.ModeAllow
	}
	mode := policy.ModeAllow
	for pass := range 2 {
		for _, rs := range st.Document.Risk {
			if rs.Tenant != st.Tenant || (pass == 0 && rs.Server != "") || (pass == 1 && rs.Server != server) {
				continue
			}
			if m, ok := rs.Modes[band]; ok {
				mode = m
			}
		}
	}
	return mode
}

// Watch keeps every tenant's stored policy as the policy bucket holds it,
// from a KV watch: a service reads it from memory per message. A value it
// cannot read keeps the tenant's last good policy (and is logged).
type Watch struct {
	kv  jetstream.KeyValue
	log zerolog.Logger

	mu       sync.Mutex
	policies map[string]*policy.Stored
	loaded   chan struct{}
	once     sync.Once
}

// NewWatch returns a Watch of the policy bucket kv; Run runs it.
func NewWatch(kv jetstream.KeyValue, log zerolog.Logger) (*Watch, error) {
	if kv == nil {
		return nil, errors.New("settings: the policy bucket is nil")
	}
	return &Watch{kv: kv, log: log, policies: map[string]*policy.Stored{}, loaded: make(chan struct{})}, nil
}

// Policy returns tenant's stored policy, nil when it has none.
func (w *Watch) Policy(tenant string) *policy.Stored {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.policies[tenant]
}

// Drift is Drift with tenant's policy from the watch.
func (w *Watch) Drift(tenant, server string, defaults status.Policy) status.Policy {
	return Drift(w.Policy(tenant), server, defaults)
}

// RiskMode is RiskMode with tenant's policy from the watch.
func (w *Watch) RiskMode(tenant, server string, band policy.Band) policy.Mode {
	return RiskMode(w.Policy(tenant), server, band)
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
	tenant := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		w.mu.Lock()
		delete(w.policies, tenant)
		w.mu.Unlock()
		return
	}
	st := new(policy.Stored)
	if err := json.Unmarshal(e.Value(), st); err != nil || st.Tenant != tenant {
		w.log.Error().Err(err).Str("tenant", tenant).Str("stored_tenant", st.Tenant).Uint64("revision", e.Revision()).
			Msg("stored policy unreadable; keeping the tenant's last good one")
		return
	}
	w.mu.Lock()
	w.policies[tenant] = st
	w.mu.Unlock()
}
