package session

import (
	"strings"
	"testing"
)

// TestClosedServerIsSilent: while a server is open (verified, not
// drifted) what it sends of its own accord reaches the client; once it is
// closed, no notification of any kind and no request of the server's
// does: each is dropped and counted (server_closed), a ping is answered by
// the proxy, any other request refused in the client's stead, and a
// list_changed only makes the proxy re-list.
func TestClosedServerIsSilent(t *testing.T) {
	own := []struct{ name, msg string }{
		{"logging", `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"MARK"}}`},
		{"progress", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"MARK","progress":1}}`},
		{"resource_updated", `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///MARK"}}`},
		{"cancelled", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"MARK"}}`},
		{"unknown_notification", `{"jsonrpc":"2.0","method":"notifications/vendor/MARK","params":{}}`},
		{"elicitation", `{"jsonrpc":"2.0","id":"MARK-e","method":"elicitation/create","params":{"message":"MARK","requestedSchema":{"type":"object"}}}`},
		{"sampling", `{"jsonrpc":"2.0","id":"MARK-s","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"MARK"}}],"maxTokens":1}}`},
		{"ping", `{"jsonrpc":"2.0","id":"MARK-p","method":"ping"}`},
	}
	for _, serial := range []bool{false, true} {
		name := "concurrent"
		if serial {
			name = "serial"
		}
		t.Run(name, func(t *testing.T) {
			r, meter := meteredRig(t, Config{})
			if serial {
				r.io.serial()
			}
			r.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{},"elicitation":{}}}}`)
			r.server(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}`)
			r.client(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			r.server(`{"jsonrpc":"2.0","id":` + r.ownID(-1) + `,"result":{"tools":[` + readTool + `]}}`)
			// Open: everything of its own reaches the client.
			for _, m := range own {
				r.server(strings.ReplaceAll(m.msg, "MARK", "open-"+m.name))
				r.delivered("open-" + m.name)
			}
			if n := meter.Drops(DropServerClosed); n != 0 {
				t.Fatalf("%d drops while open", n)
			}
			// Closed: the server drifted.
			r.gate.mu.Lock()
			r.gate.v.Status, r.gate.v.Serve = "changed", false
			r.gate.mu.Unlock()
			for i, m := range own {
				r.server(strings.ReplaceAll(m.msg, "MARK", "closed-"+m.name))
				if n := meter.Drops(DropServerClosed); n != i+1 {
					t.Fatalf("%s: %d drops, want %d", m.name, n, i+1)
				}
			}
			r.server(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			r.mu.Lock()
			toClient := strings.Join(r.toClient, "\n")
			toServer := strings.Join(r.toServer, "\n")
			r.mu.Unlock()
			if strings.Contains(toClient, "closed-") || strings.Contains(toClient, "list_changed") {
				t.Fatalf("a closed server reached the client:\n%s", toClient)
			}
			if !strings.Contains(toServer, `{"jsonrpc":"2.0","id":"closed-ping-p","result":{}}`) {
				t.Errorf("the ping was not answered by the proxy:\n%s", toServer)
			}
			for _, id := range []string{"closed-elicitation-e", "closed-sampling-s"} {
				if !strings.Contains(toServer, `"id":"`+id+`"`) || !strings.Contains(toServer, "server_closed") {
					t.Errorf("the request %s was not refused in the client's stead:\n%s", id, toServer)
				}
			}
			if last := lastOf(r); !strings.Contains(last, "tools/list") {
				t.Errorf("a closed server's list_changed did not make the proxy re-list: last to the server %s", last)
			}
		})
	}
}
