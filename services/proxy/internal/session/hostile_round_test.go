package session

import (
	"strings"
	"testing"
	"time"
)

// TestAppsContinueAfterEnd: a session told of an end that did not happen
// (the upstream refused the client's DELETE: Continue) goes on
// publishing. The round of the proxy's own reads under way at the end,
// whose answers the end let go, is made again and publishes; an answer of
// the round let go publishes nothing. Without Continue the round never
// ends, and no later listing of the session is ever published.
func TestAppsContinueAfterEnd(t *testing.T) {
	r := newRig(t)
	r.s.cfg.Timeout = time.Hour // the read's bound is not what ends it
	r.gate.v, r.gate.ok = appsBaseline(t, viewTool), true
	r.openListings([]string{viewTool})
	r.answerOwn("resources/list", `{"resources":[`+appResource+`]}`)
	first, _ := r.ownRequest("resources/read")
	r.s.End()
	r.server(`{"jsonrpc":"2.0","id":` + first + `,"result":` + appRead(approvedApp) + `}`) // let go: the session ended
	r.s.Continue()
	again, _ := r.ownRequest("resources/read")
	if again == first {
		t.Fatalf("no read made again after Continue (last %s)", first)
	}
	r.server(`{"jsonrpc":"2.0","id":` + first + `,"result":` + appRead(swappedApp) + `}`) // of the round let go
	r.server(`{"jsonrpc":"2.0","id":` + again + `,"result":` + appRead(approvedApp) + `}`)
	if pub := r.published(1); pub[0].Hash != r.gate.v.BaselineHash {
		t.Fatalf("published %s, want the baseline %s", pub[0].Hash, r.gate.v.BaselineHash)
	}
	if c := r.captureAt(0); strings.Contains(c, "evil.example") {
		t.Fatalf("an answer of the round let go was published: %s", c)
	}
	// A session never ended: Continue does nothing.
	r.s.Continue()
	r.obs.mu.Lock()
	n := len(r.obs.whole)
	r.obs.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d whole listings, want 1", n)
	}
}
