package fpsvc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// ManifestStore keeps captures by name (bus.ManifestName of the surface
// hash). Names are content addresses: an object once stored never changes.
type ManifestStore interface {
	Has(ctx context.Context, name string) (bool, error)
	Put(ctx context.Context, name string, data []byte) error
}

// ObjectManifests is a ManifestStore over the JetStream object store of
// manifests (bus.BucketManifests).
type ObjectManifests struct {
	// JS writes a manifest in one round trip (bus.PutObject); nil writes
	// it with ObjectStore.PutBytes.
	JS jetstream.JetStream
	OS jetstream.ObjectStore
}

// NewObjectManifests adapts the manifest object store of bus.Setup.
func NewObjectManifests(js jetstream.JetStream, store jetstream.ObjectStore) ObjectManifests {
	return ObjectManifests{JS: js, OS: store}
}

// Has reports whether name is stored (and not deleted).
func (m ObjectManifests) Has(ctx context.Context, name string) (bool, error) {
	_, err := m.OS.GetInfo(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return false, nil
	}
	return false, err
}

// Put stores data under name. It is called for a name Has found absent,
// so there is no earlier version to purge: one round trip.
func (m ObjectManifests) Put(ctx context.Context, name string, data []byte) error {
	if m.JS != nil {
		return bus.PutObject(ctx, m.JS, bus.BucketManifests, name, data)
	}
	_, err := m.OS.PutBytes(ctx, name, data)
	return err
}

// storeManifest stores capture under the name of hash unless it is known to
// be there. One instance stores one name once at a time; two instances
// racing store the same bytes twice, which is harmless.
func (s *Service) storeManifest(ctx context.Context, hash string, capture []byte) error {
	name := bus.ManifestName(hash)
	if s.known.has(name) {
		return nil
	}
	return s.flight.do(ctx, name, func() error {
		if s.known.has(name) { // stored while we waited
			return nil
		}
		ok, err := s.store.Has(ctx, name)
		if err != nil {
			return err
		}
		if !ok {
			if err := s.store.Put(ctx, name, capture); err != nil {
				return err
			}
		}
		s.known.add(name)
		return nil
	})
}

// knownSet remembers names known to be stored, so that the common case (a
// manifest seen before) costs no round trip. Entries expire after ttl so
// that an object deleted by an operator is stored again; the set is
// cleared when full. Names are SHA-256 addresses, so a hostile server cannot
// make one name stand for other bytes.
type knownSet struct {
	mu  sync.Mutex
	m   map[string]time.Time
	max int
	ttl time.Duration
	now func() time.Time
}

func newKnownSet(max int, ttl time.Duration, now func() time.Time) *knownSet {
	return &knownSet{m: make(map[string]time.Time), max: max, ttl: ttl, now: now}
}

func (k *knownSet) has(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.m[name]
	if ok && k.now().Sub(at) > k.ttl {
		delete(k.m, name)
		return false
	}
	return ok
}

func (k *knownSet) add(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= k.max {
		clear(k.m)
	}
	k.m[name] = k.now()
}

// flightGroup runs one call per key at a time; callers for a key already
// in flight wait for it and then run their own (which finds the work done).
type flightGroup struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (g *flightGroup) do(ctx context.Context, key string, fn func() error) error {
	for {
		g.mu.Lock()
		if g.m == nil {
			g.m = make(map[string]chan struct{})
		}
		wait, busy := g.m[key]
		if !busy {
			done := make(chan struct{})
			g.m[key] = done
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				delete(g.m, key)
				g.mu.Unlock()
				close(done)
			}()
			return fn()
		}
		g.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
