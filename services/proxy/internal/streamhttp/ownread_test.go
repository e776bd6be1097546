package streamhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestOwnReadLostIsThisSessions: the proxy's own read of a UI resource that
// the upstream refuses at the HTTP level (404: it no longer knows the
// session, as after the client's DELETE) is this session's failure alone.
// Nothing is published for it (before, a placeholder was, once the read's
// bound passed, and the server became "changed" for every agent), and the
// session's next listing reads the UI again and publishes the whole
// surface. The read's bound (four times the decision bound of 30 s) is
// beyond the test: only the proxy's being told of the failure
// (Session.OwnFailed) can end the first round in time.
func TestOwnReadLostIsThisSessions(t *testing.T) {
	const ui = `{"uri":"ui://app/view.html","name":"view","mimeType":"text/html;profile=mcp-app"}`
	var reads atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m rpc
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch m.Method {
		case "initialize":
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{},"resources":{}},"serverInfo":{"name":"app","version":"1"}}`)
		case "tools/list":
			writeJSONRPC(w, m.ID, `{"tools":[{"name":"view","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"ui://app/view.html"}}}]}`)
		case "resources/templates/list":
			writeJSONRPC(w, m.ID, `{"resourceTemplates":[]}`)
		case "resources/list":
			writeJSONRPC(w, m.ID, `{"resources":[`+ui+`]}`)
		case "resources/read":
			if reads.Add(1) == 1 {
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			writeJSONRPC(w, m.ID, `{"contents":[{"uri":"ui://app/view.html","mimeType":"text/html;profile=mcp-app","text":"<p>notes</p>"}]}`)
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
	poll.Eventually(t, 10*time.Second, func() error {
		if reads.Load() == 0 {
			return fmt.Errorf("the proxy has not read the UI")
		}
		return nil
	})
	// The agent lists the resources: the proxy reads the UI again.
	post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`)
	poll.Eventually(t, 10*time.Second, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.listings) == 0 {
			return fmt.Errorf("nothing published after %d reads", reads.Load())
		}
		return nil
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.listings {
		if strings.Contains(l, "mcpdrift/unreadable") || !strings.Contains(l, "<p>notes</p>") {
			t.Fatalf("published a capture without the UI's contents:\n%s", l)
		}
	}
}
