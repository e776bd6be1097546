package streamhttp

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGuardHosts: the listener's allowlist of Host and Origin, with the
// loopback defaults; a refusal is 403 with a coded JSON-RPC error.
func TestGuardHosts(t *testing.T) {
	def, ok := LoopbackPolicy(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	if !ok {
		t.Fatal("127.0.0.1 is not taken for loopback")
	}
	if _, ok := LoopbackPolicy(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}); ok {
		t.Fatal("10.0.0.5 is taken for loopback")
	}
	ok200 := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, c := range []struct {
		name, host, origin string
		policy             HostPolicy
		want               int
		code               string
	}{
		{"localhost", "localhost:8080", "", def, 200, ""},
		{"ipv4", "127.0.0.1:8080", "", def, 200, ""},
		{"ipv6", "[::1]:8080", "", def, 200, ""},
		{"case-insensitive", "LOCALHOST:8080", "", def, 200, ""},
		{"rebinding", "evil.example:8080", "", def, 403, string(CodeHostNotAllowed)},
		{"rebinding-no-port", "evil.example", "", def, 403, string(CodeHostNotAllowed)},
		{"other-port", "localhost:9090", "", def, 403, string(CodeHostNotAllowed)},
		{"same-origin", "localhost:8080", "http://localhost:8080", def, 200, ""},
		{"foreign-origin", "localhost:8080", "http://evil.example", def, 403, string(CodeOriginNotAllowed)},
		{"null-origin", "localhost:8080", "null", def, 403, string(CodeOriginNotAllowed)},
		{"host-any-port", "mcp.internal:443", "", HostPolicy{Hosts: []string{"mcp.internal"}}, 200, ""},
		{"host-star", "anything:1", "", HostPolicy{Hosts: []string{"*"}}, 200, ""},
		{"origin-none-allowed", "anything:1", "https://app.example", HostPolicy{Hosts: []string{"*"}}, 403, string(CodeOriginNotAllowed)},
		{"origin-listed", "anything:1", "https://app.example", HostPolicy{Hosts: []string{"*"}, Origins: []string{"https://APP.example/"}}, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "http://x/ev/mcp", nil)
			req.Host = c.host
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			rec := httptest.NewRecorder()
			GuardHosts(c.policy, ok200).ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.want, rec.Body)
			}
			if c.code != "" && !strings.Contains(rec.Body.String(), `"mcpdrift/code":"`+c.code+`"`) {
				t.Fatalf("body %s, want code %s", rec.Body, c.code)
			}
		})
	}
	if err := (HostPolicy{Hosts: []string{"http://x"}, Origins: []string{"x.example", "https://x/path"}}).Validate(); err == nil ||
		strings.Count(err.Error(), "\n") != 2 {
		t.Fatalf("Validate: %v, want three complaints", err)
	}
}
