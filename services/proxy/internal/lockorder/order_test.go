package lockorder

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite session/LOCKS.md from Order")

// Every class is named once; every nesting names classes; the nestings are
// acyclic, and no class nests under itself (a following session tells its
// leader what it saw with its own lock released: followPage).
func TestOrderAcyclic(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Classes {
		if names[c.LockClass()] {
			t.Errorf("class %s twice", c.LockClass())
		}
		names[c.LockClass()] = true
	}
	edges := map[string][]string{}
	seen := map[[2]string]bool{}
	for _, n := range Order {
		if !names[n.Outer] || !names[n.Inner] {
			t.Errorf("nesting %s > %s names a class that is not in Classes", n.Outer, n.Inner)
		}
		if seen[[2]string{n.Outer, n.Inner}] {
			t.Errorf("nesting %s > %s twice", n.Outer, n.Inner)
		}
		seen[[2]string{n.Outer, n.Inner}] = true
		if n.Outer == n.Inner {
			t.Errorf("%s nests under itself", n.Outer)
			continue
		}
		edges[n.Outer] = append(edges[n.Outer], n.Inner)
	}
	if cycle := findCycle(edges); cycle != nil {
		t.Fatalf("the lock order has a cycle: %s", strings.Join(cycle, " > "))
	}
	if cycle := findCycle(map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}); len(cycle) != 4 {
		t.Fatalf("findCycle misses a cycle: %v", cycle)
	}
}

// findCycle returns a path that closes a cycle, or nil.
func findCycle(edges map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(n string) []string {
		switch state[n] {
		case open:
			i := slices.Index(path, n)
			return append(slices.Clone(path[i:]), n)
		case done:
			return nil
		}
		state[n] = open
		path = append(path, n)
		for _, m := range edges[n] {
			if c := visit(m); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	keys := make([]string, 0, len(edges))
	for k := range edges {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if c := visit(k); c != nil {
			return c
		}
	}
	return nil
}

// session/LOCKS.md is Order as a document: regenerate it with -update.
func TestLocksDoc(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`# The proxy's lock order

Generated from services/proxy/internal/lockorder/order.go (the one place
the lock order is written down) by
` + "`go test ./proxy/internal/lockorder -run TestLocksDoc -update`" + `; do not
edit by hand.

Every mutex of the proxy (the session, the transports around it: ` + "`stdio`" + `,
` + "`streamhttp`" + `, ` + "`ordered`" + `, and what they call into while holding one:
` + "`fleet`" + `, ` + "`edgeauth`" + `) is a ` + "`lockorder.Mutex`" + ` (or ` + "`RWMutex`" + `) of a lock
class. One lock is taken while another is held only in the nestings below,
outer first; every other class is a leaf. A change that takes a lock under
another adds the pair to ` + "`Order`" + `, keeping the order acyclic
(` + "`TestOrderAcyclic`" + `), or is not made.

**Checked.** A build with the tag ` + "`lockcheck`" + ` (what ` + "`make test`" + ` builds,
and the commands the e2e tests run, through cmdtest) records which classes
each goroutine holds and panics when one is taken under another in a
order this table does not give (directly or through other nestings) (` + "`lockorder.Violation`" + `). It checks what
the tests run: the proxy's unit tests, which run sessions concurrently, and
the e2e and adversarial suites through the proxy command.

## Nestings

| outer | inner | where |
|---|---|---|
`)
	for _, n := range Order {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", n.Outer, n.Inner, n.Where)
	}
	b.WriteString("\n## Leaves\n\nTaken and released without taking another:\n\n")
	inner := map[string]bool{}
	for _, n := range Order {
		inner[n.Outer] = true
	}
	for _, c := range Classes {
		if !inner[c.LockClass()] {
			fmt.Fprintf(&b, "- `%s`\n", c.LockClass())
		}
	}
	b.WriteString(`
## Never held across a call out

- ` + "`session.Session.mu`" + ` (and a leader's) is released before the session
  asks its gate (` + "`Gate.View`" + `, which may wait for a verdict), reports to its
  observer (` + "`Listing`" + `, ` + "`Seen`" + `, ` + "`Call`" + `), counts with its meter, or writes to
  the server (` + "`toServer`" + `).
- ` + "`session.Session.pubMu`" + ` is never taken under ` + "`Session.mu`" + `, nor
  ` + "`Session.mu`" + ` under it (neither pair is in the table).
`)
	const path = "../session/LOCKS.md"
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Fatalf("%s is not what Order says: run go test ./proxy/internal/lockorder -run TestLocksDoc -update", path)
	}
}
