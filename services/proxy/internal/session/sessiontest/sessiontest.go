// Package sessiontest holds the test doubles of what a session uses, for
// the tests of the session and of the packages around it: one of each,
// rather than a copy per package.
package sessiontest

import (
	"fmt"
	"sync"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Meter is a session.Meter that counts, safe for concurrent use. C is
// session.Code: the type is generic only so that the session's own tests
// can use it without an import cycle (Meter[session.Code]).
type Meter[C ~string] struct {
	mu       sync.Mutex
	dropped  map[C]int
	withheld map[surface.Kind]int
}

// Withheld counts n items of kind withheld.
func (m *Meter[C]) Withheld(kind surface.Kind, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.withheld == nil {
		m.withheld = map[surface.Kind]int{}
	}
	m.withheld[kind] += n
}

// Dropped counts one message dropped with code.
func (m *Meter[C]) Dropped(code C) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dropped == nil {
		m.dropped = map[C]int{}
	}
	m.dropped[code]++
}

// Drops returns how many messages were dropped with code.
func (m *Meter[C]) Drops(code C) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped[code]
}

// AllDrops returns how many messages were dropped, whatever their code.
func (m *Meter[C]) AllDrops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.dropped {
		n += c
	}
	return n
}

// WithheldOf returns how many items of kind were withheld; kind 0, of
// every kind.
func (m *Meter[C]) WithheldOf(kind surface.Kind) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if kind != 0 {
		return m.withheld[kind]
	}
	n := 0
	for _, c := range m.withheld {
		n += c
	}
	return n
}

// String lists the drops by code, for a test's failure message.
func (m *Meter[C]) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.dropped)
}
