package session

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestUnreadableBOMAnswerTied: an answer a server sends behind a UTF-8
// byte order mark is read by no JSON-RPC client (JSON.parse, Python's
// json and Go's encoding/json all refuse it) and is refused by the strict
// parser; the request it answers gets a coded error, as any unreadable
// answer's does. Without it the mark hid the answer's id from the lenient
// reading too, and the request was never answered.
func TestUnreadableBOMAnswerTied(t *testing.T) {
	r, m := meteredRig(t, Config{})
	r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.server("\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]}}`)
	if len(r.toClient) != 1 {
		t.Fatalf("the client got %q, want one error for id 1", r.toClient)
	}
	if got := r.lastClient(); !strings.Contains(got, `"id":1,"error"`) || !strings.Contains(got, `"mcpdrift/code":"`+string(DropUnreadable)+`"`) {
		t.Fatalf("the client got %s", got)
	}
	if m.Drops(DropUnreadable) != 1 {
		t.Errorf("drops %v", m)
	}
}

// TestCursorPageAloneIsNoListing: a client that asks for a later page of a
// listing without its first in this session (a retry of the page, a
// cursor kept from before) is served that page judged item by item, and
// the page is no listing of the server's: it is not published as the
// server's whole surface (the pipeline would read the first pages' items
// as removed, a drift nobody made), nor taken for the session's last tools
// listing (its calls of the first pages' tools refused as drifted).
func TestCursorPageAloneIsNoListing(t *testing.T) {
	r, _ := meteredRig(t, Config{})
	r.gate.v = baseline(readTool, writeTool)
	r.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}`)
	r.server(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.answerOwn("tools/list", `{"tools":[`+readTool+`],"nextCursor":"p2"}`)
	r.answerOwn("tools/list", `{"tools":[`+writeTool+`]}`)
	if pub := r.published(1); pub[0].Hash != r.gate.v.BaselineHash {
		t.Fatalf("published %s, want the baseline %s", pub[0].Hash, r.gate.v.BaselineHash)
	}
	for i, cursor := range []string{"p2", "p2"} { // the page, and its retry
		id := 5 + i
		r.client(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{"cursor":%q}}`, id, cursor))
		r.server(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"tools":[%s]}}`, id, writeTool))
		if got := r.lastClient(); !strings.Contains(got, `"name":"write"`) {
			t.Fatalf("the page: %s", got)
		}
	}
	r.obs.mu.Lock()
	whole := append([]Listed(nil), r.obs.whole...)
	r.obs.mu.Unlock()
	if len(whole) != 1 {
		t.Fatalf("%d whole surfaces published, want the one; the last %s (baseline %s)", len(whole), whole[len(whole)-1].Hash, r.gate.v.BaselineHash)
	}
	n := len(r.toServer)
	r.client(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read"}}`)
	if len(r.toServer) != n+1 {
		t.Fatalf("a call of the first page's tool after the page alone was refused: %s", r.lastClient())
	}
}

// TestHostilePaginationRound2: more of a hostile server's cursors on the
// proxy's own listing. A cycle of two cursors stops at the first repeat,
// like one cursor repeated; a cursor of a mebibyte is followed as given;
// a nextCursor of 5, which no client reads as a cursor, makes the listing
// invalid; a null or empty one ends the listing (clients that read it stop
// there; the TypeScript SDK refuses a null).
func TestHostilePaginationRound2(t *testing.T) {
	huge := strings.Repeat("h", 1<<20)
	tests := []struct {
		name      string
		page      func(n int) string
		wantPages int
		why       string // in the refusal of a call after it ("" : the call is forwarded)
	}{
		{"cycle", func(n int) string {
			return fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":"%c"}`, n, "ab"[n%2])
		}, 3, `gave the cursor \"b\" a second time`},
		{"huge", func(n int) string {
			if n == 1 {
				return `{"tools":[{"name":"t1","inputSchema":{"type":"object"}}],"nextCursor":"` + huge + `"}`
			}
			return `{"tools":[{"name":"t2","inputSchema":{"type":"object"}}]}`
		}, 2, ""},
		{"number", func(n int) string {
			return fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":5}`, n)
		}, 1, "listing_invalid"},
		{"null", func(n int) string {
			return fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":null}`, n)
		}, 1, ""},
		{"empty", func(n int) string {
			return fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":""}`, n)
		}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.s.cfg.MaxPages = 5
			t1, t2 := `{"name":"t1","inputSchema":{"type":"object"}}`, `{"name":"t2","inputSchema":{"type":"object"}}`
			r.gate.v, r.gate.ok = baseline(t1, t2), true
			if tt.wantPages == 1 {
				r.gate.v = baseline(t1)
			}
			r.server(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			var cursors []string
			if n := r.ownListing(100, func(n int) string {
				if n > 1 {
					var req struct{ Params struct{ Cursor string } }
					_ = json.Unmarshal([]byte(r.toServer[len(r.toServer)-1]), &req)
					cursors = append(cursors, req.Params.Cursor)
				}
				return tt.page(n)
			}); n != tt.wantPages {
				t.Fatalf("the proxy followed %d pages, want %d", n, tt.wantPages)
			}
			if tt.name == "huge" && (len(cursors) != 1 || cursors[0] != huge) {
				t.Fatalf("the huge cursor was not sent as given (%d cursors)", len(cursors))
			}
			n := len(r.toServer)
			r.client(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t1"}}`)
			switch {
			case tt.why == "" && len(r.toServer) != n+1:
				t.Fatalf("a call after the listing was refused: %s", r.lastClient())
			case tt.why != "" && (len(r.toServer) != n || !strings.Contains(r.lastClient(), tt.why)):
				t.Fatalf("a call after the hostile listing: %s, want refused with %s", r.lastClient(), tt.why)
			}
		})
	}
}
