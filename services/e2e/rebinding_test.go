package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRebindingThroughProxy: the proxy command refuses a DNS rebinding
// request on its own listener (403, host_not_allowed), and an upstream
// with rebinding protection of its own (the Go SDK's localhost Host check
// and net/http's cross-origin protection) still refuses through the proxy
// what it refuses directly, even an Origin the proxy's operator allowed.
func TestRebindingThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the proxy command")
	}
	p := startPipeline(t)
	s := mcp.NewServer(&mcp.Implementation{Name: "guarded", Version: "1.0.0"}, nil)
	setEcho(s, "Echo the text back.")
	up := httptest.NewServer(http.NewCrossOriginProtection().Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)))
	t.Cleanup(up.Close)
	direct := up.URL + "/mcp"
	px := runHTTPProxy(t, "rebinding", "--nats-url", p.nc.ConnectedUrl(), "--proxy-id", "rebinding", "--first-sight-wait", "5s",
		"--upstream", "guarded="+direct, "--allowed-origins", "http://app.example")
	via := px + "/guarded/mcp"

	initialize := func(url string, h map[string]string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	for _, c := range []struct {
		name        string
		h           map[string]string
		wantDirect  int
		wantProxied int
		code        string // the proxy's own refusal
	}{
		{"plain", nil, 200, 200, ""},
		{"rebinding-host", map[string]string{"Host": "evil.example"}, 403, 403, "host_not_allowed"},
		{"foreign-origin", map[string]string{"Origin": "http://evil.example"}, 403, 403, "origin_not_allowed"},
		// Allowed at the proxy, refused by the upstream's own check: the
		// proxy does not weaken it.
		{"cross-site-allowed-at-proxy", map[string]string{"Origin": "http://app.example", "Sec-Fetch-Site": "cross-site"}, 403, 403, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, body := initialize(direct, c.h); got != c.wantDirect {
				t.Errorf("directly: %d %s, want %d", got, body, c.wantDirect)
			}
			got, body := initialize(via, c.h)
			if got != c.wantProxied {
				t.Errorf("through the proxy: %d %s, want %d", got, body, c.wantProxied)
			}
			if c.code != "" && !strings.Contains(body, `"mcpdrift/code":"`+c.code+`"`) {
				t.Errorf("through the proxy: %s, want the proxy's refusal %s", body, c.code)
			}
		})
	}
}
