// Package lockorder is the proxy's lock order, written down once and
// checked: every mutex of the proxy that may be held while another is taken
// is a Mutex or RWMutex of a lock class (a marker type naming it), the
// nestings allowed between classes are the table Order, and a build with
// the tag lockcheck (what make test builds) records, per goroutine, which
// classes it holds and panics when it takes one under another that Order
// does not put before it (directly or through others). Without the tag a
// Mutex is a sync.Mutex and the checks compile to nothing.
//
// The check is of what runs: go test -tags lockcheck catches a nesting the
// tests reach (the proxy's unit tests and the e2e tests, whose proxy
// command cmdtest builds with the same tag). Order is also checked to be
// acyclic (TestOrderAcyclic), and session/LOCKS.md is generated from it
// (TestLocksDoc).
package lockorder

import (
	"fmt"
	"sync"
)

// Class names a lock class: one mutex field of one type. Implementations
// are empty marker types, so that a Mutex's zero value has its class.
type Class interface {
	LockClass() string
}

// Mutex is a sync.Mutex of class C.
type Mutex[C Class] struct {
	mu sync.Mutex
}

// Lock locks m, after checking (lockcheck builds) that C may be taken
// under every class the goroutine holds.
func (m *Mutex[C]) Lock() {
	var c C
	acquire(c.LockClass(), m)
	m.mu.Lock()
}

// TryLock locks m if it is free. It never waits, so it cannot deadlock,
// and is recorded without a check of the order.
func (m *Mutex[C]) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	var c C
	record(c.LockClass(), m)
	return true
}

// Unlock unlocks m.
func (m *Mutex[C]) Unlock() {
	var c C
	m.mu.Unlock()
	release(c.LockClass(), m)
}

// RWMutex is a sync.RWMutex of class C; a read lock is checked as a lock.
type RWMutex[C Class] struct {
	mu sync.RWMutex
}

// Lock locks m for writing.
func (m *RWMutex[C]) Lock() {
	var c C
	acquire(c.LockClass(), m)
	m.mu.Lock()
}

// Unlock unlocks m for writing.
func (m *RWMutex[C]) Unlock() {
	var c C
	m.mu.Unlock()
	release(c.LockClass(), m)
}

// RLock locks m for reading.
func (m *RWMutex[C]) RLock() {
	var c C
	acquire(c.LockClass(), m)
	m.mu.RLock()
}

// RUnlock unlocks m for reading.
func (m *RWMutex[C]) RUnlock() {
	var c C
	m.mu.RUnlock()
	release(c.LockClass(), m)
}

// Violation is the panic value of a nesting Order does not name.
type Violation struct {
	Outer, Inner string
}

func (v Violation) Error() string {
	return fmt.Sprintf("lockorder: %s taken while %s is held: not a nesting of the lock order (services/proxy/internal/lockorder/order.go, session/LOCKS.md)", v.Inner, v.Outer)
}
