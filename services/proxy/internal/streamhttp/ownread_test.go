package streamhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestOwnReadRefused: the proxy's own read of a UI resource that the
// upstream refuses at the HTTP level is told to the session at once
// (Session.OwnFailed), not left to the read's bound (four times the
// decision bound of 30 s here, beyond the test).
//
//   - Refused otherwise than 404: the read is made once more, and refused
//     again gets its placeholder at once, so the capture published is no
//     surface and the server is held (fail closed: a server that refused
//     the proxy's own gets alone would otherwise keep its surface from
//     being published).
//   - Refused with 404 (the upstream no longer knows the session, as after
//     the client's DELETE): the session ended, and the proxy forgets it, as
//     when the upstream answers a client's request so: the agent's next
//     request is answered 404 by the proxy itself, and the session
//     publishes nothing for the gets it had under way (Session.End; the
//     session's tests hold that part).
func TestOwnReadRefused(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
	}{{"server_error", http.StatusInternalServerError}, {"session_unknown", http.StatusNotFound}} {
		t.Run(tt.name, func(t *testing.T) {
			var reads atomic.Int64
			var mu sync.Mutex
			var agentIDs []string // the ids of the agent's requests the upstream got
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					w.WriteHeader(http.StatusMethodNotAllowed)
					return
				}
				body, _ := io.ReadAll(r.Body)
				var m rpc
				_ = json.Unmarshal(body, &m)
				if m.ID != nil && !strings.HasPrefix(string(m.ID), `"mcpdrift-`) {
					mu.Lock()
					agentIDs = append(agentIDs, string(m.ID))
					mu.Unlock()
				}
				w.Header().Set("Mcp-Session-Id", "s1")
				switch m.Method {
				case "initialize":
					writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"resources":{}},"serverInfo":{"name":"app","version":"1"}}`)
				case "tools/list":
					writeJSONRPC(w, m.ID, `{"tools":[{"name":"view","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"ui://app/view.html"}}}]}`)
				case "resources/templates/list":
					writeJSONRPC(w, m.ID, `{"resourceTemplates":[]}`)
				case "resources/list":
					writeJSONRPC(w, m.ID, `{"resources":[{"uri":"ui://app/view.html","name":"view","mimeType":"text/html;profile=mcp-app"}]}`)
				case "resources/read":
					reads.Add(1)
					http.Error(w, "refused", tt.status)
				default:
					w.WriteHeader(http.StatusAccepted)
				}
			}))
			t.Cleanup(up.Close)
			g := newTofu()
			p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "a", URL: up.URL + "/mcp", Gate: g, Observer: g,
				Session: session.Config{Timeout: 30 * time.Second}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(func() { srv.Close(); p.Close() })
			url := srv.URL + "/a/mcp"
			h := map[string]string{"Mcp-Session-Id": "s1", "Mcp-Protocol-Version": "2025-06-18"}
			if resp, body := post(t, url, nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`); resp.StatusCode != http.StatusOK {
				t.Fatalf("initialize: HTTP %d %s", resp.StatusCode, body)
			}
			post(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			if tt.status != http.StatusNotFound {
				poll.Eventually(t, 10*time.Second, func() error {
					g.mu.Lock()
					defer g.mu.Unlock()
					if len(g.listings) == 0 {
						return fmt.Errorf("nothing published after %d refused reads", reads.Load())
					}
					return nil
				})
				g.mu.Lock()
				defer g.mu.Unlock()
				if l := g.listings[0]; !strings.Contains(l, "mcpdrift/unreadable") {
					t.Fatalf("published a capture without the placeholder of the refused read:\n%s", l)
				}
				if n := reads.Load(); n != 2 {
					t.Fatalf("the upstream got %d reads, want the read and the one made again", n)
				}
				return
			}
			// Until the proxy has forgotten the session the agent's requests
			// pass; each has an id of its own, and the one answered 404
			// must not have reached the upstream.
			id := 100
			var body string
			poll.Eventually(t, 10*time.Second, func() error {
				id++
				var resp *http.Response
				resp, body = post(t, url, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id))
				if resp.StatusCode != http.StatusNotFound {
					return fmt.Errorf("the agent's request after the refused read: HTTP %d %s, want the proxy's 404", resp.StatusCode, body)
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			for _, got := range agentIDs {
				if got == fmt.Sprint(id) {
					t.Fatalf("the agent's request answered 404 reached the upstream (the proxy answered %s)", body)
				}
			}
			if !strings.Contains(body, `"session_unknown"`) {
				t.Fatalf("the agent's request on the forgotten session: %s, want the proxy's session_unknown", body)
			}
		})
	}
}
