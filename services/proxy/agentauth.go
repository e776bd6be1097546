package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/edgeauth"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// edgeConfig is how the HTTP mode's listener authenticates agents and
// serves TLS (docs/agent-auth.md).
type edgeConfig struct {
	TokensFile string // --agent-tokens-file
	TLSCert    string // --tls-cert
	TLSKey     string // --tls-key
	ClientCA   string // --client-ca
}

func (c *edgeConfig) options() []options.Option {
	return []options.Option{
		options.Opt("agent-tokens-file", "MCPDRIFT_AGENT_TOKENS_FILE", "FILE", "HTTP mode: agents authenticate with a token from this file, a line NAME:SECRET or NAME:sha256:HEX each (docs/agent-auth.md), sent in the Mcpdrift-Agent-Token header or as Authorization: Bearer; read again on SIGHUP and when it changes", options.String(&c.TokensFile)),
		options.Opt("tls-cert", "MCPDRIFT_TLS_CERT", "FILE", "HTTP mode: serve HTTPS with this certificate (PEM; with --tls-key)", options.String(&c.TLSCert)),
		options.Opt("tls-key", "MCPDRIFT_TLS_KEY", "FILE", "HTTP mode: the private key of --tls-cert (PEM)", options.String(&c.TLSKey)),
		options.Opt("client-ca", "MCPDRIFT_CLIENT_CA", "FILE", "HTTP mode (with --tls-cert): agents authenticate with client certificates issued by these CAs (PEM); the agent is the subject's CN, else the first URI, DNS or email SAN; required unless --agent-tokens-file is set too", options.String(&c.ClientCA)),
	}
}

// set reports whether any edge setting is given.
func (c edgeConfig) set() bool {
	return c.TokensFile != "" || c.TLSCert != "" || c.TLSKey != "" || c.ClientCA != ""
}

// authenticates reports whether agents are authenticated.
func (c edgeConfig) authenticates() bool { return c.TokensFile != "" || c.ClientCA != "" }

func (c edgeConfig) validate() error {
	var errs []error
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.ClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("--client-ca needs --tls-cert and --tls-key (client certificates come with TLS)"))
	}
	if c.TokensFile != "" {
		b, err := os.ReadFile(c.TokensFile)
		if err == nil {
			_, err = edgeauth.ParseTokens(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--agent-tokens-file: %w", err))
		}
	}
	if c.TLSCert != "" && c.TLSKey != "" {
		if _, err := edgeauth.TLSConfig(c.TLSCert, c.TLSKey, c.ClientCA, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readOpsToken reads the ops listener's secret: the file's content, blanks
// around it trimmed.
func readOpsToken(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) < edgeauth.MinSecret {
		return nil, fmt.Errorf("the secret has fewer than %d bytes", edgeauth.MinSecret)
	}
	return b, nil
}

// edge is the listener's agent authentication while the HTTP mode runs.
type edge struct {
	auth *edgeauth.Edge // nil: agents are not authenticated
	tls  *tls.Config    // nil: plain HTTP
	stop func()         // ends the tokens file's reloads and waits for them
}

// startEdge sets up the listener's authentication and TLS and, with a
// tokens file, its reloads on SIGHUP and on change until stop. Without
// any, it says in the log that agents are not authenticated.
func startEdge(cfg edgeConfig, reg prometheus.Registerer, log zerolog.Logger) (*edge, error) {
	e := &edge{stop: func() {}}
	m := edgeauth.NewMetrics(reg) // exported whether or not agents are authenticated
	if cfg.TLSCert != "" {
		var err error
		if e.tls, err = edgeauth.TLSConfig(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA, cfg.TokensFile == ""); err != nil {
			return nil, err
		}
	}
	if !cfg.authenticates() {
		log.Warn().Msg("agents are not authenticated: whoever reaches --listen uses every upstream behind it (set --agent-tokens-file or --client-ca; docs/agent-auth.md)")
		return e, nil
	}
	var err error
	e.auth, err = edgeauth.New(edgeauth.Config{TokensFile: cfg.TokensFile, ClientCerts: cfg.ClientCA != "", Log: log}, m)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.auth.Run(ctx, hup) })
	e.stop = func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
	log.Info().Bool("tokens", cfg.TokensFile != "").Bool("client_certificates", cfg.ClientCA != "").Msg("agents are authenticated")
	return e, nil
}

// handler authenticates the requests of next (the upstreams' routes).
func (e *edge) handler(next http.Handler) http.Handler {
	if e.auth == nil {
		return edgeauth.Anonymous(next)
	}
	return e.auth.Handler(next)
}

// refuse is what the HTTP side refuses another agent's session with.
func (e *edge) refuse() func(http.ResponseWriter, int, session.Code) {
	if e.auth == nil {
		return nil
	}
	return e.auth.Refuse
}

// listen wraps ln in TLS when the edge serves it, and returns the scheme.
func (e *edge) listen(ln net.Listener) (net.Listener, string) {
	if e.tls == nil {
		return ln, "http"
	}
	return tls.NewListener(ln, e.tls), "https"
}
