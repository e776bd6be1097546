package fpsvc

import (
	"bytes"
	"sync"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// memo remembers, per tenant, server and variant, the last capture and the
// fingerprint computed from it, so that an unchanged surface re-listed by
// the fleet (the common case) is recognized by comparing bytes instead of
// parsing and hashing again. Every byte is compared: a weak hash of bytes a
// hostile server chose is never taken as proof of equality. The total of remembered capture bytes stays under budget by
// evicting arbitrary entries.
type memo struct {
	mu     sync.Mutex
	m      map[string]*memoEntry
	size   int
	budget int
}

// memoEntry is the engine's result for one capture; immutable once stored.
type memoEntry struct {
	capture     []byte
	hashing     status.Hashing // the settings it was hashed with
	surfaceHash string         // "" when rejected
	errorCode   string
	// result is the protobuf encoding of a Fingerprint holding only the
	// result fields: surface_hash, items and risk, or error_code and
	// error_message.
	result []byte
}

func newMemo(budget int) *memo {
	return &memo{m: make(map[string]*memoEntry), budget: budget}
}

func memoKey(obs *mcpdriftv1.ListObservation) string {
	// Ids are checked by bus.ValidID: they hold no '.', so the key is unique.
	return obs.Tenant + "." + obs.Server + "." + obs.Variant
}

// get returns the entry for obs when its capture is byte for byte the one
// remembered and was hashed with h.
func (m *memo) get(obs *mcpdriftv1.ListObservation, h status.Hashing) (*memoEntry, bool) {
	if m.budget <= 0 {
		return nil, false
	}
	m.mu.Lock()
	e := m.m[memoKey(obs)]
	m.mu.Unlock()
	if e == nil || e.hashing != h || !bytes.Equal(e.capture, obs.Capture) {
		return nil, false
	}
	return e, true
}

// put remembers e for obs; e.capture must not be modified afterwards.
func (m *memo) put(obs *mcpdriftv1.ListObservation, e *memoEntry) {
	n := len(e.capture)
	if m.budget <= 0 || n > m.budget/8 {
		return
	}
	key := memoKey(obs)
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.m[key]; old != nil {
		m.size -= len(old.capture)
	}
	for k, v := range m.m { // map order: an arbitrary victim
		if m.size+n <= m.budget {
			break
		}
		if k != key {
			m.size -= len(v.capture)
			delete(m.m, k)
		}
	}
	m.m[key] = e
	m.size += n
}
