package console

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

func must(t *testing.T, a answer, code int) {
	t.Helper()
	if a.code != code {
		t.Fatalf("got %d, want %d: %.600s", a.code, code, a.body)
	}
}

func contains(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
}

func lacks(t *testing.T, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Errorf("the page has %q", b)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	s := startStack(t)
	c := s.client()
	for _, path := range []string{"/login", "/", "/assets/console.js", "/assets/console.css", "/nope"} {
		a := c.get(path)
		if got := a.hdr.Get("Content-Security-Policy"); got != CSP {
			t.Errorf("%s: CSP %q, want %q", path, got, CSP)
		}
		if got := a.hdr.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", path, got)
		}
		if got := a.hdr.Get("Referrer-Policy"); got != "same-origin" {
			t.Errorf("%s: Referrer-Policy %q", path, got)
		}
	}
	if a := c.get("/assets/console.js"); !strings.HasPrefix(a.hdr.Get("Content-Type"), "text/javascript") || a.code != http.StatusOK {
		t.Errorf("console.js: %d %s", a.code, a.hdr.Get("Content-Type"))
	}
	// No inline script and no inline style on any page: the CSP would
	// block them, and an escaped value must never become one.
	c.login(writeSecret)
	s.observe("acme", "notes", s.manifest(reviewedTools()...))
	s.waitStatus("acme", "notes", "verified")
	for _, path := range []string{"/", "/servers/acme/notes", "/servers/acme/notes/history", "/activity", "/approvals", "/policy"} {
		a := c.get(path)
		must(t, a, http.StatusOK)
		lacks(t, a.body, "<script>", " style=", " onclick=", " onload=")
		contains(t, a.body, `<script src="/assets/console.js" defer></script>`)
	}
}

func TestLogin(t *testing.T) {
	s := startStack(t)
	c := s.client()
	a := c.get("/")
	must(t, a, http.StatusSeeOther)
	if loc := a.hdr.Get("Location"); loc != "/login?next=%2F" {
		t.Errorf("redirected to %q", loc)
	}
	a = c.do(http.MethodPost, "/login", url.Values{"token": {"not-a-token-at-all"}}, nil)
	must(t, a, http.StatusUnauthorized)
	if len(a.hdr.Values("Set-Cookie")) != 0 {
		t.Errorf("a refused login set a cookie: %v", a.hdr.Values("Set-Cookie"))
	}
	a = c.do(http.MethodPost, "/login", url.Values{"token": {writeSecret}, "next": {"//evil.example/"}}, nil)
	must(t, a, http.StatusSeeOther)
	if loc := a.hdr.Get("Location"); loc != "/" {
		t.Errorf("login sent to %q: an off-site next must become /", loc)
	}
	ck := a.hdr.Get("Set-Cookie")
	for _, want := range []string{SessionCookie + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("session cookie %q lacks %s", ck, want)
		}
	}
	if strings.Contains(ck, writeSecret) {
		t.Errorf("the cookie carries the token: %q", ck)
	}
	if strings.Contains(ck, "Secure") {
		t.Errorf("cookie over plain HTTP is Secure: %q", ck)
	}
	a = c.get("/")
	must(t, a, http.StatusOK)
	contains(t, a.body, "alice", "Log out")
	// Logging out needs the CSRF token, then ends the session.
	must(t, c.do(http.MethodPost, "/logout", url.Values{}, nil), http.StatusForbidden)
	must(t, c.do(http.MethodPost, "/logout", url.Values{"csrf": {c.csrf("/")}}, nil), http.StatusSeeOther)
	must(t, c.get("/"), http.StatusSeeOther)
}

func TestSecureCookieOverTLS(t *testing.T) {
	s := startStack(t)
	req, _ := http.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {readSecret}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.TLS = &tlsState
	rec := newRecorder()
	s.con.ServeHTTP(rec, req)
	if ck := rec.Header().Get("Set-Cookie"); !strings.Contains(ck, "Secure") {
		t.Errorf("cookie over TLS is not Secure: %q", ck)
	}
}

func TestBearer(t *testing.T) {
	s := startStack(t)
	c := s.client()
	a := c.do(http.MethodGet, "/", nil, map[string]string{"Authorization": "Bearer " + readSecret})
	must(t, a, http.StatusOK)
	contains(t, a.body, "reader")
	lacks(t, a.body, "Log out")
	a = c.do(http.MethodGet, "/", nil, map[string]string{"Authorization": "Bearer wrong-secret-0123456789"})
	must(t, a, http.StatusUnauthorized)
	contains(t, a.body, "unauthenticated")
}

func TestCSRF(t *testing.T) {
	s := startStack(t)
	h := s.manifest(reviewedTools()...)
	s.observe("acme", "notes", h)
	s.waitStatus("acme", "notes", "verified")
	c := s.client()
	c.login(writeSecret)
	token := c.csrf("/servers/acme/notes")
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "reason": {"looks odd"}}
	}
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"missing", url.Values{"reason": {"x"}}, nil},
		{"wrong", form(strings.Repeat("0", 64)), nil},
		{"cross_site_origin", form(token), map[string]string{"Origin": "http://evil.example"}},
		{"cross_site_fetch", form(token), map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.do(http.MethodPost, "/servers/acme/notes/quarantine", tc.form, tc.hdr)
			must(t, a, http.StatusForbidden)
			if got := a.hdr.Get("X-Mcpdrift-Error"); got != "csrf_invalid" {
				t.Errorf("error code %q, want csrf_invalid", got)
			}
			contains(t, a.body, "csrf_invalid")
		})
	}
	s.waitStatus("acme", "notes", "verified")
	// A bearer caller without a session cookie needs no CSRF token (a
	// browser cannot forge the header), but is refused cross-site.
	b := s.client()
	must(t, b.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"reason": {"x"}},
		map[string]string{"Authorization": "Bearer " + writeSecret, "Origin": "http://evil.example"}), http.StatusForbidden)
	a := b.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"reason": {"held by a script"}},
		map[string]string{"Authorization": "Bearer " + writeSecret})
	must(t, a, http.StatusSeeOther)
	s.waitStatus("acme", "notes", "quarantined")
}

func TestReadTokenHasNoButtonsAndItsPostIsRefused(t *testing.T) {
	s := startStack(t)
	_, h2 := s.rugPull()
	c := s.client()
	c.login(readSecret)
	a := c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	lacks(t, a.body, "/approve", "/quarantine", "approve-btn")
	contains(t, a.body, "read role")
	// The forged write, with the session's own CSRF token (from the
	// logout form): the admin API refuses the role and audits it.
	token := c.csrf("/servers/acme/notes")
	drain(s.actions)
	a = c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"csrf": {token}, "hash": {h2}, "variant": {"v0"}}, nil)
	must(t, a, http.StatusForbidden)
	if got := a.hdr.Get("X-Mcpdrift-Error"); got != "forbidden" {
		t.Errorf("error code %q, want forbidden", got)
	}
	contains(t, a.body, "forbidden", "needs the write role")
	act := nextAction(t, s.actions)
	if act.Action != "approve" || act.Actor != "reader" || act.Ok || act.ErrorCode != "forbidden" {
		t.Errorf("audited %+v, want a refused approve by reader", act)
	}
	s.waitStatus("acme", "notes", "changed")
	// By bearer, too.
	a = s.client().do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"reason": {"x"}},
		map[string]string{"Authorization": "Bearer " + readSecret})
	must(t, a, http.StatusForbidden)
}

func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func nextAction[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no admin action was audited")
	}
	var zero T
	return zero
}

func TestReviewApprove(t *testing.T) {
	s := startStack(t)
	_, h2 := s.rugPull()
	c := s.client()
	c.login(writeSecret)

	fleet := c.get("/")
	must(t, fleet, http.StatusOK)
	contains(t, fleet.body, `data-server="notes" data-status="changed"`, `class="status st-changed">changed<`, "sev-critical")

	a := c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body,
		`name="hash" value="`+h2+`"`, // the approve is bound to the live hash shown
		"approved baseline v1", "live",
		`data-name="read_note"`, `data-name="export_notes"`,
		"description_changed", "param_added_required", "destructive_tool_added", "marker_secret_path", "marker_hidden_instructions",
		// word diff: the old sentence kept, the payload inserted and marked
		`<span class="frag">Read one note by its id.</span>`,
		`class="frag ins marker mk-secret_path"`,
		`class="row m-added" data-path="inputSchema.properties.context"`,
		"Changed (1)", "Added (1)",
	)
	drain(s.actions)
	a = c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"csrf": {c.csrf("/servers/acme/notes")}, "hash": {h2}, "variant": {"v0"}}, nil)
	must(t, a, http.StatusSeeOther)
	act := nextAction(t, s.actions)
	if act.Action != "approve" || act.Actor != "alice" || !act.Ok || act.Hash != h2 {
		t.Errorf("audited %+v, want an approve of %s by alice", act, h2)
	}
	s.waitStatus("acme", "notes", "verified")
	a = c.get(a.hdr.Get("Location"))
	must(t, a, http.StatusOK)
	contains(t, a.body, "Approved:", `id="server-status">verified<`)

	// History: two versions, who and from what, and the diff between them.
	a = c.get("/servers/acme/notes/history")
	must(t, a, http.StatusOK)
	contains(t, a.body, "<td>v1</td>", "<td>v2</td>", "alice", "<code>approved</code>", "<code>first_baseline</code>")
	a = c.get("/servers/acme/notes/history?variant=v0&from=1&to=2")
	must(t, a, http.StatusOK)
	contains(t, a.body, "v1 → v2", `data-name="export_notes"`, "marker_secret_path")

	// Activity: the verdicts and the approve.
	a = c.get("/activity")
	must(t, a, http.StatusOK)
	contains(t, a.body, "approve", "alice", "st-changed", "st-verified")
}

func TestStaleApproveRefused(t *testing.T) {
	s := startStack(t)
	_, h2 := s.rugPull()
	h3 := s.manifest(append(rugPullTools(), tool("wipe", "Delete everything.", nil, map[string]any{}, nil))...)
	c := s.client()
	c.login(writeSecret)
	token := c.csrf("/servers/acme/notes") // the page is drawn with h2
	s.observe("acme", "notes", h3)         // and the server moves on
	poll.Eventually(t, 10*time.Second, func() error {
		v, err := s.svc.Server(context.Background(), "acme", "notes")
		if err != nil {
			return err
		}
		if v.Variants[0].LiveHash != h3 {
			return fmt.Errorf("live hash %s, want %s", v.Variants[0].LiveHash, h3)
		}
		return nil
	})
	a := c.do(http.MethodPost, "/servers/acme/notes/approve", url.Values{"csrf": {token}, "hash": {h2}, "variant": {"v0"}}, nil)
	must(t, a, http.StatusConflict)
	if got := a.hdr.Get("X-Mcpdrift-Error"); got != "stale_hash" {
		t.Errorf("error code %q, want stale_hash", got)
	}
	contains(t, a.body, "changed since this page was drawn", `name="hash" value="`+h3+`"`, `data-name="wipe"`)
	s.waitStatus("acme", "notes", "changed")
}

func TestQuarantineNeedsReason(t *testing.T) {
	s := startStack(t)
	s.observe("acme", "notes", s.manifest(reviewedTools()...))
	s.waitStatus("acme", "notes", "verified")
	c := s.client()
	c.login(writeSecret)
	token := c.csrf("/servers/acme/notes")
	a := c.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"csrf": {token}, "reason": {"  "}}, nil)
	must(t, a, http.StatusBadRequest)
	contains(t, a.body, "bad_request", "say why")
	a = c.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"csrf": {token}, "reason": {"<b>vendor</b> compromised"}}, nil)
	must(t, a, http.StatusSeeOther)
	s.waitStatus("acme", "notes", "quarantined")
	a = c.get("/servers/acme/notes")
	contains(t, a.body, "Quarantined by <b>alice</b>", "&lt;b&gt;vendor&lt;/b&gt; compromised")
}

func TestHostileTextRendersAsText(t *testing.T) {
	s := startStack(t)
	h1 := s.manifest(reviewedTools()...)
	h2 := s.manifest(append(reviewedTools(), hostileTools()...)...)
	s.observe("evil", "srv", h1)
	s.waitStatus("evil", "srv", "verified")
	s.observe("evil", "srv", h2)
	s.waitStatus("evil", "srv", "changed")
	c := s.client()
	c.login(writeSecret)
	for _, path := range []string{"/servers/evil/srv", "/", "/activity"} {
		a := c.get(path)
		must(t, a, http.StatusOK)
		lacks(t, a.body, "<script>alert", "<img src=x", `"><script>x`, "href=\"javascript:", "\u202E", "\u200B", "\u200D", "\uFEFF", `onerror=alert(1)>`)
	}
	a := c.get("/servers/evil/srv")
	if testing.Verbose() {
		t.Log(a.body)
	}
	contains(t, a.body,
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		"&#34;&gt;&lt;img src=x onerror=alert(1)&gt;",
		"javascript:alert(document.cookie)",
		`<span class="invisible" title="bidirectional control character">⟦U&#43;202E⟧</span>`,
		`⟦U&#43;200B⟧`, `⟦U&#43;200D⟧`, `⟦U&#43;FEFF⟧`,
		"marker_invisible_chars",
		"{{.User.CSRF}}",
	)
}

func TestEventsStream(t *testing.T) {
	s := startStack(t)
	h1 := s.manifest(reviewedTools()...)
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/events", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("events without credentials: %v %v", resp.StatusCode, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func(prefix string) string {
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), prefix) {
				return sc.Text()
			}
		}
		t.Fatalf("the stream ended before %q: %v", prefix, sc.Err())
		return ""
	}
	next("event: ready")
	s.observe("acme", "live", h1)
	next("event: verdict")
	if d := next("data: "); !strings.Contains(d, `"tenant":"acme","server":"live","variant":"v0","status":"verified"`) {
		t.Errorf("verdict event %s", d)
	}
}

func TestFleetFiltersAndPages(t *testing.T) {
	views := syntheticFleet(130)
	c := &Console{cfg: Config{PageSize: 50}}
	fv := c.fleetView(views, url.Values{})
	if fv.Total != 130 || fv.Pages != 3 || len(fv.Rows) != 50 || fv.Next != "/?page=2" {
		t.Errorf("all: total %d pages %d rows %d next %q", fv.Total, fv.Pages, len(fv.Rows), fv.Next)
	}
	fv = c.fleetView(views, url.Values{"tenant": {"t1"}, "status": {"changed"}, "page": {"9"}})
	for _, r := range fv.Rows {
		if r.Tenant != "t1" || r.Status != "changed" {
			t.Fatalf("row %+v passed the filter", r)
		}
	}
	var sum int
	for _, n := range fv.Counts {
		sum += n.N
	}
	if sum != fv.Total || fv.Page != fv.Pages {
		t.Errorf("counts add up to %d of %d; page %d of %d", sum, fv.Total, fv.Page, fv.Pages)
	}
}

// TestPendingReview: under the strict posture a server never approved is
// pending; its review shows its whole live surface as added, markers and
// all, and an approve makes it baseline v1.
func TestPendingReview(t *testing.T) {
	s := startStackPolicy(t, driftsvc.Config{Policy: state.Policy{Posture: state.Strict}}, nil)
	h := s.manifest(rugPullTools()...)
	s.observe("acme", "fresh", h)
	s.waitStatus("acme", "fresh", "pending")
	c := s.client()
	c.login(writeSecret)
	a := c.get("/servers/acme/fresh")
	must(t, a, http.StatusOK)
	contains(t, a.body, "nothing approved yet", "Added (3)", `data-name="read_note"`, "marker_secret_path",
		`class="frag ins marker mk-secret_path"`, `name="hash" value="`+h+`"`)
	lacks(t, a.body, "nothing to compare")
	a = c.do(http.MethodPost, "/servers/acme/fresh/approve", url.Values{"csrf": {c.csrf("/servers/acme/fresh")}, "hash": {h}, "variant": {"v0"}}, nil)
	must(t, a, http.StatusSeeOther)
	s.waitStatus("acme", "fresh", "verified")
}

// TestRiskShown: the fleet page and the review page show a server's risk
// band and mode (a rug pull with injection markers is rated critical).
func TestRiskShown(t *testing.T) {
	s := startStack(t)
	s.rugPull()
	c := s.client()
	c.login(readSecret)
	poll.Eventually(t, 10*time.Second, func() error {
		fleet := c.get("/")
		if !strings.Contains(fleet.body, `<span class="badge sev-critical" title="risk band">critical</span> allow`) {
			return fmt.Errorf("the fleet page shows no critical risk: %.2000s", fleet.body)
		}
		return nil
	})
	a := c.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body, `class="risk-note"`, `<span class="badge sev-critical">critical</span> mode <b>allow</b>`, "marker at")
}
