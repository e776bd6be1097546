package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// ownLists counts the proxy's own requests of method sent so far.
func (r *rig) ownLists(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.toServer {
		if strings.Contains(m, `"id":"mcpdrift-`) && strings.Contains(m, `"method":"`+method+`"`) {
			n++
		}
	}
	return n
}

// A burst of list_changed on a serial transport: one re-listing in flight
// and one owed, one list_changed delivered, the rest coalesced and
// counted; decisions wait for the last re-listing, then go on.
func TestListChangedBurstCoalesced(t *testing.T) {
	r := newRig(t)
	meter := &sessiontest.Meter[Code]{}
	r.newSession(Config{Server: "fs", Meter: meter, Timeout: time.Minute}, r.gate)
	r.io.serial()
	r.gate.v, r.gate.ok = baseline(readTool), true
	const burst = 1000
	for range burst {
		r.server(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	}
	if n := r.ownLists("tools/list"); n != 1 {
		t.Fatalf("%d re-listings in flight for %d list_changed, want 1", n, burst)
	}
	if n := meter.Drops(DropCoalesced); n != burst-1 {
		t.Fatalf("%d list_changed coalesced, want %d", n, burst-1)
	}
	r.server(`{"jsonrpc":"2.0","id":` + r.ownID(0) + `,"result":{"tools":[` + readTool + `]}}`)
	if n := r.ownLists("tools/list"); n != 2 {
		t.Fatalf("%d re-listings after the first was answered, want the one owed: 2", n)
	}
	r.mu.Lock()
	early := len(r.toClient)
	r.mu.Unlock()
	if early != 0 {
		t.Fatalf("the change reached the client before the re-listing owed was done: %q", r.toClient)
	}
	r.server(`{"jsonrpc":"2.0","id":` + r.ownID(1) + `,"result":{"tools":[` + readTool + `]}}`)
	r.delivered("list_changed")
	if n := r.ownLists("tools/list"); n != 2 {
		t.Fatalf("%d re-listings, want 2", n)
	}
	r.client(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read"}}`)
	r.mu.Lock()
	last := r.toServer[len(r.toServer)-1]
	r.mu.Unlock()
	if !strings.Contains(last, `"tools/call"`) {
		t.Fatalf("the call after the burst was not forwarded: %s / %v", last, r.toClient)
	}
	if err := r.io.q.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A re-listing the transport's queue to the server cannot take: counted,
// and the server's tools are distrusted (calls refused with a code) until
// the proxy has listed them again, which it does once the queue drained.
func TestRelistDroppedFailsClosed(t *testing.T) {
	r := newRig(t)
	meter := &sessiontest.Meter[Code]{}
	r.newSession(Config{Server: "fs", Meter: meter}, r.gate)
	r.gate.v, r.gate.ok = baseline(readTool), true
	r.s.init.set([]byte(`{}`))
	r.s.declared = nil
	full := true
	queue := r.s.send
	r.s.send = func(b []byte) error {
		if full {
			return ErrServerBacklog
		}
		return queue(b)
	}
	// A first listing, so that there is a surface to distrust.
	r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.server(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]}}`)
	r.server(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	if n := meter.Drops(DropServerBacklog); n != 1 {
		t.Fatalf("%d dropped re-listings counted, want 1 (%s)", n, meter)
	}
	r.client(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read"}}`)
	if got := r.lastClient(); !strings.Contains(got, string(RefuseListingPending)) && !strings.Contains(got, string(RefuseListingInvalid)) {
		t.Fatalf("a call after a dropped re-listing: %s", got)
	}
	// The queue drained: the proxy lists again, and its listing is judged.
	full = false
	r.s.Drained()
	if n := r.ownLists("tools/list"); n != 1 {
		t.Fatalf("%d re-listings after the queue drained, want 1", n)
	}
	r.server(`{"jsonrpc":"2.0","id":` + r.ownID(0) + `,"result":{"tools":[` + readTool + `]}}`)
	r.client(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read"}}`)
	poll.Eventually(t, 10*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if last := r.toServer[len(r.toServer)-1]; !strings.Contains(last, `"id":4`) {
			return fmt.Errorf("the call after the re-listing was not forwarded: %s", last)
		}
		return nil
	})
}

// What a serial transport may shed past its backlog bound: notifications
// decided at once and the server's requests, never a response or a
// list_changed held for the re-listing.
func TestShedOnlyWhatNobodyWaitsFor(t *testing.T) {
	r := newRig(t)
	meter := &sessiontest.Meter[Code]{}
	r.newSession(Config{Server: "fs", Meter: meter, Timeout: time.Minute}, r.gate)
	r.gate.v, r.gate.ok = baseline(readTool), true
	ctx := t.Context()
	cases := []struct {
		msg  string
		shed bool
	}{
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`, true},
		{`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`, true},
		{`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`, false},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, false},
	}
	r.client(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	for _, c := range cases {
		if got := r.s.Server(ctx, []byte(c.msg)).Shed(); got != c.shed {
			t.Errorf("%s: shed %v, want %v", c.msg, got, c.shed)
		}
	}
	if n := meter.Drops(DropBacklog); n != 2 {
		t.Errorf("%d shed counted, want 2 (%s)", n, meter)
	}
	// The shed request is answered in the client's stead: the server does
	// not wait for an answer that cannot come.
	answered := false
	for _, m := range r.toServer {
		answered = answered || strings.Contains(m, `"id":"s1"`) && strings.Contains(m, `"error"`) && strings.Contains(m, string(DropBacklog))
	}
	if !answered {
		t.Errorf("the shed request got no answer; the server got %q", r.toServer)
	}
}
