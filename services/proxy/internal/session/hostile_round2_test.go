package session

import (
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
