package streamhttp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestMonitorFallsBack: a server that keeps no session and does not speak
// 2026-07-28 (the Go SDK server restricted to older versions answers
// server/discover with HTTP 400 and error -32022, listing what it
// supports). A 2026-07-28 client falls back to initialize and then calls
// without a session; the proxy's own listing of the server must fall back
// too, so that those calls are judged against a listing and served.
func TestMonitorFallsBack(t *testing.T) {
	tests := []struct {
		name      string
		supported []string
		json      bool
		want      string // the version the proxy falls back to
	}{
		{"legacy_only_sse", []string{"2025-11-25", "2025-06-18"}, false, "2025-11-25"},
		{"legacy_only_json", []string{"2025-06-18", "2025-03-26"}, true, "2025-06-18"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			r := newCountingRig(t, newMCPServerOpts(&mcp.ServerOptions{SupportedProtocolVersions: tt.supported}),
				mode{name: tt.name, opts: &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: tt.json}, version: "2026-07-28"},
				zerolog.New(&logs))
			via := r.connect(t, r.via)
			if got := text(call(t, via, "echo", map[string]any{"text": "hi"})); got != "hi" {
				t.Fatalf("echo through the proxy: %q\n%s", got, logs.String())
			}
			if n := len(listTools(t, via)); n != 2 {
				t.Fatalf("the proxy served %d tools, want 2", n)
			}
			// The fallback is remembered: later rounds list without asking
			// server/discover again.
			// (A round that finds the same surface is not published again:
			// count the listings the server is asked for.)
			listings := r.ownListings()
			before := r.discovers()
			poll.Eventually(t, 10*time.Second, func() error {
				if n := r.ownListings(); n < listings+2 {
					return fmt.Errorf("%d rounds of the proxy's own listing since, want 2", n-listings)
				}
				return nil
			})
			if after := r.discovers(); after != before {
				t.Errorf("the proxy asked server/discover %d more times after falling back", after-before)
			}
			if strings.Contains(logs.String(), `"level":"warn"`) {
				t.Errorf("warnings:\n%s", logs.String())
			}
			if n := strings.Count(logs.String(), "falling back"); n != 1 || !strings.Contains(logs.String(), `"version":"`+tt.want+`"`) {
				t.Errorf("%d fallbacks logged, want one to %s:\n%s", n, tt.want, logs.String())
			}
		})
	}
}

// countingRig is a rig on Streamable HTTP whose upstream counts the
// server/discover requests it receives.
type countingRig struct {
	*rig
	mu       sync.Mutex
	discover int
	ownLists int // tools/list requests of the proxy's own
}

func (r *countingRig) ownListings() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ownLists
}

func (r *countingRig) discovers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.discover
}

func newCountingRig(t *testing.T, srv *mcp.Server, m mode, log zerolog.Logger) *countingRig {
	t.Helper()
	r := &countingRig{rig: &rig{server: srv, gate: newTofu(), mode: m}}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, m.opts)
	r.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Mcp-Method") == "server/discover" {
			r.mu.Lock()
			r.discover++
			r.mu.Unlock()
		}
		if req.Method == http.MethodPost {
			body, _ := io.ReadAll(req.Body)
			if bytes.Contains(body, []byte(`"method":"tools/list"`)) && bytes.Contains(body, []byte(`"id":"mcpdrift-`)) {
				r.mu.Lock()
				r.ownLists++
				r.mu.Unlock()
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.upstream.Close)
	up := Upstream{ID: "ev", URL: r.upstream.URL + "/mcp", Gate: r.gate, Observer: r.gate, Session: session.Config{Timeout: 5 * time.Second}}
	r.direct = up.URL
	p, err := New(Config{Relist: 100 * time.Millisecond, Log: log}, []Upstream{up})
	if err != nil {
		t.Fatal(err)
	}
	r.p = p
	r.proxy = httptest.NewServer(p)
	t.Cleanup(func() { r.proxy.Close(); p.Close() })
	r.via = r.proxy.URL + "/ev/mcp"
	return r
}

func TestFallBack(t *testing.T) {
	tests := []struct {
		name        string
		from        string
		supported   []string
		wantVersion string
		wantModern  bool
		wantOK      bool
	}{
		{"newest_legacy", "2026-07-28", []string{"2025-06-18", "2025-11-25", "2024-11-05"}, "2025-11-25", false, true},
		{"older_modern_first", "2026-12-01", []string{"2026-07-28", "2025-11-25"}, "2026-07-28", true, true},
		{"newer_modern_ignored", "2026-07-28", []string{"2027-01-01", "2025-03-26"}, "2025-03-26", false, true},
		{"nothing_named", "2026-07-28", nil, defaultLegacyVersion, false, true},
		{"garbage_ignored", "2026-07-28", []string{"latest", "2025-6-18"}, defaultLegacyVersion, false, true},
		{"already_legacy", "2025-06-18", []string{"2025-03-26"}, "2025-06-18", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modern := tt.from >= jsonrpc.ProtocolStateless
			mon := &monitor{modern: modern, version: tt.from, headers: http.Header{}}
			mon.s = session.New(session.Config{}, newTofu(), newTofu(), discard)
			if ok := mon.fallBack(tt.supported); ok != tt.wantOK || mon.version != tt.wantVersion || mon.modern != tt.wantModern {
				t.Fatalf("fallBack = %v, version %s modern %v; want %v, %s %v", ok, mon.version, mon.modern, tt.wantOK, tt.wantVersion, tt.wantModern)
			}
			if ok := tt.wantOK; ok && mon.headers.Get("Mcp-Protocol-Version") != tt.wantVersion {
				t.Fatalf("header %q", mon.headers.Get("Mcp-Protocol-Version"))
			}
		})
	}
}

func TestVersionRefusal(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want []string
		ok   bool
	}{
		{"sdk", `{"jsonrpc":"2.0","id":"mcpdrift-open","error":{"code":-32022,"message":"unsupported protocol version","data":{"supported":["2025-06-18"],"requested":"2026-07-28"}}}`, []string{"2025-06-18"}, true},
		{"no_data", `{"jsonrpc":"2.0","id":"mcpdrift-open","error":{"code":-32022,"message":"unsupported protocol version"}}`, nil, true},
		{"other_code", `{"jsonrpc":"2.0","id":"mcpdrift-open","error":{"code":-32601,"message":"32022"}}`, nil, false},
		{"other_id", `{"jsonrpc":"2.0","id":7,"error":{"code":-32022,"message":"unsupported protocol version"}}`, nil, false},
		{"not_json", `HTTP 400 -32022`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := versionRefusal([]byte(tt.raw))
			if ok != tt.ok || (ok && strings.Join(r.supported, ",") != strings.Join(tt.want, ",")) {
				t.Fatalf("versionRefusal = %+v, %v", r, ok)
			}
		})
	}
}
