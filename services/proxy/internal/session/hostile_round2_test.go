package session

import (
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
