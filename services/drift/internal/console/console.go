// Package console is the review console: the drift service's web pages for
// people, served on the admin API's address at / (the API stays under /v1).
// It shows the fleet (every server per tenant, its status, live through
// server-sent events), the review of a drifted server (each changed item
// side by side, approved on the left and live on the right, markers and
// invisible characters made visible), the baseline history with any two
// versions diffable, and recent activity from the streams.
//
// Pages are rendered on the server with html/template from embedded files;
// one small embedded script (no inline script, no framework) refreshes the
// fleet when a verdict arrives. Every value is escaped by the templates: no
// attacker-written text reaches a page as markup (docs/adr/0009-review-console.md).
//
// It authenticates with the API's tokens and roles: a login form turns a
// token into a session (cookie HttpOnly, SameSite=Strict, Secure over TLS)
// kept in the NATS bucket every drift instance shares, under the SHA-256 of
// the cookie, and pages also accept "Authorization: Bearer". Every write
// carries the session's CSRF token and is carried out by the admin API's own
// handler, so an approve, quarantine, rebaseline or risk from the console is
// the same admin action, checked, refused or done and audited the same way,
// with the token's name.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// CSP is the Content-Security-Policy of every answer: scripts, styles and
// images only from the console itself, nothing inline, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// SessionCookie is the name of the session cookie.
const SessionCookie = "mcpdrift_session"

// Config is how the console is set up.
type Config struct {
	// Tokens are the admin API's tokens: the console knows no others.
	Tokens []admin.Token
	// PageSize is the number of servers on one fleet page (default 200).
	PageSize int
	// SessionTTL is how long a login lasts (default and at most
	// bus.SessionsMaxAge, the sessions bucket's TTL).
	SessionTTL time.Duration
}

// Deps are what the console reads and acts through.
type Deps struct {
	// Backend is what the pages read (*driftsvc.Service).
	Backend admin.Backend
	// Sessions is the sessions bucket (bus.BucketSessions), shared by
	// every drift instance: a login on one is a login on all.
	Sessions jetstream.KeyValue
	// API is the admin API's handler: every write is a request to it, with
	// the caller's token, so that it is checked and audited as the API's own.
	API http.Handler
	// Manifest returns a stored manifest by surface hash, for the side by
	// side view.
	Manifest func(ctx context.Context, hash string) (*surface.Surface, error)
	// Follow subscribes to verdicts (JSON), as admin.Deps.Follow; nil: the
	// fleet page is not live.
	Follow func(fn func(verdict []byte)) (stop func(), err error)
	// JS reads recent verdicts and admin actions for the activity page;
	// nil: the page says there is nothing to read.
	JS jetstream.JetStream
	// Audit asks one of the audit queries of ClickHouse (auditq.Run); nil:
	// the drift service has no ClickHouse, and the activity page says so.
	Audit func(ctx context.Context, q auditq.Query, sinceMs int64) (*auditq.Result, error)
	// Record publishes an admin action of the console's own, as
	// admin.Deps.Audit does the API's: a login (action console_login),
	// done or refused, and a page or write refused for a bearer token that
	// is none (console_request), so that a token guessed at the console is
	// on the audit trail as one guessed at the API is, and a write refused
	// for its CSRF token or its site (console_request, csrf_invalid), a
	// forgery that never reached the API. Nil records nothing.
	Record func(ctx context.Context, a *mcpdriftv1.AdminAction) error
	Log    zerolog.Logger
	Now    func() time.Time
}

// Console is the review console's HTTP handler.
type Console struct {
	cfg   Config
	d     Deps
	pages map[string]*template.Template
	mux   *http.ServeMux

	quitOnce sync.Once
	quit     chan struct{} // closed by Shutdown: event streams end
}

// New returns the console.
func New(cfg Config, d Deps) (*Console, error) {
	if d.Backend == nil || d.API == nil || d.Manifest == nil || d.Sessions == nil {
		return nil, errors.New("console: Deps.Backend, Deps.API, Deps.Manifest and Deps.Sessions are required")
	}
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("console: no tokens")
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 200
	}
	if cfg.SessionTTL <= 0 || cfg.SessionTTL > bus.SessionsMaxAge {
		cfg.SessionTTL = bus.SessionsMaxAge
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, d: d, pages: pages, quit: make(chan struct{})}
	assets, _ := fs.Sub(assetFS, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.HandleFunc("GET /{$}", c.page(c.fleet))
	mux.HandleFunc("GET /servers/{tenant}/{server}", c.page(c.review))
	mux.HandleFunc("GET /servers/{tenant}/{server}/history", c.page(c.history))
	mux.HandleFunc("POST /servers/{tenant}/{server}/approve", c.write(c.approve))
	mux.HandleFunc("POST /servers/{tenant}/{server}/quarantine", c.write(c.quarantine))
	mux.HandleFunc("POST /servers/{tenant}/{server}/rebaseline", c.write(c.rebaseline))
	mux.HandleFunc("POST /servers/{tenant}/{server}/risk", c.write(c.risk))
	mux.HandleFunc("GET /activity", c.page(c.activity))
	mux.HandleFunc("GET /approvals", c.page(c.approvals))
	mux.HandleFunc("POST /approvals/{id}/approve", c.write(c.resolve(true)))
	mux.HandleFunc("POST /approvals/{id}/deny", c.write(c.resolve(false)))
	mux.HandleFunc("GET /policy", c.page(c.policies))
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "not_found", "no such page: "+r.Method+" "+r.URL.Path)
	})
	c.mux = mux
	return c, nil
}

// ServeHTTP serves the console with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not "no-referrer": Chromium then sends Origin: null on our own forms
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// Shutdown ends the event streams, so that an HTTP server's Shutdown does
// not wait for them (register it with http.Server.RegisterOnShutdown).
func (c *Console) Shutdown() { c.quitOnce.Do(func() { close(c.quit) }) }

// who is the caller of one request.
type who struct {
	Token admin.Token
	// CSRF is the session's token, for the forms; "" for a bearer caller.
	CSRF string
	// bearer: authenticated by the Authorization header.
	bearer bool
	secret string
}

// CanWrite reports whether the caller's role may approve and quarantine:
// only then are the action buttons drawn (the API refuses anyway).
func (w *who) CanWrite() bool { return w.Token.Role == admin.RoleWrite }

// Name is the token's name.
func (w *who) Name() string { return w.Token.Name }

// Role is the token's role.
func (w *who) Role() string { return string(w.Token.Role) }

// Bearer reports a caller authenticated by header (no logout button).
func (w *who) Bearer() bool { return w.bearer }

// caller authenticates r: a bearer token first, else the session cookie.
// An error means the sessions bucket could not be read: the caller is
// neither known nor refused.
func (c *Console) caller(r *http.Request) (*who, bool, error) {
	if r.Header.Get("Authorization") != "" {
		tok, ok := admin.BearerToken(c.cfg.Tokens, r)
		if !ok {
			return nil, false, nil
		}
		u := &who{Token: tok, bearer: true, secret: tok.Secret}
		// A browser behind a single sign-on proxy sends both: the session
		// (if any) gives the forms their CSRF token.
		s, err := c.session(r)
		if err != nil {
			return nil, false, err
		}
		if s != nil && s.token.Name == tok.Name {
			u.CSRF = s.csrf
		}
		return u, true, nil
	}
	s, err := c.session(r)
	if s == nil || err != nil {
		return nil, false, err
	}
	return &who{Token: s.token, CSRF: s.csrf, secret: s.token.Secret}, true, nil
}

// A session is a login: a random id in the cookie, and in the sessions
// bucket (bus.BucketSessions, shared by every drift instance) a record
// under the SHA-256 of that id. The bucket holds nothing that logs in or
// forges a form: not the id, not the token's secret, not the CSRF token
// (derived from the id). A logout deletes the record, which ends the
// session on every instance; the bucket's TTL drops it when it expires.
type session struct {
	token admin.Token
	csrf  string
}

// sessionRecord is a session as the bucket holds it.
type sessionRecord struct {
	// Token is the token's name; SecretSHA256 the SHA-256 of its secret,
	// so that a token removed or given a new secret ends its sessions.
	Token        string `json:"token"`
	SecretSHA256 string `json:"secret_sha256"`
	CreatedMs    int64  `json:"created_ms"`
	ExpiresMs    int64  `json:"expires_ms"`
}

// sessionKey is the bucket key of a session id: its SHA-256, in hex.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// sessionCSRF is a session's CSRF token: derived from its id, so it is in
// no store, and other than the key (a different input to the hash).
func sessionCSRF(id string) string {
	sum := sha256.Sum256([]byte("mcpdrift console csrf\x00" + id))
	return hex.EncodeToString(sum[:])
}

func secretDigest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// validSessionID is what a session cookie can be: 64 hex digits.
func validSessionID(id string) bool {
	if len(id) != 64 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// session returns the session r's cookie names, nil when there is none
// (no cookie, logged out, expired, or its token is gone).
func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || !validSessionID(ck.Value) {
		return nil, nil
	}
	key := sessionKey(ck.Value)
	e, err := c.d.Sessions.Get(r.Context(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading a console session: %w", err)
	}
	var rec sessionRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, nil // not a record this console wrote: no session
	}
	if c.d.Now().UnixMilli() >= rec.ExpiresMs {
		return nil, nil // the bucket's TTL drops it
	}
	for _, t := range c.cfg.Tokens {
		if t.Name == rec.Token && subtle.ConstantTimeCompare([]byte(secretDigest(t.Secret)), []byte(rec.SecretSHA256)) == 1 {
			return &session{token: t, csrf: sessionCSRF(ck.Value)}, nil
		}
	}
	return nil, nil // the token was removed or given a new secret
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSession stores a session for tok and returns its id (the cookie).
func (c *Console) newSession(ctx context.Context, tok admin.Token) (string, error) {
	now := c.d.Now()
	id := randomHex(32)
	rec, err := json.Marshal(sessionRecord{Token: tok.Name, SecretSHA256: secretDigest(tok.Secret),
		CreatedMs: now.UnixMilli(), ExpiresMs: now.Add(c.cfg.SessionTTL).UnixMilli()})
	if err != nil {
		return "", err
	}
	// Create: a key that exists (a collision of 256 random bits) is refused.
	if _, err := c.d.Sessions.Create(ctx, sessionKey(id), rec); err != nil {
		return "", fmt.Errorf("storing a console session: %w", err)
	}
	return id, nil
}

// crossSite reports a request a browser says comes from another site: a
// write it carries is refused whatever its credentials (a bearer token a
// single sign-on proxy injects included).
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err != nil || u.Host != r.Host
	} else if o == "null" {
		return true
	}
	return false
}

// checkCSRF checks a write: not cross-site, and, from a session, carrying
// the session's CSRF token. A bearer request without a session cookie
// needs none (a browser cannot add the header to a forged request).
func (c *Console) checkCSRF(r *http.Request, u *who) error {
	if crossSite(r) {
		return errors.New("the request comes from another site")
	}
	if u.bearer {
		if _, err := r.Cookie(SessionCookie); err != nil {
			return nil
		}
	}
	got := r.PostFormValue("csrf")
	if u.CSRF == "" || subtle.ConstantTimeCompare([]byte(got), []byte(u.CSRF)) != 1 {
		return errors.New("the form's CSRF token is missing or not this session's; reload the page and try again")
	}
	return nil
}

// sessionsDown answers a request whose session could not be read or
// written: the console cannot tell who is asking, and says so.
func (c *Console) sessionsDown(w http.ResponseWriter, r *http.Request, err error) {
	c.d.Log.Error().Err(err).Str("path", r.URL.Path).Msg("console sessions unavailable")
	c.fail(w, r, nil, http.StatusServiceUnavailable, "sessions_unavailable",
		"the console's sessions (NATS bucket "+bus.BucketSessions+") cannot be reached; try again, or send a bearer token")
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok, _ := c.caller(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", &loginView{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginView struct {
	Next  string
	Error string
}

// safeNext keeps a redirect after login on this site. A control
// character anywhere refuses it: browsers drop a tab or line break inside
// a URL, so "/<tab>/evil.example" is "//evil.example", another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/"
	}
	return next
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := safeNext(r.PostFormValue("next"))
	if crossSite(r) {
		c.fail(w, r, nil, http.StatusForbidden, "csrf_invalid", "the login comes from another site")
		return
	}
	tok, ok := admin.Lookup(c.cfg.Tokens, strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		c.d.Log.Warn().Str("remote", r.RemoteAddr).Msg("console login refused")
		c.record(r, "console_login", admin.Token{}, "unauthenticated", "the login's token is not one of the admin API's tokens")
		c.render(w, r, http.StatusUnauthorized, "login", &loginView{Next: next, Error: "That token is not one of the admin API's tokens."})
		return
	}
	id, err := c.newSession(r.Context(), tok)
	if err != nil {
		c.sessionsDown(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.cfg.SessionTTL.Seconds())})
	c.d.Log.Info().Str("actor", tok.Name).Str("role", string(tok.Role)).Msg("console login")
	c.record(r, "console_login", tok, "", "")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on every drift instance: its record is deleted
// from the shared bucket.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	u, ok, err := c.caller(r)
	if err != nil {
		c.sessionsDown(w, r, err)
		return
	}
	if ok && !u.bearer {
		if err := c.checkCSRF(r, u); err != nil {
			c.fail(w, r, u, http.StatusForbidden, "csrf_invalid", err.Error())
			return
		}
		ck, _ := r.Cookie(SessionCookie) // there is one: the caller has a session
		if err := c.d.Sessions.Delete(r.Context(), sessionKey(ck.Value)); err != nil {
			c.sessionsDown(w, r, err)
			return
		}
		c.d.Log.Info().Str("actor", u.Name()).Msg("console logout")
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

type pageFunc func(w http.ResponseWriter, r *http.Request, u *who)

// page authenticates a page: a browser without credentials is sent to the
// login form, anything else answered 401.
func (c *Console) page(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok, err := c.caller(r)
		if err != nil {
			c.sessionsDown(w, r, err)
			return
		}
		if !ok {
			c.unauthenticated(w, r)
			return
		}
		f(w, r, u)
	}
}

// record publishes one of the console's own admin actions (Deps.Record):
// tok's name is the actor (anonymous when it is none), code the refusal.
func (c *Console) record(r *http.Request, action string, tok admin.Token, code, msg string) {
	if c.d.Record == nil {
		return
	}
	now := c.d.Now()
	a := &mcpdriftv1.AdminAction{EventId: fmt.Sprintf("console-%d-%s", now.UnixNano(), randomHex(6)), Action: action,
		Actor: "anonymous", AtUnixMs: now.UnixMilli(), Ok: code == "", ErrorCode: code, ErrorMessage: msg}
	if tok.Name != "" {
		a.Actor, a.Role = tok.Name, string(tok.Role)
	}
	if err := c.d.Record(r.Context(), a); err != nil {
		c.d.Log.Error().Err(err).Str("action", action).Str("actor", a.Actor).Msg("publishing admin action")
	}
}

// refusedBearer records a request refused for a bearer token that is none.
func (c *Console) refusedBearer(r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		c.record(r, "console_request", admin.Token{}, "unauthenticated", "the bearer token is not one of the admin API's tokens")
	}
}

func (c *Console) unauthenticated(w http.ResponseWriter, r *http.Request) {
	c.refusedBearer(r)
	if r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	c.fail(w, r, nil, http.StatusUnauthorized, "unauthenticated", "log in, or send a valid bearer token (Authorization: Bearer <token>)")
}

// write authenticates and checks CSRF before f; the role is the admin
// API's to check (and to audit when it refuses).
func (c *Console) write(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		u, ok, err := c.caller(r)
		if err != nil {
			c.sessionsDown(w, r, err)
			return
		}
		if !ok {
			c.unauthenticated(w, r)
			return
		}
		if err := c.checkCSRF(r, u); err != nil {
			c.d.Log.Warn().Str("actor", u.Name()).Str("path", r.URL.Path).Msg("console write refused: csrf")
			c.record(r, "console_request", u.Token, "csrf_invalid", r.Method+" "+r.URL.Path+": "+err.Error())
			c.fail(w, r, u, http.StatusForbidden, "csrf_invalid", err.Error())
			return
		}
		f(w, r, u)
	}
}
