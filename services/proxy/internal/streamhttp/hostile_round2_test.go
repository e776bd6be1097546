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
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// TestServerRequestOnOwnStream: a server may send requests on the stream
// of a POST's answer before the response (roots/list while it lists its
// tools, a ping). On the answer to a request of the proxy's own no agent
// reads them, and none answers: the server, waiting, never answered the
// proxy's listing, so the session's surface was never published and every
// call waited for a verdict that could not come. The proxy answers them in
// the agent's stead (a ping with its own empty result, any other request
// with an error, request_unroutable), and counts them.
func TestServerRequestOnOwnStream(t *testing.T) {
	var mu sync.Mutex
	answers := map[string]string{} // the answers the upstream got to its requests, by id
	answered := make(chan struct{}, 4)
	var lists, pings atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch {
		case m.Method == "initialize":
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"h","version":"1"}}`)
		case m.Method == "tools/list":
			// The server asks its client for roots (and pings it) before it
			// lists its tools, and waits for both answers.
			n := lists.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-%d-roots\",\"method\":\"roots/list\"}\n\n", n)
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-%d-ping\",\"method\":\"ping\"}\n\n", n)
			http.NewResponseController(w).Flush()
			for range 2 {
				select {
				case <-answered:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}}\n\n", m.ID)
		case m.Method == "ping" && pings.Add(1) == 1:
			// The server announces a change: the proxy lists it again, the
			// server open now.
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", m.ID)
		case m.Method == "ping":
			writeJSONRPC(w, m.ID, `{}`)
		case m.Method == "" && m.ID != nil:
			mu.Lock()
			answers[strings.Trim(string(m.ID), `"`)] = string(body)
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			answered <- struct{}{}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	g := newTofu()
	meter := &sessiontest.Meter[session.Code]{}
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "a", URL: up.URL + "/mcp", Gate: g, Observer: g,
		Session: session.Config{Timeout: 5 * time.Second, Meter: meter}}})
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
	// The proxy's own listing completes: the server got its answers.
	poll.Eventually(t, 10*time.Second, g.approvedOnce)
	check := func(n int) {
		t.Helper()
		var roots, ping string
		poll.Eventually(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			roots, ping = answers[fmt.Sprintf("srv-%d-roots", n)], answers[fmt.Sprintf("srv-%d-ping", n)]
			if roots == "" || ping == "" {
				return fmt.Errorf("listing %d: the server's requests unanswered (roots %q, ping %q)", n, roots, ping)
			}
			return nil
		})
		if !strings.Contains(roots, `"error"`) || !strings.Contains(roots, `"mcpdrift/code":"`+string(session.DropUnroutable)+`"`) {
			t.Errorf("listing %d: the server's roots/list was answered %q, want an error coded %s", n, roots, session.DropUnroutable)
		}
		if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":"srv-%d-ping","result":{}}`, n); ping != want {
			t.Errorf("listing %d: the server's ping was answered %q, want %q", n, ping, want)
		}
		if got := meter.Drops(session.DropUnroutable); got != 2*n {
			t.Errorf("%d drops counted %s, want %d: %v", got, session.DropUnroutable, 2*n, meter)
		}
	}
	check(1)
	// The server, open now, announces a change: on the proxy's re-listing
	// its requests are answered the same.
	post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	check(2)
	// And the session serves.
	resp, body := post(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if resp.StatusCode/100 != 2 || strings.Contains(body, "mcpdrift/code") {
		t.Fatalf("a ping after the listing: HTTP %d %s", resp.StatusCode, body)
	}
}
