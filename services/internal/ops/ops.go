// Package ops is what every mcpdrift service serves to its operators on one
// listener of its own (--ops-addr): /healthz (the process runs), /readyz (every
// readiness check passes: connected to NATS, and what else the service
// registered) and /metrics (Prometheus text format, from a registry per
// process with the Go and process collectors and the service's own mcpdrift_
// metrics). It also holds the checks and collectors every service shares: NATS
// connected, stopping, and the lag of JetStream consumers.
// docs/metrics.md lists every metric and the endpoints.
package ops

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// Namespace starts every mcpdrift metric name.
const Namespace = "mcpdrift"

// CheckTimeout bounds one readiness check; a check that takes longer fails.
const CheckTimeout = 2 * time.Second

// Server serves /healthz, /readyz and /metrics for one service.
type Server struct {
	log zerolog.Logger
	reg *prometheus.Registry

	mu     sync.Mutex
	checks []check
	lag    *lagCollector

	token []byte // RequireToken's secret; nil: open
}

type check struct {
	name string
	fn   func(ctx context.Context) error
}

// New returns the ops server of a service with a fresh registry holding the
// Go and process collectors and mcpdrift_build_info, whose service label is
// the only place the service's name appears in its metrics (each process has
// a registry of its own; Prometheus adds job and instance).
func New(service string, log zerolog.Logger) *Server {
	reg := prometheus.NewRegistry()
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        Namespace + "_build_info",
		Help:        "Always 1: the service this process runs, its module version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"service": service, "version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	s := &Server{log: log, reg: reg}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
		readiness{s},
	)
	return s
}

// Registry is where the service registers its metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// AddCheck adds a readiness check: /readyz answers 200 only while every check
// returns nil. A check gets a context bounded by CheckTimeout and should be
// cheap (a scrape of /readyz runs them all). The error it returns is shown to
// whoever can reach the ops listener: no secrets in it.
func (s *Server) AddCheck(name string, fn func(ctx context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, check{name: name, fn: fn})
}

// RequireToken makes /metrics, and the reasons /readyz gives, answer only
// a request with "Authorization: Bearer <secret>" (compared in constant
// time); /healthz and /readyz's status stay open for probes. Call it
// before Handler.
func (s *Server) RequireToken(secret []byte) { s.token = slices.Clone(secret) }

// authorized reports whether r may see what RequireToken guards.
func (s *Server) authorized(r *http.Request) bool {
	if s.token == nil {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), s.token) == 1
}

// Handler serves GET /healthz, /readyz and /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog:            promLogger{s.log},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpdrift-ops"`)
			http.Error(w, "unauthenticated: /metrics needs the ops token (Authorization: Bearer <token>)", http.StatusUnauthorized)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	return mux
}

// checked is the result of one readiness check.
type checked struct {
	name string
	err  error
}

// runChecks runs every readiness check, each bounded by CheckTimeout, in
// the order they were added.
func (s *Server) runChecks(ctx context.Context) []checked {
	s.mu.Lock()
	checks := slices.Clone(s.checks)
	s.mu.Unlock()
	out := make([]checked, 0, len(checks))
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		out = append(out, checked{c.name, c.fn(cctx)})
		cancel()
	}
	return out
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	var failed []string
	for _, c := range s.runChecks(r.Context()) {
		if c.err != nil {
			failed = append(failed, c.name+": "+oneLine(c.err.Error()))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		if !s.authorized(r) {
			fmt.Fprintln(w, "not ready") // the reasons need the ops token
			return
		}
		fmt.Fprintf(w, "not ready\n%s\n", strings.Join(failed, "\n"))
		return
	}
	fmt.Fprintln(w, "ready")
}

var (
	descReady = prometheus.NewDesc(Namespace+"_ready",
		"1 while every readiness check passes (GET /readyz answers 200), 0 otherwise.", nil, nil)
	descReadyCheck = prometheus.NewDesc(Namespace+"_ready_check",
		"1 while the readiness check named by the label passes, 0 while it fails (its reason is on GET /readyz).", []string{"check"}, nil)
)

// readiness exports what /readyz answers, running the checks when
// scraped: mcpdrift_ready, and mcpdrift_ready_check by check name (names
// are fixed in the code: a handful per service).
type readiness struct{ s *Server }

func (r readiness) Describe(ch chan<- *prometheus.Desc) {
	ch <- descReady
	ch <- descReadyCheck
}

func (r readiness) Collect(ch chan<- prometheus.Metric) {
	ready := 1.0
	var names []string
	passing := map[string]float64{} // a name added twice fails if either fails
	for _, c := range r.s.runChecks(context.Background()) {
		if _, ok := passing[c.name]; !ok {
			names = append(names, c.name)
			passing[c.name] = 1
		}
		if c.err != nil {
			passing[c.name], ready = 0, 0
		}
	}
	for _, n := range names {
		ch <- prometheus.MustNewConstMetric(descReadyCheck, prometheus.GaugeValue, passing[n], n)
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
}

// oneLine keeps a check's error to one short line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// ErrAddrInUse is returned by RunWith when another process holds the address.
var ErrAddrInUse = errors.New("ops: address already in use")

// ShutdownTimeout bounds the graceful shutdown of the ops listener.
const ShutdownTimeout = 5 * time.Second

// listen takes addr (ErrAddrInUse if another process holds it).
func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w: listening on %s: another process holds it (set --ops-addr to a free address)", ErrAddrInUse, addr)
		}
		return nil, fmt.Errorf("ops: listening on %s: %w", addr, err)
	}
	return ln, nil
}

// serve serves Handler on ln until ctx ends, then shuts down gracefully.
func (s *Server) serve(ctx context.Context, ln net.Listener, addr string) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.log.Info().Str("addr", ln.Addr().String()).Msg("ops listening")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("ops: serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-served // http.ErrServerClosed
	return nil
}

// RunWith runs fn and, when addr is not empty, the ops listener on addr
// beside it, and returns fn's error or the listener's. Readiness turns false
// as soon as ctx ends, before fn drains; the listener stops only after fn
// returned, so that a scrape still sees the drain. The address is taken
// before fn starts: if it cannot be (ErrAddrInUse), RunWith returns that
// error and fn never runs.
func (s *Server) RunWith(ctx context.Context, addr string, fn func(ctx context.Context) error) error {
	s.AddCheck("running", Running(ctx))
	if addr == "" {
		return fn(ctx)
	}
	ln, err := listen(ctx, addr)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(gctx))
	g.Go(func() error {
		defer stopOps()
		return s.serve(opsCtx, ln, addr)
	})
	g.Go(func() error {
		defer stopOps()
		return fn(gctx)
	})
	return g.Wait()
}

// Starting adds the readiness check "started", which fails with why until
// the function it returns is called (the service has connected and set up).
func (s *Server) Starting(why string) (started func()) {
	var done atomic.Bool
	s.AddCheck("started", func(context.Context) error {
		if !done.Load() {
			return errors.New(why)
		}
		return nil
	})
	return func() { done.Store(true) }
}

// Running is a readiness check that fails once ctx ends: registered with the
// context whose end stops the service, readiness turns false as soon as the
// service begins to stop, before it drains.
func Running(ctx context.Context) func(context.Context) error {
	return func(context.Context) error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		return nil
	}
}

// NATSConnected is a readiness check that passes while nc is connected.
func NATSConnected(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("not connected to NATS (%s)", strings.ToLower(st.String()))
		}
		return nil
	}
}

// promLogger hands promhttp's errors (a collector failed) to zerolog.
type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn().Str("err", strings.TrimSpace(fmt.Sprintln(v...))).Msg("metrics gathering")
}
