package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/metrics"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/streamhttp"
)

// serveHTTP runs the HTTP mode until ctx ends (SIGINT or SIGTERM): a gate
// and a publisher (with its own outbox) per upstream, one listener for all.
// The listener also answers /healthz and /readyz with o's checks.
func serveHTTP(ctx context.Context, cfg Config, js jetstream.JetStream, log zerolog.Logger, o *ops.Server, stderr io.Writer) (int, error) {
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var pubs []*fleet.Publisher
	defer func() {
		stopBG()
		wg.Wait()
		for _, p := range pubs {
			if err := p.Close(); err != nil {
				log.Warn().Err(err).Msg("closing a publisher")
			}
		}
	}()
	servers := make([]fronted, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		servers[i] = fronted{u.ID, filepath.Join(cfg.OutboxDir, u.ID)}
	}
	gateList, pubs, fatal, err := startFleet(bg, &wg, js, cfg, servers, log)
	if err != nil {
		return options.ExitFailure, err
	}
	gates := map[string]*fleet.Gate{}
	var upstreams []metrics.Upstream
	for i, u := range cfg.Upstreams {
		gates[u.ID] = gateList[i]
		upstreams = append(upstreams, metrics.Upstream{Gate: gateList[i], Publisher: pubs[i]})
	}
	en, err := startEnforcement(bg, &wg, js, cfg, o, log)
	if err != nil {
		return options.ExitFailure, err
	}
	m := metrics.New(o.Registry(), upstreams)
	m.AddPolicy(o.Registry(), en.policy, en.approvals)
	var ups []streamhttp.Upstream
	for i, u := range cfg.Upstreams {
		scfg := cfg.sessionConfig(u.ID, en)
		scfg.Meter = newLoggedMeter(m, log.With().Str("server", u.ID).Logger())
		up := streamhttp.Upstream{ID: u.ID, Gate: gates[u.ID], Observer: m.Observer(pubs[i]), Session: scfg}
		if u.SSE {
			up.SSEURL = u.URL
		} else {
			up.URL = u.URL
		}
		ups = append(ups, up)
	}
	edge, err := startEdge(cfg.Edge, o.Registry(), log)
	if err != nil {
		return options.ExitFailure, err
	}
	defer edge.stop()
	px, err := streamhttp.New(streamhttp.Config{Log: log, Refuse: edge.refuse(), Stripped: strippedCounter(o.Registry())}, ups)
	if err != nil {
		return options.ExitFailure, err
	}
	defer px.Close()
	o.AddCheck("gate", gateCheck(gates))
	o.AddCheck("upstream", upstreamCheck(cfg.Upstreams))

	// /healthz and /readyz here too, for load balancers in front of the
	// proxy; /metrics only on the ops listener.
	opsHandler := o.Handler()
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", opsHandler)
	mux.Handle("GET /readyz", opsHandler)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return options.ExitFailure, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	// Host and Origin are checked first (DNS rebinding), then the agent's
	// credentials; the OAuth discovery routes are public metadata that
	// clients fetch without the agent's headers, so the edge does not ask
	// for them (transparency.md, agent-auth.md).
	hosts := hostPolicy(cfg, ln.Addr(), log)
	public := streamhttp.GuardHosts(hosts, px)
	for _, route := range streamhttp.OAuthRoutes {
		mux.Handle(route, public)
	}
	mux.Handle("/", streamhttp.GuardHosts(hosts, edge.handler(px)))
	ln, scheme := edge.listen(ln)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("listen", ln.Addr().String()).Int("upstreams", len(ups)).Msg("serving")
	fmt.Fprintf(stderr, "proxy: serving %d upstream(s) on %s://%s/<server-id>/mcp\n", len(ups), scheme, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return options.ExitFailure, fmt.Errorf("serving: %w", err)
	case err := <-fatal:
		_ = srv.Close()
		return options.ExitFailure, err
	case <-ctx.Done():
	}
	// Streams stay open until their clients leave: give them a grace, then
	// end them.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return 0, nil
}

// hostPolicy is what the listener at addr accepts in Host and Origin:
// the flags, and where they are not given, the loopback defaults on a
// loopback address; elsewhere any Host and no Origin (a warning says so).
func hostPolicy(cfg Config, addr net.Addr, log zerolog.Logger) streamhttp.HostPolicy {
	p := streamhttp.HostPolicy{Hosts: cfg.AllowedHosts, Origins: cfg.AllowedOrigins}
	def, loopback := streamhttp.LoopbackPolicy(addr)
	if p.Hosts == nil {
		p.Hosts = def.Hosts
		if !loopback {
			p.Hosts = []string{"*"}
			log.Warn().Str("listen", addr.String()).Msg("no --allowed-hosts on a listener that is not loopback: the Host header is not checked")
		}
	}
	if p.Origins == nil {
		p.Origins = def.Origins
	}
	return p
}

// upstreamCheck is the readiness check "upstream" of the HTTP mode: every
// upstream server accepts a TCP connection (nothing is sent: no session is
// opened, nothing is logged upstream).
func upstreamCheck(ups []upstream) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, u := range ups {
			if err := reachable(ctx, u.URL); err != nil {
				errs = append(errs, fmt.Errorf("server %s unreachable: %w", u.ID, err))
			}
		}
		return errors.Join(errs...)
	}
}

// reachable dials the host of an http(s) URL.
func reachable(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return op.Err // without the address: readiness text stays short
		}
		return err
	}
	return c.Close()
}

// strippedCounter counts the headers the HTTP side drops or scopes so that
// upstreams sharing the proxy's origin share no client state (streamhttp,
// isolate.go), by class: a fixed label set, every class shown from the
// start.
func strippedCounter(reg prometheus.Registerer) func(class string) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_upstream_headers_stripped_total",
		Help: "Headers of upstream answers (and cookies of client requests) the proxy dropped or scoped so that upstreams sharing its origin share no client state, by header class.",
	}, []string{"header"})
	counters := map[string]prometheus.Counter{}
	for _, class := range streamhttp.StripClasses {
		counters[class] = c.WithLabelValues(class)
	}
	reg.MustRegister(c)
	return func(class string) {
		if n, ok := counters[class]; ok {
			n.Inc()
		}
	}
}
