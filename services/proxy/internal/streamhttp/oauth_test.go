package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + u.srv.URL + `","token_endpoint":"` + u.srv.URL + `/token"}`))
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"https://evil.example"}`))
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://client.example/cb?code=c", http.StatusFound)
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

	// Authorization-server discovery at the proxy's origin: the upstream
	// origin's, its issuer checked; the fallback endpoints relayed.
	for path, want := range map[string]int{
		"/.well-known/oauth-authorization-server":        http.StatusOK,
		"/.well-known/openid-configuration/ev/mcp":       http.StatusNotFound,
		"/.well-known/oauth-authorization-server/ev/mcp": http.StatusBadGateway, // its issuer is elsewhere
		"/token?x=1": http.StatusFound,
	} {
		resp, doc := getJSON(t, px+path)
		if resp.StatusCode != want {
			t.Fatalf("%s: %s %v, want %d", path, resp.Status, doc, want)
		}
	}
	if resp, _ := getJSON(t, px+"/token?x=1"); resp.Header.Get("Location") != "http://client.example/cb?code=c" {
		t.Fatalf("/token relayed: Location %q", resp.Header.Get("Location"))
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
		{"duplicate-resource", func(self string) (int, string, string) {
			return 200, "application/json", `{"resource":"https://victim.example/mcp","resource":"` + self + `/mcp"}`
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

// TestOAuthListingAfterLogin: a server that opens a session without a
// token but lists only with one (the client authenticates on its first
// listing): the proxy's own listing, refused at session start, is made
// again with the client's credentials, and the client is served.
func TestOAuthListingAfterLogin(t *testing.T) {
	s := newMCPServer()
	mcpH := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Authorization") != "Bearer good-token" && !opensSession(r) {
			w.Header().Set("WWW-Authenticate", `Bearer scope="mcp"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mcpH.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	// With a session (2025-11-25), and without (the Go SDK's default,
	// 2026-07-28, which this server refuses: the proxy's monitor falls back).
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("version-"+version, func(t *testing.T) {
			px := oauthProxy(t, up.URL+"/mcp")
			var opts *mcp.ClientSessionOptions
			if version != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: px + "/ev/mcp", HTTPClient: &http.Client{Transport: bearer{}}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			if got := text(call(t, cs, "echo", map[string]any{"text": "hi"})); got != "hi" {
				t.Fatalf("echo through the proxy after login: %q", got)
			}
		})
	}
}

// bearer adds the token to every request but initialize's (the client
// logs in after the session opened).
type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && !opensSession(r) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer good-token")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// opensSession reports a POST of initialize or notifications/initialized (its
// body read and put back).
func opensSession(r *http.Request) bool {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return bytes.Contains(b, []byte(`"method":"initialize"`)) || bytes.Contains(b, []byte(`"method":"notifications/initialized"`))
}
