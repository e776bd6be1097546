package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// isolatedUpstream is a real MCP server (the Go SDK) whose echo answers
// "<name>:<text>" and whose every answer sets a cookie of its own for the
// whole origin and an Alt-Svc; it records the Cookie of each request.
type isolatedUpstream struct {
	name, url string
	mu        sync.Mutex
	cookies   []string
}

func newIsolatedUpstream(t *testing.T, name string) *isolatedUpstream {
	t.Helper()
	u := &isolatedUpstream{name: name}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back."}, func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ":" + in.Text}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.cookies = append(u.cookies, r.Header.Values("Cookie")...)
		u.mu.Unlock()
		w.Header().Add("Set-Cookie", "sticky="+name+"-secret; Path=/")
		w.Header().Set("Alt-Svc", `h2="attacker.example:443"; ma=86400`)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL + "/mcp"
	return u
}

func (u *isolatedUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.cookies)
}

// TestHTTPUpstreamsIsolated: the proxy command in HTTP mode fronts two
// upstreams on its one origin, each setting a cookie for the whole origin.
// A Go SDK client whose HTTP client keeps cookies (as a browser does)
// uses both: each upstream gets its own cookie back and never the
// other's. The TypeScript SDK client then sends b every cookie the jar
// holds for a (as a client that ignores cookie paths would): b gets none
// of them, and serves it. The proxy's metrics count what it scoped and
// dropped (docs/services/proxy-http.md, "Upstreams isolated").
func TestHTTPUpstreamsIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	n := requirePeers(t)
	p := startPipeline(t)
	a, b := newIsolatedUpstream(t, "a"), newIsolatedUpstream(t, "b")
	ops := "127.0.0.1:" + freePort(t)
	px := runHTTPProxy(t, "iso", "--nats-url", p.nc.ConnectedUrl(), "--proxy-id", "iso", "--first-sight-wait", "5s",
		"--upstream", "a="+a.url, "--upstream", "b="+b.url, "--ops-addr", ops)

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar}
	for _, u := range []*isolatedUpstream{a, b} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: px + "/" + u.name + "/mcp", HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatalf("connecting to %s: %v", u.name, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		poll.Eventually(t, wait, func() error {
			got, isErr := echo(cs, "hi")
			return awaiting(!isErr && got == u.name+":hi", u.name+" serves its echo through the proxy", got)
		})
	}
	for _, c := range []struct {
		u          *isolatedUpstream
		own, other string
	}{{a, "sticky=a-secret", "b-secret"}, {b, "sticky=b-secret", "a-secret"}} {
		seen := c.u.seen()
		own := false
		for _, h := range seen {
			if strings.Contains(h, c.other) || strings.Contains(h, "mcpdrift.") {
				t.Errorf("%s got Cookie %q", c.u.name, h)
			}
			own = own || slices.Contains(strings.Split(h, "; "), c.own)
		}
		if !own {
			t.Errorf("%s never got its own cookie back (Cookie %q)", c.u.name, seen)
		}
	}

	// The TypeScript SDK client, sending b every cookie a has at the client.
	au, _ := url.Parse(px + "/a/mcp")
	var all []string
	for _, c := range jar.Cookies(au) {
		all = append(all, c.String())
	}
	if len(all) == 0 {
		t.Fatal("the jar holds no cookie for a")
	}
	before := len(b.seen())
	tr := tsClient{n}.run(t, endpoint{Transport: "http", URL: px + "/b/mcp", Headers: map[string]string{"Cookie": strings.Join(all, "; ")}}, nil,
		[]step{{Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"ts"}}`)}})
	if len(tr.Steps) != 1 || tr.Steps[0].Error != nil || !strings.Contains(string(tr.Steps[0].Result), "b:ts") {
		t.Fatalf("the TypeScript client through the proxy: %+v", tr)
	}
	for _, h := range b.seen()[before:] {
		if strings.Contains(h, "a-secret") || strings.Contains(h, "mcpdrift.") {
			t.Errorf("b got a's cookie from the TypeScript client: %q", h)
		}
	}

	for _, class := range []string{"set-cookie-scoped", "alt-svc", "cookie-foreign"} {
		poll.Eventually(t, wait, func() error {
			v, ok := opstest.Scrape(t, ops).Value("mcpdrift_proxy_upstream_headers_stripped_total", "header", class)
			return awaiting(ok && v >= 1, "headers of class "+class+" counted", fmt.Sprint(v))
		})
	}
}
