package console

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
)

// browserTarget is where a browser goes with a Location header: the URL
// parser of browsers (WHATWG) drops every tab, line feed and carriage
// return inside a URL and the C0 controls and spaces around it before
// resolving it, so "/\t/evil" is "//evil", another host.
func browserTarget(loc string) string {
	loc = strings.Trim(loc, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
	return strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(loc)
}

// TestLoginNextStaysOnSite: a link to the login form whose next is an
// off-site address in disguise (a tab or another control character
// between the slashes, which browsers drop) must not send the person who
// logs in to another site, where a page made to look like the console
// could ask for the token again.
func TestLoginNextStaysOnSite(t *testing.T) {
	s := startStack(t)
	for _, next := range []string{
		"/\t/evil.example/",
		"/\n/evil.example/",
		"/\r/evil.example/",
		"\t//evil.example/",
		"/\t\\evil.example/",
		"/\x0b/evil.example/",
		"/\x00/evil.example/",
		"//evil.example/",
		"/\\evil.example/",
		"https://evil.example/",
		"/%2F/evil.example/", // stays a path on this site: fine either way
	} {
		// The login form carries next as the link gave it.
		must(t, s.client().get("/login?next="+url.QueryEscape(next)), http.StatusOK)
		// The redirect is read as it comes: Go's client refuses to parse
		// such a Location, a browser follows it.
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/login", strings.NewReader(url.Values{"token": {writeSecret}, "next": {next}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("next %q: login answered %d", next, resp.StatusCode)
		}
		loc := resp.Header.Get("Location")
		dst := browserTarget(loc)
		u, err := url.Parse(dst)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(dst, "/") || strings.HasPrefix(dst, "//") || strings.HasPrefix(dst, "/\\") {
			t.Errorf("next %q: login sent the browser to %q (a browser reads %q): off the site", next, loc, dst)
		}
	}
}

// TestBrowserHostile drives the console in Debian's chromium
// (testdata/hostile.cjs) against an attacker's site: a login link whose
// next is another site in disguise stays on the console; a logged-in
// reviewer who opens the attacker's page, on the console's host at another
// port (same site: the cookie goes along) or on another host name (cross
// site), has no approve forged with the hash the hostile server knows, no
// quarantine fetched with the cookie, and the console refuses to be drawn
// in the attacker's frame.
func TestBrowserHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test is not short")
	}
	node, mods := browserDeps(t)
	s := startStack(t)
	_, pulled := s.rugPull()
	target := s.srv.URL
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/csrf":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><form id=f method=POST action="%s/servers/acme/notes/approve">`+
				`<input name=hash value="%s"><input name=variant value="v0"></form>`+
				`<script>document.getElementById("f").submit()</script>`, html.EscapeString(target), html.EscapeString(pulled))
		case "/frame":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><iframe src="%s/" width=800 height=600></iframe>`, html.EscapeString(target))
		case "/state":
			v, err := s.svc.Server(r.Context(), "acme", "notes")
			if err != nil || len(v.Variants) == 0 {
				http.Error(w, fmt.Sprint(err), http.StatusInternalServerError)
				return
			}
			st := string(v.Variants[0].Status)
			if v.Held() {
				st = "held"
			}
			fmt.Fprint(w, st)
		default:
			fmt.Fprint(w, "landed on the attacker's site: "+r.URL.String())
		}
	}))
	t.Cleanup(evil.Close)
	cross := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	runBrowser(t, node, mods, "testdata/hostile.cjs",
		"CONSOLE_URL="+s.srv.URL,
		"EVIL_SAME="+evil.URL,
		"EVIL_CROSS="+cross,
		"STATE_URL="+evil.URL+"/state",
		"WRITE_TOKEN="+writeSecret,
	)
	s.waitStatus("acme", "notes", "changed")
}

// TestConsoleLoginsAudited: a token guessed at the console (a refused
// login, a page or a write or the event stream asked with a bearer token
// that is none) is on the audit trail as one guessed at the API is
// (actor anonymous, unauthenticated); a login done is audited with the
// token's name. Before, the console only logged them, so a token could be
// guessed at /login without an admin action to show for it.
func TestConsoleLoginsAudited(t *testing.T) {
	recorded := make(chan *mcpdriftv1.AdminAction, 100)
	s := startStackWith(t, func(d *Deps) {
		d.Record = func(ctx context.Context, a *mcpdriftv1.AdminAction) error {
			recorded <- a
			return nil
		}
	})
	next := func(what string) *mcpdriftv1.AdminAction {
		t.Helper()
		select {
		case a := <-recorded:
			return a
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no admin action was recorded", what)
		}
		return nil
	}
	c := s.client()
	must(t, c.do(http.MethodPost, "/login", url.Values{"token": {"guess-0123456789abcdef"}}, nil), http.StatusUnauthorized)
	if a := next("a refused login"); a.Action != "console_login" || a.Actor != "anonymous" || a.Ok || a.ErrorCode != "unauthenticated" || a.EventId == "" || a.AtUnixMs == 0 {
		t.Errorf("a refused login recorded %+v", a)
	}
	for _, rq := range [][2]string{{http.MethodGet, "/"}, {http.MethodGet, "/events"}, {http.MethodPost, "/servers/acme/notes/quarantine"}} {
		a := c.do(rq[0], rq[1], url.Values{"reason": {"x"}}, map[string]string{"Authorization": "Bearer guess-0123456789abcdef"})
		must(t, a, http.StatusUnauthorized)
		if a := next(rq[1]); a.Action != "console_request" || a.Actor != "anonymous" || a.Ok || a.ErrorCode != "unauthenticated" {
			t.Errorf("%s %s with a bearer that is none recorded %+v", rq[0], rq[1], a)
		}
	}
	c.login(writeSecret)
	if a := next("a login"); a.Action != "console_login" || a.Actor != "alice" || a.Role != "write" || !a.Ok {
		t.Errorf("a login recorded %+v", a)
	}
	// A write refused for its CSRF token or its site: a forgery, which
	// never reaches the API.
	for _, hdr := range []map[string]string{nil, {"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}} {
		must(t, c.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"reason": {"x"}}, hdr), http.StatusForbidden)
		if a := next("a forged write"); a.Action != "console_request" || a.Actor != "alice" || a.Ok || a.ErrorCode != "csrf_invalid" ||
			!strings.Contains(a.ErrorMessage, "/servers/acme/notes/quarantine") {
			t.Errorf("a forged write %v recorded %+v", hdr, a)
		}
	}
	// A browser without credentials is only sent to the login form.
	must(t, s.client().get("/"), http.StatusSeeOther)
	select {
	case a := <-recorded:
		t.Errorf("a visit without credentials recorded %+v", a)
	default:
	}
}

// TestConsoleHostileQueries: every page asked with hostile query values
// (negative, huge, not numbers, wildcards, markup, a path for a variant)
// answers a page or a coded error, never a 5xx, and reflects nothing as
// markup.
func TestConsoleHostileQueries(t *testing.T) {
	s := startStack(t)
	s.rugPull()
	c := s.client()
	c.login(readSecret)
	const mark = `<script>alert(7)</script>`
	for _, v := range []string{"-1", "0", "99999999999999999999999", "abc", "*", ">", "a.b", "../../etc", mark, "%00", strings.Repeat("9", 300), "1e9", "0x10"} {
		q := url.QueryEscape(v)
		for _, p := range []string{
			"/?page=" + q, "/?status=" + q, "/?tenant=" + q,
			"/servers/acme/notes?variant=" + q,
			"/servers/acme/notes/history?variant=" + q,
			"/servers/acme/notes/history?variant=v0&from=" + q + "&to=2",
			"/servers/acme/notes/history?variant=v0&from=1&to=" + q,
			"/activity?since=" + q, "/policy?tenant=" + q, "/approvals?done=" + q,
			"/login?next=" + q,
		} {
			a := c.do(http.MethodGet, p, nil, map[string]string{"Accept": "text/html"})
			if a.code >= 500 {
				t.Errorf("GET %s: %d", p, a.code)
			}
			if a.code >= 400 && a.hdr.Get("X-Mcpdrift-Error") == "" {
				t.Errorf("GET %s: %d without a code", p, a.code)
			}
			lacks(t, a.body, mark)
		}
	}
}

// TestHeldCallToolNameVisible: the tool a held call names is the agent's
// choice; on the held calls page its invisible and bidi characters are
// drawn as their code points, as the arguments' are, so that a tool named
// "\u202eeton_daer" is not read as "read_note".
func TestHeldCallToolNameVisible(t *testing.T) {
	s := startStack(t)
	s.hold("\u202eeton_daer\u200b", `{"id":"n1"}`)
	c := s.client()
	c.login(writeSecret)
	a := c.get("/approvals")
	must(t, a, http.StatusOK)
	contains(t, a.body, "⟦U&#43;202E⟧</span>eton_daer", "⟦U&#43;200B⟧")
	lacks(t, a.body, "\u202e", "\u200b")
}
