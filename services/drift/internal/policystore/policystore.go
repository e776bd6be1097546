// Package policystore is the drift service's side of the policy bucket
// (docs/policy.md): it replaces tenants' stored policies with
// compare-and-set, all of a document or none of it, and reads them back
// for the admin API. The drift service is the bucket's one writer; proxies
// only watch it.
package policystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// Codes of the errors Apply returns besides the document's own.
const (
	// CodeConflict: another writer changed a tenant's policy while this
	// apply was writing; what this apply wrote was restored. Apply again.
	CodeConflict = "policy_conflict"
	// CodeClearNamed: a tenant both cleared and named by the document.
	CodeClearNamed = "policy_clear_named"
)

// Store writes and reads the policy bucket.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// New returns a store on the policy bucket kv; now defaults to time.Now.
func New(kv jetstream.KeyValue, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now}
}

// current is a tenant's record as read before writing.
type current struct {
	rev    uint64
	raw    []byte
	stored *policy.Stored // nil when there is none (or it is unreadable)
}

// Apply replaces the stored policy of every tenant d names, and of every
// tenant in clear with an empty policy, by Version+1 each, with
// compare-and-set on the revisions read first. Tenants neither named nor
// cleared are left as they are. A tenant whose policy is already the one
// given is not rewritten. d must be valid (policy.Parse or Validate); when
// any write fails, the writes already made are undone, so that an apply
// takes effect whole or not at all as far as the bucket allows (proxies
// may see the undone version for the moment it existed), and the error is
// CodeConflict when another writer raced it.
func (s *Store) Apply(ctx context.Context, d *policy.Document, clear []string, actor string) ([]policy.Applied, error) {
	if err := policy.Validate(d); err != nil {
		return nil, err
	}
	named := d.Tenants()
	for _, t := range clear {
		if err := bus.ValidID("tenant", t); err != nil {
			return nil, err
		}
		if slices.Contains(named, t) {
			return nil, coded.Errorf(CodeClearNamed, "tenant %q is both cleared and named by the document", t)
		}
	}
	tenants := append(slices.Clone(named), clear...)
	slices.Sort(tenants)
	tenants = slices.Compact(tenants)

	cur := make(map[string]current, len(tenants))
	for _, t := range tenants {
		c, err := s.read(ctx, t)
		if err != nil {
			return nil, err
		}
		cur[t] = c
	}
	var done []write
	out := make([]policy.Applied, 0, len(tenants))
	nowMs := s.now().UnixMilli()
	for _, t := range tenants {
		c := cur[t]
		part := d.For(t)
		hash := policy.Hash(&part)
		a := policy.Applied{Tenant: t, Hash: hash, Rules: len(part.Rules), Cleared: slices.Contains(clear, t)}
		if c.stored != nil && c.stored.Hash == hash && policy.Hash(&c.stored.Document) == hash {
			a.Version = c.stored.Version
			out = append(out, a)
			continue
		}
		if a.Cleared && c.rev == 0 {
			out = append(out, a) // nothing to clear
			continue
		}
		var version int64 = 1
		if c.stored != nil {
			version = c.stored.Version + 1
		} else if c.rev != 0 {
			version = lenientVersion(c.raw) + 1
		}
		st := policy.Stored{Tenant: t, Version: version, Hash: hash, UpdatedBy: actor, UpdatedAtMs: nowMs, Document: part}
		data, err := json.Marshal(st)
		if err != nil {
			s.undoAll(ctx, cur, done)
			return nil, fmt.Errorf("encoding the policy of %s: %w", t, err)
		}
		var rev uint64
		if c.rev == 0 {
			rev, err = s.kv.Create(ctx, policy.Key(t), data)
		} else {
			rev, err = s.kv.Update(ctx, policy.Key(t), data, c.rev)
		}
		if err != nil {
			s.undoAll(ctx, cur, done)
			if isConflict(err) {
				return nil, coded.Errorf(CodeConflict, "the policy of tenant %s changed while this apply was writing; nothing was applied, apply again", t)
			}
			return nil, fmt.Errorf("writing the policy of %s (nothing was applied): %w", t, err)
		}
		done = append(done, write{t, rev})
		a.Version, a.Changed = version, true
		out = append(out, a)
	}
	return out, nil
}

// write is one record an apply wrote: the tenant and the revision.
type write struct {
	tenant string
	rev    uint64
}

// undoAll restores what an apply wrote before it failed.
func (s *Store) undoAll(ctx context.Context, cur map[string]current, done []write) {
	ctx = context.WithoutCancel(ctx)
	for _, w := range done {
		c := cur[w.tenant]
		if c.rev == 0 {
			_ = s.kv.Delete(ctx, policy.Key(w.tenant), jetstream.LastRevision(w.rev))
			continue
		}
		_, _ = s.kv.Update(ctx, policy.Key(w.tenant), c.raw, w.rev)
	}
}

func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// lenientVersion reads the version of a record that does not decode whole,
// so that replacing it still moves the version forward.
func lenientVersion(raw []byte) int64 {
	var v struct {
		Version int64 `json:"version"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.Version
}

func (s *Store) read(ctx context.Context, tenant string) (current, error) {
	e, err := s.kv.Get(ctx, policy.Key(tenant))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return current{}, nil
	}
	if err != nil {
		return current{}, fmt.Errorf("reading the policy of %s: %w", tenant, err)
	}
	st, err := policy.DecodeStored(e.Value())
	if err != nil {
		st = nil // replaced by the apply; lenientVersion keeps its version moving
	}
	return current{rev: e.Revision(), raw: e.Value(), stored: st}, nil
}

// Get returns a tenant's stored policy; nil when it has none.
func (s *Store) Get(ctx context.Context, tenant string) (*policy.Stored, error) {
	e, err := s.kv.Get(ctx, policy.Key(tenant))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the policy of %s: %w", tenant, err)
	}
	return policy.DecodeStored(e.Value())
}

// List returns every tenant's stored policy, by tenant.
func (s *Store) List(ctx context.Context) ([]policy.Stored, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing policies: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]policy.Stored, 0, len(keys))
	for _, k := range keys {
		st, err := s.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out = append(out, *st)
		}
	}
	return out, nil
}
