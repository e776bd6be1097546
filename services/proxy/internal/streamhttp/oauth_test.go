package streamhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// oauthUpstream is a real MCP server (the Go SDK) that wants a bearer
// token, with its protected-resource metadata (RFC 9728) at prm.
type oauthUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	prm  func(self string) (status int, contentType, body string)
	auth []string // the Authorization headers the MCP endpoint saw
}

func newOAuthUpstream(t *testing.T) *oauthUpstream {
	u := &oauthUpstream{}
	u.prm = func(self string) (int, string, string) {
		return 200, "application/json", `{"resource":"` + self + `/mcp","authorization_servers":["https://as.example"],"scopes_supported":["mcp"]}`
	}
	s := newMCPServer()
	mcpH := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		u.mu.Lock()
		status, ct, body := u.prm(u.srv.URL)
		u.mu.Unlock()
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer good-token" {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+u.srv.URL+`/.well-known/oauth-protected-resource/mcp", scope="mcp"`)
			http.Error(w, `{"error":"invalid_token"}`, http.StatusUnauthorized)
			return
		}
		mcpH.ServeHTTP(w, r)
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

func oauthProxy(t *testing.T, upstreamURL string) string {
	t.Helper()
	gate := newTofu()
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "ev", URL: upstreamURL, Gate: gate, Observer: gate,
		Session: session.Config{Timeout: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return front.URL
}

func getJSON(t *testing.T, url string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	return resp, doc
}

// TestOAuthThroughProxy: a client that connects to the proxy finds
// metadata naming the proxy's URL, is sent to the upstream's origin for
// authorization-server discovery, and its token reaches the upstream
// unchanged.
func TestOAuthThroughProxy(t *testing.T) {
	up := newOAuthUpstream(t)
	px := oauthProxy(t, up.srv.URL+"/mcp")
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`

	// 401: the challenge names the proxy's metadata.
	resp, _ := postRaw(t, px+"/ev/mcp", nil, init)
	want := `resource_metadata="` + px + `/.well-known/oauth-protected-resource/ev/mcp"`
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), want) ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="mcp"`) {
		t.Fatalf("401 through the proxy: %s, WWW-Authenticate %q, want %s", resp.Status, resp.Header.Get("WWW-Authenticate"), want)
	}

	// The metadata: the upstream's, resource rewritten.
	for _, path := range []string{"/.well-known/oauth-protected-resource/ev/mcp", "/.well-known/oauth-protected-resource"} {
		resp, doc := getJSON(t, px+path)
		if resp.StatusCode != http.StatusOK || doc["resource"] != px+"/ev/mcp" || doc["scopes_supported"] == nil ||
			doc["authorization_servers"].([]any)[0] != "https://as.example" {
			t.Fatalf("%s: %s %v", path, resp.Status, doc)
		}
	}

	// Authorization-server discovery at the proxy's origin: to the upstream's.
	for path, to := range map[string]string{
		"/.well-known/oauth-authorization-server":        "/.well-known/oauth-authorization-server",
		"/.well-known/openid-configuration/ev/mcp":       "/.well-known/openid-configuration/mcp",
		"/.well-known/oauth-authorization-server/ev/mcp": "/.well-known/oauth-authorization-server/mcp",
		"/token?x=1": "/token?x=1",
	} {
		resp, _ := getJSON(t, px+path)
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != up.srv.URL+to {
			t.Fatalf("%s: %s to %q, want 307 to %s", path, resp.Status, resp.Header.Get("Location"), up.srv.URL+to)
		}
	}

	// The token, forwarded unchanged.
	resp, body := postRaw(t, px+"/ev/mcp", map[string]string{"Authorization": "Bearer good-token"}, init)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize with the token: %s %s", resp.Status, body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if got := up.auth[len(up.auth)-1]; got != "Bearer good-token" && !strings.HasPrefix(got, "Bearer good-token") {
		t.Fatalf("the upstream saw Authorization %q", got)
	}
}

// TestOAuthMetadataRefused: metadata the proxy would publish for a server
// it cannot vouch for is refused, fail closed (502, coded): a resource
// naming another server, the wrong type, an oversized or broken document;
// a server without metadata gets 404.
func TestOAuthMetadataRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		prm    func(self string) (int, string, string)
		status int
		code   session.Code
	}{
		{"other-resource", func(string) (int, string, string) {
			return 200, "application/json", `{"resource":"https://victim.example/mcp","authorization_servers":["https://as.example"]}`
		}, 502, CodeOAuthMetadata},
		{"other-path", func(self string) (int, string, string) {
			return 200, "application/json", `{"resource":"` + self + `/other"}`
		}, 502, CodeOAuthMetadata},
		{"no-resource", func(string) (int, string, string) { return 200, "application/json", `{"authorization_servers":[]}` }, 502, CodeOAuthMetadata},
		{"bad-as", func(self string) (int, string, string) {
			return 200, "application/json", `{"resource":"` + self + `/mcp","authorization_servers":["javascript:alert(1)"]}`
		}, 502, CodeOAuthMetadata},
		{"html", func(string) (int, string, string) { return 200, "text/html", `<html></html>` }, 502, CodeOAuthMetadata},
		{"huge", func(self string) (int, string, string) {
			return 200, "application/json", `{"resource":"` + self + `/mcp","pad":"` + strings.Repeat("x", maxMetadata) + `"}`
		}, 502, CodeOAuthMetadata},
		{"two-documents", func(self string) (int, string, string) {
			return 200, "application/json", `{"resource":"` + self + `/mcp"}{"resource":"https://victim.example/mcp"}`
		}, 502, CodeOAuthMetadata},
		{"server-error", func(string) (int, string, string) { return 500, "text/plain", "boom" }, 502, CodeOAuthMetadata},
		{"none", func(string) (int, string, string) { return 404, "text/plain", "not found" }, 404, CodeNoMetadata},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newOAuthUpstream(t)
			up.prm = c.prm
			px := oauthProxy(t, up.srv.URL+"/mcp")
			resp, doc := getJSON(t, px+"/.well-known/oauth-protected-resource/ev/mcp")
			data, _ := doc["error"].(map[string]any)["data"].(map[string]any)
			if resp.StatusCode != c.status || data["mcpdrift/code"] != string(c.code) {
				t.Fatalf("%s %v, want %d %s", resp.Status, doc, c.status, c.code)
			}
		})
	}
}

// TestOAuthForeignMetadataURL: a challenge naming metadata on another
// origin is rewritten all the same, and the proxy fetches nothing there.
func TestOAuthForeignMetadataURL(t *testing.T) {
	var fetched bool
	var mu sync.Mutex
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		fetched = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"resource":"https://victim.example/mcp"}`))
	}))
	t.Cleanup(elsewhere.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+elsewhere.URL+`/.well-known/oauth-protected-resource"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(up.Close)
	px := oauthProxy(t, up.URL+"/mcp")
	resp, _ := postRaw(t, px+"/ev/mcp", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if !strings.Contains(resp.Header.Get("WWW-Authenticate"), px+"/.well-known/oauth-protected-resource/ev/mcp") {
		t.Fatalf("WWW-Authenticate %q", resp.Header.Get("WWW-Authenticate"))
	}
	getJSON(t, px+"/.well-known/oauth-protected-resource/ev/mcp")
	mu.Lock()
	defer mu.Unlock()
	if fetched {
		t.Fatal("the proxy fetched metadata from another origin than the server's")
	}
}
