package session

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// TestRepliesHaveShapes: every code the session answers a JSON-RPC error
// with has its JSON-RPC error code in the registry, and Reply writes it
// there, the code in data, the id echoed; every refusal of a tools/call
// is a tool error there.
func TestRepliesHaveShapes(t *testing.T) {
	replied := []Code{InvalidMessage, MessageTooLarge, DropUnreadable, DropAmbiguous, DropFraming, DropServerClosed,
		RefuseServerChanged, RefuseServerPending, RefuseServerQuarantined, RefuseServerUnknown, RefusePromptNotApproved,
		RefuseResourceNotApproved, RefuseListingInvalid, RefuseListingPending, RefuseAmbiguous}
	for _, code := range replied {
		e, ok := coded.Lookup(string(code))
		if !ok || e.RPC == 0 {
			t.Errorf("%s: the registry gives no JSON-RPC error code (%+v, %v)", code, e, ok)
			continue
		}
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int               `json:"code"`
				Message string            `json:"message"`
				Data    map[string]string `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(Reply([]byte(`"a-1"`), code, "why"), &m); err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		if string(m.ID) != `"a-1"` || m.Error.Code != e.RPC || m.Error.Message != "why" || m.Error.Data["mcpdrift/code"] != string(code) {
			t.Errorf("%s: Reply wrote %+v", code, m)
		}
	}
	for _, code := range RefusalCodes {
		if e, ok := coded.Lookup(string(code)); !ok || !e.Tool {
			t.Errorf("%s refuses tools/call: the registry must say it is answered with a tool error (%+v)", code, e)
		}
	}
	for _, code := range []Code{InvalidMessage, MessageTooLarge} {
		if HTTPStatus(code)/100 != 4 {
			t.Errorf("%s: HTTP %d, want a client error", code, HTTPStatus(code))
		}
	}
	if got := string(Unreadable(errors.New("x"))); got != `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"mcpdrift proxy: unreadable JSON-RPC message: x","data":{"mcpdrift/code":"invalid_message"}}}` {
		t.Errorf("Unreadable: %s", got)
	}
}
