package streamhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// The rig of the tests of the proxy's own reads of a UI: an MCP server
// over Streamable HTTP with one tool whose UI is the resource
// ui://app/view.html, and a proxy in front of it with a session open.

// mcpUpstream is an MCP server over Streamable HTTP (its session "s1"):
// each POSTed message goes to answer with its bytes; every other method
// goes to answer with a zero message. What answer leaves (returning false)
// is answered 405, or 202 for a POST.
func mcpUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, m rpc, body []byte) bool) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			if !answer(w, r, rpc{}, nil) {
				w.WriteHeader(http.StatusMethodNotAllowed)
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m rpc
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		if !answer(w, r, m, body) {
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// appUpstream is the app server: each message goes to answer, which
// answers it itself or leaves it to answerApp by returning false (any
// other method than POST: answered 405).
func appUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, m rpc) bool) *httptest.Server {
	return mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc, _ []byte) bool {
		if answer != nil && answer(w, r, m) {
			return true
		}
		if r.Method != http.MethodPost {
			return false
		}
		answerApp(w, m)
		return true
	})
}

// answerApp answers m as the app server does by default.
func answerApp(w http.ResponseWriter, m rpc) {
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
		writeJSONRPC(w, m.ID, `{"contents":[{"uri":"ui://app/view.html","mimeType":"text/html;profile=mcp-app","text":"<p>notes</p>"}]}`)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

// appProxy is a proxy in front of up with cfg (its log the test's) and the
// sessions' configuration sc, with a session open through it: the
// proxy, the session's endpoint, the headers its requests carry, and the
// gate that records what it publishes.
func appProxy(t *testing.T, up *httptest.Server, cfg Config, sc session.Config) (*Proxy, string, map[string]string, *tofu) {
	g := newTofu()
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t))
	p, err := New(cfg, []Upstream{{ID: "a", URL: up.URL + "/mcp", Gate: g, Observer: g, Session: sc}})
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
	return p, url, h, g
}

// legacyStream puts a proxy (upstream "l") in front of the HTTP+SSE server
// at sseURL, with the sessions' configuration sc, and opens a client's
// event stream through it (for 10 s at most): the gate that records what
// it publishes, the proxy's URL, a reader of the stream, and a function
// that ends the stream (the client leaves). All end with the test.
func legacyStream(t *testing.T, sseURL string, sc session.Config) (*tofu, string, *sseReader, func()) {
	g := newTofu()
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "l", SSEURL: sseURL, Gate: g, Observer: g, Session: sc}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	resp, end := openSSE(t, srv.URL+"/l/sse")
	return g, srv.URL, newSSEReader(resp.Body, 1<<20), end
}

// openSSE opens a client's event stream at url (for 10 s at most) and
// returns the answer and a function that ends it (the client leaves),
// called with the test's end too.
func openSSE(t *testing.T, url string) (*http.Response, func()) {
	ctx, cancel := contextWithTimeout(10 * time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	end := func() { cancel(); resp.Body.Close() }
	t.Cleanup(end)
	return resp, end
}
