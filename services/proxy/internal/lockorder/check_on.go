//go:build lockcheck

package lockorder

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

// Checking is whether this build checks the lock order.
const Checking = true

type held struct {
	class string
	lock  any // the mutex, to release the right one
}

var (
	heldMu sync.Mutex
	// holding is what each goroutine holds, in the order it took it.
	holding = map[uint64][]held{}
	// allowed is the transitive closure of Order: a lock may be taken
	// under every lock held that is before it in the order, directly or
	// through others.
	allowed = func() map[[2]string]bool {
		m := make(map[[2]string]bool, len(Order))
		for _, n := range Order {
			m[[2]string{n.Outer, n.Inner}] = true
		}
		for grew := true; grew; {
			grew = false
			for p := range m {
				for q := range m {
					if p[1] == q[0] && !m[[2]string{p[0], q[1]}] {
						m[[2]string{p[0], q[1]}] = true
						grew = true
					}
				}
			}
		}
		return m
	}()
)

func acquire(class string, lock any) {
	g := goid()
	heldMu.Lock()
	for _, h := range holding[g] {
		if !allowed[[2]string{h.class, class}] {
			heldMu.Unlock()
			panic(Violation{Outer: h.class, Inner: class})
		}
	}
	holding[g] = append(holding[g], held{class, lock})
	heldMu.Unlock()
}

// record notes that the goroutine holds lock, unchecked (TryLock).
func record(class string, lock any) {
	g := goid()
	heldMu.Lock()
	holding[g] = append(holding[g], held{class, lock})
	heldMu.Unlock()
}

// release forgets lock: from the goroutine that unlocks it, or, when
// another goroutine took it (a sync.Mutex may be unlocked by any), from
// that one's.
func release(class string, lock any) {
	g := goid()
	heldMu.Lock()
	defer heldMu.Unlock()
	if drop(g, lock) {
		return
	}
	for other := range holding {
		if drop(other, lock) {
			return
		}
	}
}

func drop(g uint64, lock any) bool {
	hs := holding[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].lock == lock {
			hs = append(hs[:i], hs[i+1:]...)
			if len(hs) == 0 {
				delete(holding, g)
			} else {
				holding[g] = hs
			}
			return true
		}
	}
	return false
}

// goid is the running goroutine's id, read from its stack header
// ("goroutine 18 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("lockorder: reading the goroutine id: " + err.Error())
	}
	return id
}
