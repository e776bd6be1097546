//lint:file-ignore SA2001 the checker's tests take locks to have their nesting checked, not to guard anything

package lockorder

import (
	"errors"
	"sync"
	"testing"
)

// A nesting the order names passes; one it does not panics with the two
// classes; a lock unlocked by another goroutine than the one that took it
// is forgotten all the same; a read lock counts as a lock.
func TestChecker(t *testing.T) {
	if !Checking {
		t.Skip("the checker is built with -tags lockcheck (make test)")
	}
	var copyMu Mutex[GateCopyMu]
	var gateMu Mutex[GateMu]
	copyMu.Lock()
	gateMu.Lock() // copyMu > gateMu: in Order
	gateMu.Unlock()
	copyMu.Unlock()

	violation := func(f func()) (v Violation) {
		t.Helper()
		defer func() {
			r := recover()
			err, ok := r.(error)
			if !ok || !errors.As(err, &v) {
				t.Fatalf("no violation: %v", r)
			}
		}()
		f()
		return v
	}
	gateMu.Lock()
	if v := violation(copyMu.Lock); v.Outer != "fleet.Gate.mu" || v.Inner != "fleet.Gate.copyMu" {
		t.Fatalf("violation %+v", v)
	}
	gateMu.Unlock()
	// The panic came before copyMu was taken or recorded: it is free.
	if !copyMu.TryLock() {
		t.Fatal("copyMu held after the refused Lock")
	}
	copyMu.Unlock()

	var pub RWMutex[PublisherMu]
	var out Mutex[OutboxMu]
	pub.RLock()
	out.Lock()
	out.Unlock()
	pub.RUnlock()
	out.Lock()
	if v := violation(pub.RLock); v.Outer != "fleet.outbox.mu" {
		t.Fatalf("violation %+v", v)
	}
	out.Unlock()

	// Taken here, released by another goroutine: this one holds nothing
	// after, so a nesting that would break the order from it passes.
	var q Mutex[QueueMu]
	q.Lock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); q.Unlock() }()
	wg.Wait()
	copyMu.Lock()
	gateMu.Lock()
	gateMu.Unlock()
	copyMu.Unlock()
	q.Lock() // nothing held: no violation
	q.Unlock()
}
