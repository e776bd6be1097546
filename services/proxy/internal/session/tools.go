package session

import (
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// toolsMemory is what a session remembers of the server's tools against
// its baselines, which calls are decided on (decide): the last complete
// tools listing (its own, or one a following session judged in its
// variant), why it could not be assembled, and whether it drifted from a
// baseline. Its lock is its own, a leaf, taken under the session's or
// alone.
type toolsMemory struct {
	mu        lockorder.Mutex[lockorder.ToolsMemoryMu]
	last      map[string]surface.Digest // the last complete tools listing; nil when none, or it failed
	listErr   string                    // why the last tools listing could not be assembled ("" when it could)
	drifted   bool                      // that listing differed from the baseline ...
	driftBase string                    // ... whose hash was this ("" not judged yet)
	driftSeen string                    // a baseline some listing of this session (or a follower's) differed from
}

// listed remembers a complete tools listing, items by name, to be judged
// against the next baseline asked about.
func (t *toolsMemory) listed(items map[string]surface.Digest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last, t.drifted, t.driftBase, t.listErr = items, false, "", ""
}

// failed remembers that the last tools listing could not be assembled
// (why): no tool can be trusted until one is (listing_invalid).
func (t *toolsMemory) failed(why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last, t.drifted, t.listErr = nil, true, why
}

// rehashed replaces the last listing's items by the same listing hashed
// with other settings (adoptHashing; nil: it cannot be, which is drift),
// to be judged again.
func (t *toolsMemory) rehashed(items map[string]surface.Digest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		return
	}
	t.last, t.driftBase = items, ""
	if items == nil {
		t.drifted = true
	}
}

// sawDrift remembers that a listing (a follower's) differed from the
// baseline whose hash is baseline.
func (t *toolsMemory) sawDrift(baseline string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.driftSeen = baseline
}

// state returns the last listing's items and why it failed.
func (t *toolsMemory) state() (last map[string]surface.Digest, listErr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.listErr
}

// driftedFrom reports whether the last complete tools listing differs from
// the baseline in v, or any listing since that baseline did, judging it
// when it is new or the baseline moved (an approval) since it was last
// judged. A listing that could not be read counts as drift.
func (t *toolsMemory) driftedFrom(v View, known bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if known && v.Items != nil && t.last != nil && v.BaselineHash != t.driftBase {
		t.drifted, t.driftBase = !sameTools(t.last, v), v.BaselineHash
		if t.drifted {
			t.driftSeen = v.BaselineHash
		}
	}
	if known && v.BaselineHash != "" && v.BaselineHash == t.driftSeen {
		// Drift never passes by itself: a later listing that matches the
		// baseline again (the server showing the proxy one surface and an
		// agent another) does not reopen what one listing closed. A new
		// baseline (an approval) does.
		return true
	}
	return t.drifted
}

// sameTools reports whether tools are the baseline's tools in v, each
// with its hash.
func sameTools(tools map[string]surface.Digest, v View) bool {
	n := 0
	for key := range v.Items {
		if key.Kind == surface.KindTool {
			n++
		}
	}
	if n != len(tools) {
		return false
	}
	for name, h := range tools {
		if b, ok := v.Items[ItemKey{surface.KindTool, name}]; !ok || b != h {
			return false
		}
	}
	return true
}
