package edgeauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpdrift/mcpdrift/services/internal/pkitest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const (
	aliceSecret = "alice-secret-0123456789"
	bobSecret   = "bob-secret-0123456789abc"
)

func bobHash() string {
	sum := sha256.Sum256([]byte(bobSecret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // names
		err        string
	}{
		{"secret_and_hash", "# agents\nalice:" + aliceSecret + "\n\n bob:" + bobHash() + " \n", []string{"alice", "bob"}, ""},
		{"no_colon", "alice", nil, "line 1: want NAME:SECRET"},
		{"bad_name", "al ice:" + aliceSecret, nil, "name \"al ice\""},
		{"twice", "alice:" + aliceSecret + "\nalice:" + bobSecret, nil, "line 2: name \"alice\" given twice"},
		{"short_secret", "alice:short", nil, "at least 16 bytes"},
		{"bad_hash", "bob:sha256:abcd", nil, "64 hex digits"},
		{"same_secret", "alice:" + aliceSecret + "\nbob:" + aliceSecret, nil, "the same secret as an earlier token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTokens([]byte(tt.file))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				if strings.Contains(err.Error(), aliceSecret) || strings.Contains(err.Error(), bobSecret) {
					t.Fatalf("the error shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tok := range got {
				names = append(names, tok.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("names %v, want %v", names, tt.want)
			}
		})
	}
}

// seen is what the handler behind the edge got.
type seen struct {
	agent string
	h     http.Header
}

func newEdge(t testing.TB, cfg Config) (*Edge, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := New(cfg, NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	return e, reg
}

func tokensFile(t testing.TB, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestHandler: requests with the proxy's tokens name their agent and lose
// the proxy's credential; others are refused 401 with a challenge and a
// JSON-RPC error whose code says why; an Authorization header that is not
// the proxy's passes on untouched (an upstream's OAuth token).
func TestHandler(t *testing.T) {
	e, reg := newEdge(t, Config{TokensFile: tokensFile(t, "alice:"+aliceSecret+"\nbob:"+bobHash()+"\n")})
	var got *seen
	h := e.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = &seen{agent: Agent(r.Context()), h: r.Header}
	}))
	tests := []struct {
		name     string
		headers  map[string]string
		agent    string // "" refused
		code     string
		upstream string // the Authorization the handler gets
	}{
		{"own_header", map[string]string{Header: aliceSecret}, "alice", "", ""},
		{"own_header_bearer_form", map[string]string{Header: "Bearer " + aliceSecret}, "alice", "", ""},
		{"hashed_token_as_authorization", map[string]string{"Authorization": "Bearer " + bobSecret}, "bob", "", ""},
		{"own_header_and_upstream_oauth", map[string]string{Header: bobSecret, "Authorization": "Bearer upstream-oauth-token"}, "bob", "", "Bearer upstream-oauth-token"},
		{"none", nil, "", string(CodeUnauthenticated), ""},
		{"upstream_oauth_only", map[string]string{"Authorization": "Bearer upstream-oauth-token"}, "", string(CodeUnauthenticated), ""},
		{"wrong_own_header", map[string]string{Header: aliceSecret + "x"}, "", string(CodeInvalidCredential), ""},
		{"hash_is_no_secret", map[string]string{Header: bobHash()}, "", string(CodeInvalidCredential), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			r := httptest.NewRequest(http.MethodPost, "/up/mcp", strings.NewReader("{}"))
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if tt.agent == "" {
				if got != nil || w.Code != http.StatusUnauthorized {
					t.Fatalf("status %d (handler reached: %v), want 401 and the handler not reached", w.Code, got != nil)
				}
				if c := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(c, "Bearer ") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", c)
				}
				var body struct {
					Error struct {
						Message string
						Data    struct {
							Code string `json:"mcpdrift/code"`
						} `json:"data"`
					}
				}
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Data.Code != tt.code {
					t.Fatalf("body %s (%v), want a JSON-RPC error with code %s", w.Body, err, tt.code)
				}
				return
			}
			if got == nil || got.agent != tt.agent {
				t.Fatalf("status %d, agent %+v; want %s", w.Code, got, tt.agent)
			}
			if v := got.h.Get(Header); v != "" {
				t.Errorf("the handler got %s: %q", Header, v)
			}
			if v := got.h.Get("Authorization"); v != tt.upstream {
				t.Errorf("the handler got Authorization %q, want %q", v, tt.upstream)
			}
		})
	}
	if n := testutil.ToFloat64(e.m.refusals[CodeInvalidCredential]); n != 2 {
		t.Errorf("agent_credential_invalid refusals counted %v, want 2", n)
	}
	if n, err := testutil.GatherAndCount(reg, "mcpdrift_proxy_agent_refusals_total"); err != nil || n != len(RefusalCodes) {
		t.Errorf("refusal series %d (%v), want %d", n, err, len(RefusalCodes))
	}
}

// TestReload: a changed tokens file is taken up by Run; one that does not
// parse leaves the tokens held.
func TestReload(t *testing.T) {
	file := tokensFile(t, "alice:"+aliceSecret+"\n")
	e, _ := newEdge(t, Config{TokensFile: file, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	agentOf := func(secret string) string {
		name, _ := lookup(*e.tokens.Load(), secret)
		return name
	}
	replaceFile(t, file, "bob:"+bobSecret+"\n")
	poll.Eventually(t, 10*time.Second, func() error {
		if agentOf(bobSecret) != "bob" || agentOf(aliceSecret) != "" {
			return errors.New("the tokens file's change not taken up")
		}
		return nil
	})
	replaceFile(t, file, "not a token file at all\n")
	poll.Eventually(t, 10*time.Second, func() error {
		if testutil.ToFloat64(e.m.reloads.WithLabelValues("failed")) < 1 {
			return errors.New("no failed reload counted")
		}
		return nil
	})
	if agentOf(bobSecret) != "bob" {
		t.Fatal("a tokens file that does not parse replaced the tokens held")
	}
}

// replaceFile replaces file with one holding content, by a rename (as
// docs/agent-auth.md advises).
func replaceFile(t *testing.T, file, content string) {
	t.Helper()
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

func TestCertIdentity(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://example.org/agent/7")
	tests := []struct {
		name string
		c    x509.Certificate
		want string
	}{
		{"cn", x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, DNSNames: []string{"a.example"}}, "alice"},
		{"uri_san", x509.Certificate{URIs: []*url.URL{spiffe}, DNSNames: []string{"a.example"}}, "spiffe://example.org/agent/7"},
		{"dns_san", x509.Certificate{DNSNames: []string{"a.example"}}, "a.example"},
		{"email_san", x509.Certificate{EmailAddresses: []string{"a@example.org"}}, "a@example.org"},
		{"nothing", x509.Certificate{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CertIdentity(&tt.c); got != tt.want {
				t.Fatalf("%q, want %q", got, tt.want)
			}
		})
	}
}

// TestClientCertificates: a real TLS listener with a client CA: a
// certificate it issued names the agent; one that a token contradicts is
// refused; without a certificate (and without tokens) the handshake fails.
func TestClientCertificates(t *testing.T) {
	pki := pkitest.New(t, "alice")
	for _, tokens := range []bool{false, true} {
		name := "certificates_only"
		if tokens {
			name = "certificates_and_tokens"
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{ClientCerts: true}
			if tokens {
				cfg.TokensFile = tokensFile(t, "alice:"+aliceSecret+"\nbob:"+bobSecret+"\n")
			}
			e, _ := newEdge(t, cfg)
			tc, err := TLSConfig(pki.ServerCert, pki.ServerKey, pki.CA, !tokens)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(e.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, Agent(r.Context()))
			})))
			srv.TLS = tc
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
			srv.StartTLS()
			t.Cleanup(srv.Close)
			get := func(cert bool, token string) (int, string, error) {
				c := &tls.Config{RootCAs: pki.Pool}
				if cert {
					c.Certificates = []tls.Certificate{pki.Client}
				}
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				if token != "" {
					req.Header.Set(Header, token)
				}
				resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: c}}).Do(req)
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), nil
			}
			if st, body, err := get(true, ""); err != nil || st != http.StatusOK || body != "alice" {
				t.Fatalf("with alice's certificate: %d %q %v, want 200 alice", st, body, err)
			}
			st, body, err := get(false, "")
			switch {
			case !tokens && err == nil:
				t.Fatalf("without a certificate: %d %q, want the handshake refused", st, body)
			case tokens && (err != nil || st != http.StatusUnauthorized):
				t.Fatalf("without a certificate or token: %d %q %v, want 401", st, body, err)
			}
			if tokens {
				if st, body, err := get(true, bobSecret); err != nil || st != http.StatusUnauthorized || !strings.Contains(body, string(CodeInvalidCredential)) {
					t.Fatalf("alice's certificate with bob's token: %d %q %v, want 401 %s", st, body, err, CodeInvalidCredential)
				}
				if st, body, err := get(false, bobSecret); err != nil || st != http.StatusOK || body != "bob" {
					t.Fatalf("bob's token without a certificate: %d %q %v, want 200 bob", st, body, err)
				}
			}
		})
	}
}

// BenchmarkHandler is the edge's own cost per request (authenticated by a
// token among 100, its header taken off), against the same request
// served without the edge (Anonymous) in the same run: ns-x-anonymous.
func BenchmarkHandler(b *testing.B) {
	var file strings.Builder
	for i := range 100 {
		fmt.Fprintf(&file, "agent-%d:secret-of-agent-%d-0123456789\n", i, i)
	}
	e, _ := newEdge(b, Config{TokensFile: tokensFile(b, file.String())})
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	r := httptest.NewRequest(http.MethodPost, "/up/mcp", nil)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Mcp-Session-Id", "0123456789abcdef")
	r.Header.Set(Header, "secret-of-agent-57-0123456789")
	w := httptest.NewRecorder()
	run := func(h http.Handler) time.Duration {
		start := time.Now()
		for range b.N {
			h.ServeHTTP(w, r)
		}
		return time.Since(start)
	}
	anon := run(Anonymous(next))
	b.ResetTimer()
	edge := run(e.Handler(next))
	b.ReportMetric(float64(edge)/float64(anon), "ns-x-anonymous")
}
