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
// token into a server-side session (cookie HttpOnly, SameSite=Strict, Secure
// over TLS), and pages also accept "Authorization: Bearer". Every write
// carries the session's CSRF token and is carried out by the admin API's own
// handler, so an approve or quarantine from the console is the same admin
// action, checked, refused or done and audited the same way, with the
// token's name.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
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
	// SessionTTL is how long a login lasts (default 12h).
	SessionTTL time.Duration
	// MaxSessions bounds the sessions held at once (default 10,000); a
	// login beyond it ends the oldest.
	MaxSessions int
}

// Deps are what the console reads and acts through.
type Deps struct {
	// Backend is what the pages read (*driftsvc.Service).
	Backend admin.Backend
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
	Log   zerolog.Logger
	Now   func() time.Time
}

// Console is the review console's HTTP handler.
type Console struct {
	cfg   Config
	d     Deps
	pages map[string]*template.Template
	mux   *http.ServeMux

	mu       sync.Mutex
	sessions map[string]*session

	quitOnce sync.Once
	quit     chan struct{} // closed by Shutdown: event streams end
}

type session struct {
	token   admin.Token
	csrf    string
	created time.Time
	expires time.Time
}

// New returns the console.
func New(cfg Config, d Deps) (*Console, error) {
	if d.Backend == nil || d.API == nil || d.Manifest == nil {
		return nil, errors.New("console: Deps.Backend, Deps.API and Deps.Manifest are required")
	}
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("console: no tokens")
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 200
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10000
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, d: d, pages: pages, sessions: map[string]*session{}, quit: make(chan struct{})}
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
func (c *Console) caller(r *http.Request) (*who, bool) {
	if r.Header.Get("Authorization") != "" {
		tok, ok := admin.BearerToken(c.cfg.Tokens, r)
		if !ok {
			return nil, false
		}
		u := &who{Token: tok, bearer: true, secret: tok.Secret}
		// A browser behind a single sign-on proxy sends both: the session
		// (if any) gives the forms their CSRF token.
		if s := c.session(r); s != nil && s.token.Name == tok.Name {
			u.CSRF = s.csrf
		}
		return u, true
	}
	s := c.session(r)
	if s == nil {
		return nil, false
	}
	return &who{Token: s.token, CSRF: s.csrf, secret: s.token.Secret}, true
}

func (c *Console) session(r *http.Request) *session {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[ck.Value]
	if !ok {
		return nil
	}
	if !c.d.Now().Before(s.expires) {
		delete(c.sessions, ck.Value)
		return nil
	}
	// A token removed from the configuration ends its sessions.
	if _, ok := admin.Lookup(c.cfg.Tokens, s.token.Secret); !ok {
		delete(c.sessions, ck.Value)
		return nil
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Console) newSession(tok admin.Token) (id string, s *session) {
	now := c.d.Now()
	id = randomHex(32)
	s = &session{token: tok, csrf: randomHex(32), created: now, expires: now.Add(c.cfg.SessionTTL)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, old := range c.sessions {
		if !now.Before(old.expires) {
			delete(c.sessions, k)
		}
	}
	for len(c.sessions) >= c.cfg.MaxSessions {
		var oldest string
		for k, old := range c.sessions {
			if oldest == "" || old.created.Before(c.sessions[oldest].created) {
				oldest = k
			}
		}
		delete(c.sessions, oldest)
	}
	c.sessions[id] = s
	return id, s
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

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.caller(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", &loginView{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginView struct {
	Next  string
	Error string
}

// safeNext keeps a redirect after login on this site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
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
		c.render(w, r, http.StatusUnauthorized, "login", &loginView{Next: next, Error: "That token is not one of the admin API's tokens."})
		return
	}
	id, _ := c.newSession(tok)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.cfg.SessionTTL.Seconds())})
	c.d.Log.Info().Str("actor", tok.Name).Str("role", string(tok.Role)).Msg("console login")
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	u, ok := c.caller(r)
	if ok && !u.bearer {
		if err := c.checkCSRF(r, u); err != nil {
			c.fail(w, r, u, http.StatusForbidden, "csrf_invalid", err.Error())
			return
		}
		if ck, err := r.Cookie(SessionCookie); err == nil {
			c.mu.Lock()
			delete(c.sessions, ck.Value)
			c.mu.Unlock()
		}
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
		u, ok := c.caller(r)
		if !ok {
			c.unauthenticated(w, r)
			return
		}
		f(w, r, u)
	}
}

func (c *Console) unauthenticated(w http.ResponseWriter, r *http.Request) {
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
		u, ok := c.caller(r)
		if !ok {
			c.unauthenticated(w, r)
			return
		}
		if err := c.checkCSRF(r, u); err != nil {
			c.d.Log.Warn().Str("actor", u.Name()).Str("path", r.URL.Path).Msg("console write refused: csrf")
			c.fail(w, r, u, http.StatusForbidden, "csrf_invalid", err.Error())
			return
		}
		f(w, r, u)
	}
}
