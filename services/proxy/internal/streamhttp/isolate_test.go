package streamhttp

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// The tests in this file put two real upstreams (the Go SDK's server)
// behind one proxy, so that they share its origin, and play each against
// the other as a hostile server would: whatever per-origin state one of
// them leaves with a client (cookies, authentication, the headers a
// browser keeps for the origin) must never reach the other, and neither
// may use it to reach the other's clients (isolate.go).

// originUpstream is a real MCP server whose tool "who" answers its name,
// wrapped so that every answer carries the headers extra sets, and which
// records what reached it.
type originUpstream struct {
	name  string
	srv   *httptest.Server
	extra func(w http.ResponseWriter, r *http.Request) bool // true: answered

	mu      sync.Mutex
	hits    int      // requests to its MCP endpoint
	cookies []string // Cookie of each request
	auths   []string // Authorization of each request
	sids    []string // Mcp-Session-Id of each request
}

func newOriginUpstream(t *testing.T, name string, opts *mcp.StreamableHTTPOptions, sopts *mcp.ServerOptions, extra func(w http.ResponseWriter, r *http.Request) bool) *originUpstream {
	t.Helper()
	u := &originUpstream{name: name, extra: extra}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, sopts)
	mcp.AddTool(s, &mcp.Tool{Name: "who", Description: "Say which server this is."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
	})
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
	route := "/mcp"
	if opts == nil { // HTTP+SSE (2024-11-05): the stream and the messages at /sse
		h, route = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil), "/sse"
	}
	mux := http.NewServeMux()
	mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits++
		u.cookies = append(u.cookies, r.Header.Values("Cookie")...)
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.sids = append(u.sids, r.Header.Get("Mcp-Session-Id"))
		u.mu.Unlock()
		if u.extra != nil && u.extra(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server/mcp", func(w http.ResponseWriter, r *http.Request) {
		if u.extra != nil && u.extra(w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + u.srv.URL + `"}`))
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

// seen returns what reached the upstream.
func (u *originUpstream) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits
}

func (u *originUpstream) seen() (cookies, auths, sids []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.cookies), slices.Clone(u.auths), slices.Clone(u.sids)
}

// strips counts Config.Stripped by class.
type strips struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *strips) count(class string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[class]++
}

func (s *strips) get(class string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[class]
}

// twoUpstreams is one proxy in front of upstreams a and b.
func twoUpstreams(t *testing.T, a, b *originUpstream) (string, *strips) {
	return twoUpstreamsMode(t, a, b, false)
}

// twoUpstreamsMode is twoUpstreams, with upstreams on HTTP+SSE when sse.
func twoUpstreamsMode(t *testing.T, a, b *originUpstream, sse bool) (string, *strips) {
	t.Helper()
	st := &strips{}
	var ups []Upstream
	for _, u := range []*originUpstream{a, b} {
		gate := newTofu()
		up := Upstream{ID: u.name, URL: u.srv.URL + "/mcp", Gate: gate, Observer: gate, Session: session.Config{Timeout: 5 * time.Second}}
		if sse {
			up.URL, up.SSEURL = "", u.srv.URL+"/sse"
		}
		ups = append(ups, up)
	}
	p, err := New(Config{Relist: 200 * time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t)), Stripped: st.count}, ups)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return front.URL, st
}

// perServerToken is a client's transport that sends each server behind
// the proxy a token of its own, as an MCP client keeps one per server URL.
type perServerToken struct{ next http.RoundTripper }

func (p perServerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	r.Header.Set("Authorization", "Bearer token-for-"+id)
	return p.next.RoundTrip(r)
}

func connectVia(t *testing.T, endpoint, version string, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}
	if strings.HasSuffix(endpoint, "/sse") {
		tr = &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: hc}
	}
	// The SSE transport's stream lives as long as Connect's context: the
	// session's own lifetime bounds it (closed at cleanup).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestUpstreamsIsolated: two upstreams behind one proxy, each setting a
// cookie on every answer (one also planting a cookie under the other's
// scope), reached by one client with a cookie jar (a browser's) and a
// token per server. Each upstream gets back its own cookie, and never the
// other's, a planted one or a cookie of the proxy's whole origin; nor the
// other's token, on the client's requests or the proxy's own; and a client
// whose jar ignores paths (it sends every cookie of the origin) changes
// nothing.
func TestUpstreamsIsolated(t *testing.T) {
	for _, m := range []mode{modes[0], modes[1], modes[3], modes[5]} {
		t.Run(m.name, func(t *testing.T) {
			route := "mcp"
			if m.opts == nil {
				route = "sse"
			}
			cookies := func(value string, more ...string) func(w http.ResponseWriter, r *http.Request) bool {
				return func(w http.ResponseWriter, _ *http.Request) bool {
					w.Header().Add("Set-Cookie", "sticky="+value+"; Path=/; HttpOnly")
					for _, c := range more {
						w.Header().Add("Set-Cookie", c)
					}
					return false
				}
			}
			a := newOriginUpstream(t, "a", m.opts, nil, cookies("A-secret", cookiePrefix("b")+"sticky=planted-by-a; Path=/b"))
			b := newOriginUpstream(t, "b", m.opts, nil, cookies("B-secret"))
			px, st := twoUpstreamsMode(t, a, b, m.opts == nil)

			jar, err := cookiejar.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			origin, _ := url.Parse(px + "/")
			jar.SetCookies(origin, []*http.Cookie{{Name: "tracker", Value: "origin-wide", Path: "/"}})
			hc := &http.Client{Jar: jar, Transport: perServerToken{http.DefaultTransport}}
			ca := connectVia(t, px+"/a/"+route, m.version, hc)
			cb := connectVia(t, px+"/b/"+route, m.version, hc)
			for range 2 {
				if got := text(call(t, ca, "who", map[string]any{})); got != "a" {
					t.Fatalf("a answered %q", got)
				}
				if got := text(call(t, cb, "who", map[string]any{})); got != "b" {
					t.Fatalf("b answered %q", got)
				}
			}

			// A client whose jar ignores paths sends every cookie of the
			// origin everywhere: a's to b.
			au, _ := url.Parse(px + "/a/" + route)
			var all []string
			for _, c := range jar.Cookies(au) {
				all = append(all, c.String())
			}
			if len(all) < 2 {
				t.Fatalf("the jar holds %q for a, want a's cookie and the origin's", all)
			}
			before := b.requests()
			if m.opts == nil {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, px+"/b/sse", nil)
				req.Header.Set("Cookie", strings.Join(all, "; "))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				cancel()
				resp.Body.Close()
			} else {
				postRaw(t, px+"/b/mcp", map[string]string{"Cookie": strings.Join(all, "; ")},
					`{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"naive","version":"1"}}}`)
			}
			if b.requests() == before {
				t.Fatal("the naive client's request did not reach b")
			}

			// a's planted cookie is a's own: it goes back to a, never to b.
			for _, c := range []struct {
				u   *originUpstream
				own string
				bad []string
			}{{a, "A-secret", []string{"B-secret", "tracker", "origin-wide"}}, {b, "B-secret", []string{"A-secret", "planted", "tracker", "origin-wide", "mcpdrift."}}} {
				cs, auths, _ := c.u.seen()
				own := false
				for _, h := range cs {
					for _, bad := range c.bad {
						if strings.Contains(h, bad) {
							t.Errorf("%s got Cookie %q, which holds %q", c.u.name, h, bad)
						}
					}
					own = own || slices.Contains(strings.Split(h, "; "), "sticky="+c.own)
				}
				if !own {
					t.Errorf("%s never got its own cookie back (Cookie headers %q)", c.u.name, cs)
				}
				for _, h := range auths {
					if h != "" && h != "Bearer token-for-"+c.u.name {
						t.Errorf("%s got Authorization %q", c.u.name, h)
					}
				}
			}
			// The client keeps each cookie under its upstream's scope only.
			bu, _ := url.Parse(px + "/b/" + route)
			for _, c := range jar.Cookies(bu) {
				if strings.Contains(c.Value, "A-secret") || strings.Contains(c.Value, "planted") {
					t.Errorf("the client sends b's routes a's cookie %s", c)
				}
			}
			if st.get(StripSetCookieScoped) == 0 || st.get(StripCookieForeign) == 0 {
				t.Errorf("scoped %d Set-Cookie and dropped %d foreign cookies, want both counted", st.get(StripSetCookieScoped), st.get(StripCookieForeign))
			}
		})
	}
}

// originWide are headers an upstream could use to leave state with a
// client for the proxy's whole origin, or to have its answers kept.
var originWide = map[string]string{
	"Alt-Svc":                          `h2="attacker.example:443"; ma=86400`,
	"Strict-Transport-Security":        "max-age=31536000; includeSubDomains",
	"Clear-Site-Data":                  `"cookies", "storage"`,
	"Access-Control-Allow-Origin":      "*",
	"Access-Control-Allow-Credentials": "true",
	"Nel":                              `{"report_to":"b","max_age":86400}`,
	"Report-To":                        `{"group":"b","max_age":86400,"endpoints":[{"url":"https://attacker.example/r"}]}`,
	"Cache-Control":                    "public, max-age=86400",
	"Expires":                          "Thu, 01 Jan 2099 00:00:00 GMT",
	"Location":                         "/a/mcp",
	"Authentication-Info":              `nextnonce="x"`,
	"Link":                             `</a/mcp>; rel="preload"`,
}

// TestUpstreamOriginHeaders: a hostile upstream's answers, 2xx (JSON and
// event stream) and 401, carry every header that would leave state with
// the client for the proxy's origin, shared with the other upstream;
// none of them reaches the client, the proxy's answers are never stored,
// the headers a client needs pass, and each drop is counted.
func TestUpstreamOriginHeaders(t *testing.T) {
	for _, m := range []mode{modes[0], modes[1]} {
		t.Run(m.name, func(t *testing.T) {
			hostile := func(w http.ResponseWriter, r *http.Request) bool {
				for k, v := range originWide {
					w.Header().Set(k, v)
				}
				w.Header().Set("X-Request-Id", "req-1")
				if strings.HasPrefix(r.URL.Path, "/.well-known/") {
					http.Redirect(w, r, "http://"+r.Host+"/.well-known/oauth-authorization-server/a/mcp", http.StatusFound)
					return true
				}
				if r.Header.Get("Authorization") == "" {
					w.Header().Set("WWW-Authenticate", `Basic realm="mcp", Bearer resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource/mcp", scope="mcp"`)
					w.Header().Add("WWW-Authenticate", `Digest realm="mcp", nonce="n", qop="auth"`)
					w.WriteHeader(http.StatusUnauthorized)
					return true
				}
				return false
			}
			a := newOriginUpstream(t, "a", m.opts, nil, nil)
			b := newOriginUpstream(t, "b", m.opts, nil, hostile)
			px, st := twoUpstreams(t, a, b)
			init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + m.version + `","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`

			check := func(what string, resp *http.Response) {
				t.Helper()
				for k := range originWide {
					if k == "Cache-Control" {
						continue
					}
					if v := resp.Header.Values(k); len(v) > 0 {
						t.Errorf("%s: %s %q reached the client", what, k, v)
					}
				}
				if got := resp.Header.Get("Cache-Control"); got != "no-store" {
					t.Errorf("%s: Cache-Control %q, want no-store", what, got)
				}
			}
			resp, _ := postRaw(t, px+"/b/mcp", map[string]string{"Authorization": "Bearer t"}, init)
			check("2xx", resp)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Id") != "req-1" || resp.Header.Get("Mcp-Session-Id") == "" {
				t.Errorf("2xx: HTTP %d, X-Request-Id %q, Mcp-Session-Id %q: want 200 with both", resp.StatusCode, resp.Header.Get("X-Request-Id"), resp.Header.Get("Mcp-Session-Id"))
			}

			resp, _ = postRaw(t, px+"/b/mcp", nil, init)
			check("401", resp)
			ch := resp.Header.Values("WWW-Authenticate")
			want := `Bearer resource_metadata="` + px + `/.well-known/oauth-protected-resource/b/mcp", scope="mcp"`
			if resp.StatusCode != http.StatusUnauthorized || len(ch) != 1 || ch[0] != want {
				t.Errorf("401: HTTP %d, WWW-Authenticate %q, want only %q", resp.StatusCode, ch, want)
			}

			// Metadata at the proxy's origin: no Location to another
			// upstream's route.
			hr, _ := getJSON(t, px+"/.well-known/oauth-authorization-server/b/mcp")
			if loc := hr.Header.Get("Location"); loc != "" {
				t.Errorf("b's authorization-server metadata redirects the client to %q", loc)
			}

			for _, class := range []string{StripAltSvc, StripHSTS, StripClearSiteData, StripCORS, StripReporting, StripCaching, StripLocation, StripAuthChallenge, StripOther} {
				if st.get(class) == 0 {
					t.Errorf("no %s header counted as stripped", class)
				}
			}
		})
	}
}

// TestUpstreamSessionIDs: upstreams name the same session id, or one
// names a session another upstream's client holds: each session stays
// with the upstream that named it, and an id of one is never sent to
// the other.
func TestUpstreamSessionIDs(t *testing.T) {
	m := modes[0]
	fixed := func(id string) *mcp.ServerOptions {
		return &mcp.ServerOptions{GetSessionID: func() string { return id }}
	}
	t.Run("same_id", func(t *testing.T) {
		a := newOriginUpstream(t, "a", m.opts, fixed("same"), nil)
		b := newOriginUpstream(t, "b", m.opts, fixed("same"), nil)
		px, _ := twoUpstreams(t, a, b)
		ca := connectVia(t, px+"/a/mcp", m.version, nil)
		cb := connectVia(t, px+"/b/mcp", m.version, nil)
		for range 2 {
			if got := text(call(t, ca, "who", map[string]any{})); got != "a" {
				t.Fatalf("a's session answered %q", got)
			}
			if got := text(call(t, cb, "who", map[string]any{})); got != "b" {
				t.Fatalf("b's session answered %q", got)
			}
		}
	})
	t.Run("other_upstreams_id", func(t *testing.T) {
		a := newOriginUpstream(t, "a", m.opts, fixed("only-a"), nil)
		b := newOriginUpstream(t, "b", m.opts, fixed("only-b"), nil)
		px, _ := twoUpstreams(t, a, b)
		ca := connectVia(t, px+"/a/mcp", m.version, nil)
		call(t, ca, "who", map[string]any{})
		resp, body := postRaw(t, px+"/b/mcp", map[string]string{"Mcp-Session-Id": "only-a", "Mcp-Protocol-Version": m.version},
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, string(CodeSessionUnknown)) {
			t.Fatalf("a's session id at b: HTTP %d %q, want 404 %s", resp.StatusCode, body, CodeSessionUnknown)
		}
		_, _, sids := b.seen()
		if slices.Contains(sids, "only-a") {
			t.Fatalf("b was sent a's session id (%q)", sids)
		}
	})
}

// TestSplitChallenges: WWW-Authenticate read as RFC 9110 says, commas in
// quoted strings and parameters with white space around "=" included.
func TestSplitChallenges(t *testing.T) {
	for _, c := range []struct{ in, bearer string }{
		{`Bearer realm="x, y", error="invalid_token"`, `Bearer realm="x, y", error="invalid_token"`},
		{`Basic realm="a", Bearer scope="mcp"`, `Bearer scope="mcp"`},
		{`Bearer scope = "mcp", Basic realm="b"`, `Bearer scope = "mcp"`},
		{`Negotiate, Bearer`, `Bearer`},
		{`Basic dXNlcjpwYXNz==, bearer error="x"`, `bearer error="x"`},
		{`Basic realm="only"`, ``},
		{`Bearer realm="a\", Basic realm=b"`, `Bearer realm="a\", Basic realm=b"`},
	} {
		got, _ := bearerChallenges([]string{c.in})
		if strings.Join(got, "|") != c.bearer {
			t.Errorf("%s: %q, want %q", c.in, got, c.bearer)
		}
	}
}
