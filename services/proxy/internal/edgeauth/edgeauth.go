// Package edgeauth authenticates agents at the HTTP proxy's edge: every
// request to an upstream's routes must name its agent, with a bearer token
// of the proxy's own (a name and a secret from a tokens file) or a client
// certificate the proxy's TLS listener verified against a client CA. The
// agent's name travels in the request's context (Agent) to the session,
// which records it in every call and listing it reports. A request without
// a credential, or with one that matches none, is answered 401 with
// "WWW-Authenticate: Bearer" and a JSON-RPC error whose data carries a
// stable code; which token was close is never said.
//
// The proxy's own token and an upstream's OAuth token must not collide
// (docs/agent-auth.md): the edge token is read from the header
// Mcpdrift-Agent-Token, or from "Authorization: Bearer" only when that
// secret is one of the proxy's tokens; the proxy's own credential is taken
// off the request before anything is forwarded, and an Authorization
// header that is not one of its tokens passes on untouched.
package edgeauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Header carries the proxy's own bearer token, apart from Authorization,
// which may hold a token meant for the upstream (OAuth).
const Header = "Mcpdrift-Agent-Token"

// The stable codes of the edge's refusals (in the JSON-RPC error's data,
// and the code label of mcpdrift_proxy_agent_refusals_total).
const (
	// CodeUnauthenticated: the request names no agent (no token of the
	// proxy's, no verified client certificate).
	CodeUnauthenticated session.Code = "agent_unauthenticated"
	// CodeInvalidCredential: a token in Mcpdrift-Agent-Token that is none
	// of the proxy's, the header given twice, credentials naming two
	// different agents, or a client certificate that names nobody.
	CodeInvalidCredential session.Code = "agent_credential_invalid"
	// CodeSessionForbidden: a request of one agent on a session another
	// agent opened (streamhttp refuses it, 403).
	CodeSessionForbidden session.Code = "session_forbidden"
)

// RefusalCodes are the codes the edge answers with, in metric label order.
var RefusalCodes = []session.Code{CodeUnauthenticated, CodeInvalidCredential, CodeSessionForbidden}

// Realm is the realm of the proxy's WWW-Authenticate challenge: an OAuth
// client can tell it from an upstream's challenge, which names the
// upstream's resource metadata.
const Realm = "mcpdrift-proxy"

type agentKey struct{}

// WithAgent returns ctx naming agent as the request's authenticated agent.
func WithAgent(ctx context.Context, agent string) context.Context {
	return context.WithValue(ctx, agentKey{}, agent)
}

// Agent is the authenticated agent of a request's context; "" when the
// proxy does not authenticate agents.
func Agent(ctx context.Context) string {
	a, _ := ctx.Value(agentKey{}).(string)
	return a
}

// Token is one agent's bearer token: its name and the SHA-256 of its
// secret (the file may hold either the secret or the hash).
type Token struct {
	Name string
	sum  [sha256.Size]byte
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// MinSecret is the shortest secret a tokens file may hold in the clear.
const MinSecret = 16

// ParseTokens reads a tokens file: one token a line, "NAME:SECRET" or
// "NAME:sha256:HEX" (the SHA-256 of the secret, 64 hex digits); blank
// lines and lines starting with # are skipped. A name is a letter or
// digit then up to 127 of A-Z a-z 0-9 . _ @ -, given once; a secret is at
// least MinSecret bytes. Errors name the line, never a secret.
func ParseTokens(b []byte) ([]Token, error) {
	var out []Token
	seen := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), 1<<20)
	var errs []error
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, secret, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("line %d: want NAME:SECRET or NAME:sha256:HEX", n))
			continue
		case !namePattern.MatchString(name):
			errs = append(errs, fmt.Errorf("line %d: name %q: want a letter or digit then up to 127 of A-Z a-z 0-9 . _ @ -", n, name))
			continue
		case seen[name]:
			errs = append(errs, fmt.Errorf("line %d: name %q given twice", n, name))
			continue
		}
		t := Token{Name: name}
		if h, ok := strings.CutPrefix(secret, "sha256:"); ok {
			raw, err := hex.DecodeString(h)
			if err != nil || len(raw) != sha256.Size {
				errs = append(errs, fmt.Errorf("line %d (%s): sha256: wants 64 hex digits", n, name))
				continue
			}
			copy(t.sum[:], raw)
		} else {
			if len(secret) < MinSecret {
				errs = append(errs, fmt.Errorf("line %d (%s): a secret has at least %d bytes", n, name, MinSecret))
				continue
			}
			t.sum = sha256.Sum256([]byte(secret))
		}
		if sums[t.sum] {
			errs = append(errs, fmt.Errorf("line %d (%s): the same secret as an earlier token", n, name))
			continue
		}
		seen[name], sums[t.sum] = true, true
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// lookup returns the name of the token whose secret is secret. Every
// token is compared, in constant time, whatever matched: the time taken
// says nothing of which token was close.
func lookup(tokens []Token, secret string) (string, bool) {
	if secret == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(secret))
	name := ""
	for i := range tokens {
		if subtle.ConstantTimeCompare(sum[:], tokens[i].sum[:]) == 1 {
			name = tokens[i].Name
		}
	}
	return name, name != ""
}

// CertIdentity is the agent a verified client certificate names: its
// subject's common name, or when it has none its first URI SAN (a SPIFFE
// ID, say), DNS SAN or email SAN, in that order; "" when it names nothing.
func CertIdentity(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	}
	return ""
}

// Config is what the edge authenticates with; at least one of TokensFile
// and ClientCerts.
type Config struct {
	// TokensFile holds the agents' tokens (ParseTokens). It is read again
	// on Reload, and by Run when it changes.
	TokensFile string
	// ClientCerts: a client certificate verified by the listener (TLS with
	// a client CA) names the agent (CertIdentity).
	ClientCerts bool
	// Poll is how often Run looks at the tokens file (2 s).
	Poll time.Duration
	Log  zerolog.Logger
}

// Validate reports a configuration that authenticates nobody.
func (c Config) Validate() error {
	if c.TokensFile == "" && !c.ClientCerts {
		return errors.New("edge authentication needs a tokens file or client certificates")
	}
	return nil
}

// Edge authenticates the requests of a handler (Handler).
type Edge struct {
	cfg    Config
	tokens atomic.Pointer[[]Token]

	mu    lockorder.Mutex[lockorder.EdgeReloadMu] // one reload at a time
	stamp fileStamp                               // of the tokens file last loaded

	m *Metrics
}

// Metrics are the edge's metrics (docs/metrics.md, "proxy"). The HTTP
// mode registers them whether or not it authenticates agents, so that
// every HTTP proxy exports the same series.
type Metrics struct {
	refusals map[session.Code]prometheus.Counter
	loaded   prometheus.Gauge
	reloads  *prometheus.CounterVec
}

// NewMetrics returns the edge's metrics, registered on reg unless it is
// nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{refusals: map[session.Code]prometheus.Counter{}}
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_agent_refusals_total",
		Help: "Requests the proxy's edge refused, by code: agent_unauthenticated, agent_credential_invalid (401), session_forbidden (403, another agent's session).",
	}, []string{"code"})
	for _, c := range RefusalCodes {
		m.refusals[c] = refusals.WithLabelValues(string(c))
	}
	m.loaded = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mcpdrift_proxy_agent_tokens",
		Help: "Agent tokens the proxy's edge holds (from --agent-tokens-file, as last loaded).",
	})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_agent_token_reloads_total",
		Help: "Loads of the agent tokens file after the first, by result: ok, or failed (the tokens held before stay).",
	}, []string{"result"})
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	if reg != nil {
		reg.MustRegister(refusals, m.loaded, m.reloads)
	}
	return m
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// New loads the tokens file; m counts what the edge does (nil: counted
// nowhere).
func New(cfg Config, m *Metrics) (*Edge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	e := &Edge{cfg: cfg, m: m}
	empty := []Token{}
	e.tokens.Store(&empty)
	if cfg.TokensFile != "" {
		if err := e.load(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// load reads the tokens file and, when it parses whole, replaces the
// tokens held.
func (e *Edge) load() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, err := os.Open(e.cfg.TokensFile)
	if err != nil {
		return fmt.Errorf("reading agent tokens: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading agent tokens: %w", err)
	}
	b, err := readLimited(f, 16<<20)
	if err != nil {
		return fmt.Errorf("reading agent tokens: %w", err)
	}
	tokens, err := ParseTokens(b)
	if err != nil {
		return fmt.Errorf("agent tokens file %s: %w", e.cfg.TokensFile, err)
	}
	e.tokens.Store(&tokens)
	e.stamp = fileStamp{mod: st.ModTime(), size: st.Size()}
	e.m.loaded.Set(float64(len(tokens)))
	return nil
}

func readLimited(f *os.File, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("more than %d bytes", max)
	}
	return b, nil
}

// Reload reads the tokens file again; on an error the tokens held stay.
func (e *Edge) Reload() error {
	if e.cfg.TokensFile == "" {
		return nil
	}
	err := e.load()
	result := "ok"
	if err != nil {
		result = "failed"
		e.cfg.Log.Error().Err(err).Msg("agent tokens not reloaded: the tokens loaded before stay")
	} else {
		e.cfg.Log.Info().Int("tokens", len(*e.tokens.Load())).Msg("agent tokens reloaded")
	}
	e.m.reloads.WithLabelValues(result).Inc()
	return err
}

// Run reloads the tokens file when it has changed (size or modification
// time) and then stayed the same for one look (looks every Config.Poll,
// so that a file being rewritten in place is not read half written), and
// on every value of hup (SIGHUP), until ctx ends.
func (e *Edge) Run(ctx context.Context, hup <-chan os.Signal) error {
	if e.cfg.TokensFile == "" {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(e.cfg.Poll)
	defer tick.Stop()
	var seen fileStamp // at the last look, when it differed from the loaded file's
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			_ = e.Reload()
		case <-tick.C:
			st, err := os.Stat(e.cfg.TokensFile)
			if err != nil {
				continue // a file being replaced; a missing one is reported by a reload
			}
			now := fileStamp{mod: st.ModTime(), size: st.Size()}
			e.mu.Lock()
			changed := now != e.stamp
			e.mu.Unlock()
			switch {
			case !changed:
				seen = fileStamp{}
			case now == seen:
				seen = fileStamp{}
				_ = e.Reload()
			default:
				seen = now // changed: reloaded at the next look if it stays so
			}
		}
	}
}

// Handler authenticates every request before next serves it: next sees
// the agent in the request's context (Agent) and never the proxy's own
// credential (Mcpdrift-Agent-Token, and Authorization when it held one of
// the proxy's tokens).
func (e *Edge) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent, code, fromAuthorization := e.authenticate(r)
		if code != "" {
			e.Refuse(w, http.StatusUnauthorized, code)
			return
		}
		r2 := r.WithContext(WithAgent(r.Context(), agent))
		r2.Header = r.Header.Clone()
		r2.Header.Del(Header)
		if fromAuthorization {
			r2.Header.Del("Authorization")
		}
		next.ServeHTTP(w, r2)
	})
}

// Anonymous serves next without authenticating (no edge configured): the
// agent is "", and a Mcpdrift-Agent-Token header a client sends anyway is
// still never forwarded.
func Anonymous(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values(Header)) > 0 {
			r2 := r.Clone(r.Context())
			r2.Header.Del(Header)
			r = r2
		}
		next.ServeHTTP(w, r)
	})
}

// bearer is the secret of a request's one "Authorization: Bearer" header.
func bearer(h http.Header) string {
	vs := h.Values("Authorization")
	if len(vs) != 1 {
		return ""
	}
	scheme, secret, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(secret)
}

// authenticate names the request's agent, or says why it cannot;
// fromAuthorization says that the token was the Authorization header's.
func (e *Edge) authenticate(r *http.Request) (agent string, code session.Code, fromAuthorization bool) {
	tokens := *e.tokens.Load()
	byToken := ""
	if vs := r.Header.Values(Header); len(vs) > 0 {
		name, ok := lookup(tokens, strings.TrimSpace(strings.TrimPrefix(vs[0], "Bearer ")))
		if len(vs) > 1 || !ok {
			return "", CodeInvalidCredential, false
		}
		byToken = name
	} else if name, ok := lookup(tokens, bearer(r.Header)); ok {
		byToken, fromAuthorization = name, true
	}
	byCert, certGiven := "", false
	if e.cfg.ClientCerts && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		certGiven = true
		byCert = CertIdentity(r.TLS.VerifiedChains[0][0])
	}
	switch {
	case certGiven && byCert == "":
		return "", CodeInvalidCredential, false
	case byToken != "" && byCert != "" && byToken != byCert:
		return "", CodeInvalidCredential, false
	case byToken != "":
		return byToken, "", fromAuthorization
	case byCert != "":
		return byCert, "", false
	}
	return "", CodeUnauthenticated, false
}

// Refuse answers a request the edge refuses, and counts it: status (401
// or 403), the proxy's challenge on 401, and a JSON-RPC error with code.
func (e *Edge) Refuse(w http.ResponseWriter, status int, code session.Code) {
	if c := e.m.refusals[code]; c != nil {
		c.Inc()
	}
	Refuse(w, status, code)
}

// Refuse answers a request refused at the edge, uncounted (Edge.Refuse
// counts).
func Refuse(w http.ResponseWriter, status int, code session.Code) {
	text := "mcpdrift proxy: this proxy authenticates agents: send your agent token in the " + Header +
		" header (or as Authorization: Bearer when the MCP server behind it does not use OAuth), or a client certificate"
	switch code {
	case CodeInvalidCredential:
		text = "mcpdrift proxy: the agent credential is not valid here"
	case CodeSessionForbidden:
		text = "mcpdrift proxy: this session was opened by another agent"
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+Realm+`"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(session.Reply(nil, code, text))
}

// TLSConfig is the listener's TLS: its certificate and key and, when
// clientCA is set, the CAs that client certificates are verified against.
// required makes a verified certificate a condition of the handshake (no
// tokens to fall back on); otherwise one is verified when given.
func TLSConfig(certFile, keyFile, clientCA string, required bool) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the listener's certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("reading the client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s: no PEM certificate in it", clientCA)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if required {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, nil
}
