package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// sessionCookie returns the session cookie a client holds for base.
func (c *client) sessionCookie() string {
	c.t.Helper()
	u, _ := url.Parse(c.base)
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == SessionCookie {
			return ck.Value
		}
	}
	c.t.Fatal("the client holds no session cookie")
	return ""
}

// at is the same client (its cookies) speaking to another instance.
func (c *client) at(base string) *client {
	jar := c.hc.Jar
	from, _ := url.Parse(c.base)
	to, _ := url.Parse(base)
	jar.SetCookies(to, jar.Cookies(from)) // a load balancer's one host name
	return &client{t: c.t, base: base, hc: &http.Client{Jar: jar, Timeout: c.hc.Timeout, CheckRedirect: c.hc.CheckRedirect}}
}

// TestSessionsSharedAcrossInstances: two drift instances (two admin APIs
// and consoles, each with its own NATS connection) keep sessions in the one
// sessions bucket: a login on A is accepted by B, a form drawn by A is
// accepted by B (the same CSRF token), a logout on B ends the session on A,
// and the bucket holds the SHA-256 of the cookie, never the cookie, the
// token's secret or the CSRF token.
func TestSessionsSharedAcrossInstances(t *testing.T) {
	s := startStack(t)
	s.observe("acme", "notes", s.manifest(reviewedTools()...))
	s.waitStatus("acme", "notes", "verified")
	nc, js := s.b.Server.Connect(t)
	kv, err := js.KeyValue(context.Background(), bus.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	_, srvB := s.instance(nc, js, kv, nil)

	onA := s.client()
	onA.login(writeSecret)
	onB := onA.at(srvB.URL)
	a := onB.get("/")
	must(t, a, http.StatusOK)
	contains(t, a.body, "alice", "Log out")

	// What the bucket holds.
	id := onA.sessionCookie()
	keys, err := kv.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != sessionKey(id) || keys[0] == id {
		t.Fatalf("bucket keys %v, want only the SHA-256 of the cookie %s", keys, sessionKey(id))
	}
	e, err := kv.Get(context.Background(), keys[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{id, writeSecret, sessionCSRF(id)} {
		if strings.Contains(string(e.Value()), secret) {
			t.Errorf("the session record %s holds a secret", e.Value())
		}
	}
	var rec sessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Token != "alice" || rec.SecretSHA256 != secretDigest(writeSecret) {
		t.Errorf("session record %s (%v)", e.Value(), err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != bus.SessionsMaxAge {
		t.Errorf("sessions bucket TTL %v, want %v", st.TTL(), bus.SessionsMaxAge)
	}

	// A form drawn by A, posted to B.
	token := onA.csrf("/servers/acme/notes")
	must(t, onB.do(http.MethodPost, "/servers/acme/notes/quarantine", url.Values{"csrf": {token}, "reason": {"seen on A, held on B"}}, nil),
		http.StatusSeeOther)
	s.waitStatus("acme", "notes", "quarantined")

	// Logout on B ends the session on A, and removes its record.
	must(t, onB.do(http.MethodPost, "/logout", url.Values{"csrf": {onB.csrf("/")}}, nil), http.StatusSeeOther)
	replay := s.client()
	u, _ := url.Parse(s.srv.URL)
	replay.hc.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: id, Path: "/"}}) // the cookie, kept by an attacker
	a = replay.get("/")
	must(t, a, http.StatusSeeOther)
	if loc := a.hdr.Get("Location"); !strings.HasPrefix(loc, "/login") {
		t.Errorf("a logged-out session on A is sent to %q, want the login", loc)
	}
	if _, err := kv.Get(context.Background(), sessionKey(id)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the session's record after logout: %v", err)
	}
}

// TestSessionEndsWithItsToken: a session whose token's secret changed in
// the configuration (same name) is no longer accepted.
func TestSessionEndsWithItsToken(t *testing.T) {
	s := startStack(t)
	c := s.client()
	c.login(writeSecret)
	must(t, c.get("/"), http.StatusOK)
	rotated, err := admin.ParseTokens("alice:write:rotated-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(Config{Tokens: rotated}, Deps{Backend: s.svc, API: http.NotFoundHandler(), Sessions: s.b.Handles.Sessions,
		Manifest: s.svc.Manifest})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: c.sessionCookie()})
	rec := newRecorder()
	con.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Errorf("a session of a rotated token answered %d, want a redirect to the login", rec.Code)
	}
}

// hashingWanted waits until the policy's hashing settings are waiting on
// tenant/server (the live hash by them is known) and returns that hash.
// The policy reaches the drift service through its watch, at a moment of
// its own: until it has, the surface hash is observed again, as a proxy's
// next listing would be, so that one observation comes after it.
func (s *stack) hashingWanted(tenant, server, hash string) string {
	s.t.Helper()
	var want string
	poll.Eventually(s.t, 10*time.Second, func() error {
		v, err := s.svc.Server(context.Background(), tenant, server)
		if err != nil {
			return err
		}
		rec := v.Variants[0]
		if rec.PolicyWants == nil || rec.PolicyWantsLiveHash == "" {
			s.observe(tenant, server, hash)
			return fmt.Errorf("%s/%s: policy wants %v, live hash by it %q", tenant, server, rec.PolicyWants, rec.PolicyWantsLiveHash)
		}
		want = rec.PolicyWantsLiveHash
		return nil
	})
	return want
}

// TestRebaselineAndRiskForms: the review page's rebaseline and risk forms
// go through the admin API's handlers: refused without the session's CSRF
// token or cross-site (and then the API never hears of it), refused by the
// API for the read role (audited), done and audited with the token's name
// for the write role.
func TestRebaselineAndRiskForms(t *testing.T) {
	s := startStackOpts(t, stackOpts{policyWatch: true})
	h := s.manifest(reviewedTools()...)
	s.observe("acme", "notes", h)
	s.waitStatus("acme", "notes", "verified")
	doc, err := json.Marshal(policy.Document{Drift: []policy.DriftSetting{{Tenant: "acme", Hash: policy.SHA512}}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, s.srv.URL+"/v1/policy", strings.NewReader(string(doc)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+writeSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: HTTP %d", resp.StatusCode)
	}
	s.observe("acme", "notes", h) // a listing after the change: hashed again by the new settings
	wanted := s.hashingWanted("acme", "notes", h)
	if !strings.HasPrefix(wanted, "sha512:") {
		t.Fatalf("the policy's live hash %q", wanted)
	}

	reader := s.client()
	reader.login(readSecret)
	a := reader.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	lacks(t, a.body, "/rebaseline", "/risk\"", "rebaseline-btn", "risk-btn")
	contains(t, a.body, "policy wants")

	writer := s.client()
	writer.login(writeSecret)
	a = writer.get("/servers/acme/notes")
	must(t, a, http.StatusOK)
	contains(t, a.body, `action="/servers/acme/notes/rebaseline"`, `name="hash" value="`+wanted+`"`,
		`action="/servers/acme/notes/risk"`, `<option value="critical"`, `<option value="block"`)
	token := writer.csrf("/servers/acme/notes")
	rebaseline := url.Values{"csrf": {token}, "hash": {wanted}, "variant": {"v0"}}
	risk := url.Values{"csrf": {token}, "band": {"high"}, "mode": {"block"}, "reason": {"<i>vendor</i> under review"}, "variant": {"v0"}}
	without := func(v url.Values, key, val string) url.Values {
		out := url.Values{}
		for k, vs := range v {
			out[k] = vs
		}
		if val == "" {
			out.Del(key)
		} else {
			out.Set(key, val)
		}
		return out
	}

	drain(s.actions)
	for _, tc := range []struct {
		name, path string
		form       url.Values
		hdr        map[string]string
	}{
		{"rebaseline_no_csrf", "rebaseline", without(rebaseline, "csrf", ""), nil},
		{"rebaseline_wrong_csrf", "rebaseline", without(rebaseline, "csrf", strings.Repeat("0", 64)), nil},
		{"rebaseline_cross_site", "rebaseline", rebaseline, map[string]string{"Origin": "http://evil.example"}},
		{"risk_no_csrf", "risk", without(risk, "csrf", ""), nil},
		{"risk_other_sessions_csrf", "risk", without(risk, "csrf", reader.csrf("/")), nil},
		{"risk_cross_site", "risk", risk, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := writer.do(http.MethodPost, "/servers/acme/notes/"+tc.path, tc.form, tc.hdr)
			must(t, a, http.StatusForbidden)
			if got := a.hdr.Get("X-Mcpdrift-Error"); got != "csrf_invalid" {
				t.Errorf("error code %q, want csrf_invalid", got)
			}
		})
	}
	select {
	case act := <-s.actions:
		t.Fatalf("a write refused for CSRF reached the admin API: %+v", act)
	default:
	}

	// The read role, with its own session's CSRF token: the API refuses
	// and audits.
	rtoken := reader.csrf("/")
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"rebaseline", without(rebaseline, "csrf", rtoken)},
		{"risk", without(risk, "csrf", rtoken)},
	} {
		a := reader.do(http.MethodPost, "/servers/acme/notes/"+tc.path, tc.form, nil)
		must(t, a, http.StatusForbidden)
		contains(t, a.body, "forbidden", "needs the write role")
		if act := nextAction(t, s.actions); act.Action != tc.path || act.Actor != "reader" || act.Ok || act.ErrorCode != "forbidden" {
			t.Errorf("audited %+v, want a refused %s by reader", act, tc.path)
		}
	}

	// A risk with no reason, or a band the API does not know.
	must(t, writer.do(http.MethodPost, "/servers/acme/notes/risk", without(risk, "reason", ""), nil), http.StatusBadRequest)
	a = writer.do(http.MethodPost, "/servers/acme/notes/risk", without(risk, "band", "severe"), nil)
	must(t, a, http.StatusBadRequest)
	contains(t, a.body, "invalid_risk", `action="/servers/acme/notes/risk"`)
	if act := nextAction(t, s.actions); act.Action != "risk" || act.Ok || act.ErrorCode != "invalid_risk" {
		t.Errorf("audited %+v, want a refused risk", act)
	}
	// A rebaseline to a hash that is not the live one by the new settings.
	a = writer.do(http.MethodPost, "/servers/acme/notes/rebaseline", without(rebaseline, "hash", h), nil)
	must(t, a, http.StatusConflict)
	contains(t, a.body, "stale_hash", "changed since this page was drawn")
	if act := nextAction(t, s.actions); act.Action != "rebaseline" || act.Ok || act.ErrorCode != "stale_hash" {
		t.Errorf("audited %+v, want a refused rebaseline", act)
	}

	// Done, by the write role.
	a = writer.do(http.MethodPost, "/servers/acme/notes/rebaseline", rebaseline, nil)
	must(t, a, http.StatusSeeOther)
	if act := nextAction(t, s.actions); act.Action != "rebaseline" || act.Actor != "alice" || !act.Ok || act.Hash != wanted || act.Variant != "v0" {
		t.Errorf("audited %+v, want a rebaseline of v0 to %s by alice", act, wanted)
	}
	a = writer.get(a.hdr.Get("Location"))
	contains(t, a.body, "Re-baselined:")
	lacks(t, a.body, "rebaseline-btn")
	v, err := s.svc.Server(context.Background(), "acme", "notes")
	if err != nil {
		t.Fatal(err)
	}
	if rec := v.Variants[0]; rec.BaselineHash != wanted || rec.PolicyWants != nil || rec.Reason != "rebaselined" {
		t.Errorf("after the rebaseline: %+v", rec)
	}

	a = writer.do(http.MethodPost, "/servers/acme/notes/risk", risk, nil)
	must(t, a, http.StatusSeeOther)
	if act := nextAction(t, s.actions); act.Action != "risk" || act.Actor != "alice" || !act.Ok || act.Hash != "band=high mode=block" {
		t.Errorf("audited %+v, want a risk set by alice", act)
	}
	v, err = s.svc.Server(context.Background(), "acme", "notes")
	if err != nil {
		t.Fatal(err)
	}
	if r := v.Hold; r == nil || r.Risk == nil || r.Risk.Band != "high" || r.Risk.Mode != "block" || r.Risk.SetBy != "alice" {
		t.Fatalf("after the risk form: %+v", v.Hold)
	}
	a = writer.get(a.hdr.Get("Location"))
	contains(t, a.body, "Risk set:", `<span class="badge sev-high">high</span> mode <b>block</b>, set by alice`,
		"&lt;i&gt;vendor&lt;/i&gt; under review", `<option value="high" selected>`, `<option value="block" selected>`)
}
