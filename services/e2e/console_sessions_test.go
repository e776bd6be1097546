package e2e

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// TestConsoleSessionsAcrossDriftInstances runs two drift commands, each
// with only the drift role's rights (deploy/nats/auth.conf, the bus set up
// by the admin, --bus-setup check), as two instances behind a load balancer
// without sticky sessions: a review console login on one is accepted by the
// other, and a logout on the other ends it on the first, even for a client
// that kept the cookie.
func TestConsoleSessionsAcrossDriftInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the commands")
	}
	build(t)
	d := startNATSSingle(t)
	admin := d.connect(t, "admin")
	if _, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{}); err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	const secret = "console-e2e-secret-0123456789"
	var base []string
	for range 2 {
		addr := "127.0.0.1:" + freePort(t)
		runService(t, "drift", "MCPDRIFT_NATS_URL="+d.url("drift"), "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_BUS_SETUP=check",
			"MCPDRIFT_ADMIN_ADDR="+addr, "MCPDRIFT_ADMIN_TOKENS=alice:write:"+secret)
		base = append(base, "http://"+addr)
	}
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, u, cookie string, form url.Values) (int, string, *http.Response) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequest(method, u, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "mcpdrift_session", Value: cookie})
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp
	}

	code, _, resp := do(http.MethodPost, base[0]+"/login", "", url.Values{"token": {secret}})
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == "mcpdrift_session" {
			cookie = c.Value
		}
	}
	if code != http.StatusSeeOther || cookie == "" {
		t.Fatalf("login on instance A: %d, cookie %q", code, cookie)
	}
	code, page, _ := do(http.MethodGet, base[1]+"/", cookie, nil)
	if code != http.StatusOK || !strings.Contains(page, "alice") {
		t.Fatalf("instance B with A's session: %d\n%.500s", code, page)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("instance B's page has no CSRF token")
	}
	if code, _, _ := do(http.MethodPost, base[1]+"/logout", cookie, url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("logout on instance B: %d", code)
	}
	for i, b := range base {
		code, _, resp := do(http.MethodGet, b+"/", cookie, nil)
		if code != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
			t.Errorf("instance %c after the logout, with the old cookie: %d %s, want the login", 'A'+i, code, resp.Header.Get("Location"))
		}
	}
}
