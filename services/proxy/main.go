// Command proxy is the mcpdrift MCP proxy. On stdio an agent runs it in
// place of an MCP server,
//
//	proxy --server-id fs -- npx -y @modelcontextprotocol/server-filesystem /data
//
// and the proxy runs the server; on HTTP it fronts one or more remote MCP
// servers, each under its own server id,
//
//	proxy --listen 127.0.0.1:8080 --upstream search=https://mcp.example.com/mcp --upstream old=sse:http://10.0.0.5/sse
//
// Either way it forwards every message as the original bytes, publishes
// what each server advertises and every tools/call to NATS, and withholds
// what the drift service has not approved (fail closed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/metrics"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/stdio"
)

func main() {
	code, err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "proxy: %v\n", err)
			code = 2
		}
	}
	os.Exit(code) // the only exit: the upstream server's exit code, or 2
}

// Config is everything the command is configured with.
type Config struct {
	Tenant         string
	ServerID       string
	ProxyID        string
	NATSURL        string
	NATSCreds      string
	OutboxDir      string
	FirstSightWait time.Duration
	Arguments      string // what a call observation holds of the arguments: digest or full
	LogLevel       zerolog.Level
	Command        []string
	OpsAddr        string     // the ops listener (/healthz, /readyz, /metrics), or "" for none
	Listen         string     // HTTP mode: the address to serve on
	Upstreams      []upstream // HTTP mode: the servers fronted
}

// upstream is one --upstream ID=URL (Streamable HTTP) or ID=sse:URL
// (HTTP+SSE, 2024-11-05).
type upstream struct {
	ID, URL string
	SSE     bool
}

type upstreamList []upstream

func (l *upstreamList) String() string { return "" }

func (l *upstreamList) Set(v string) error {
	for _, one := range strings.Split(v, ",") {
		id, u, ok := strings.Cut(strings.TrimSpace(one), "=")
		if !ok || id == "" || u == "" {
			return fmt.Errorf("upstream %q: want ID=URL or ID=sse:URL", one)
		}
		up := upstream{ID: id, URL: u}
		if rest, ok := strings.CutPrefix(u, "sse:"); ok {
			up.URL, up.SSE = rest, true
		}
		*l = append(*l, up)
	}
	return nil
}

const usage = `proxy: the mcpdrift MCP proxy

Usage: proxy --server-id ID [flags] -- COMMAND [ARGS...]        (stdio)
       proxy --listen ADDR --upstream ID=URL [--upstream ...]  (HTTP)

stdio: the agent speaks MCP to this process on stdin and stdout; the proxy
runs COMMAND as the upstream server.

HTTP: the proxy serves each upstream under its server id: Streamable HTTP at
http://ADDR/ID/mcp (sessions, and the stateless 2026-07-28 protocol) for
--upstream ID=URL, and HTTP+SSE (2024-11-05) at http://ADDR/ID/sse for
--upstream ID=sse:URL. /healthz answers while the proxy runs; /readyz while
it is connected to NATS, its status watches are up and every upstream is
reachable.

--ops-addr serves /healthz, /readyz and Prometheus /metrics on a listener of
its own, in either mode.

Tools the drift service has not approved are withheld from listings and
their calls refused with an MCP tool error. Logs go to stderr. Every flag
can also be set by the environment variable shown.

Flags:
`

var idClean = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// The --arguments modes.
const (
	argumentsDigest = "digest"
	argumentsFull   = "full"
)

// sessionConfig is the session configuration of one upstream server.
func (c Config) sessionConfig(server string) session.Config {
	return session.Config{Server: server, Timeout: c.FirstSightWait, FullArguments: c.Arguments == argumentsFull}
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	host, _ := os.Hostname()
	defaultOutbox := filepath.Join(os.TempDir(), "mcpdrift-outbox")
	if dir, err := os.UserCacheDir(); err == nil {
		defaultOutbox = filepath.Join(dir, "mcpdrift", "outbox")
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	tenant := fs.String("tenant", env("MCPDRIFT_TENANT", "default"), "tenant `id` (MCPDRIFT_TENANT)")
	server := fs.String("server-id", env("MCPDRIFT_SERVER_ID", ""), "the upstream server's `id`, the same on every proxy that fronts it (MCPDRIFT_SERVER_ID; required)")
	proxyID := fs.String("proxy-id", env("MCPDRIFT_PROXY_ID", strings.Trim(idClean.ReplaceAllString(host, "-"), "-")), "this proxy node's `id` (MCPDRIFT_PROXY_ID)")
	natsURL := fs.String("nats-url", env("MCPDRIFT_NATS_URL", nats.DefaultURL), "NATS server `URL` (MCPDRIFT_NATS_URL)")
	creds := fs.String("nats-creds", env("MCPDRIFT_NATS_CREDS", ""), "NATS credentials `file` (MCPDRIFT_NATS_CREDS)")
	outbox := fs.String("outbox-dir", env("MCPDRIFT_OUTBOX_DIR", defaultOutbox), "where events wait while NATS is unreachable (MCPDRIFT_OUTBOX_DIR)")
	wait := fs.Duration("first-sight-wait", durationEnv(getenv, "MCPDRIFT_FIRST_SIGHT_WAIT", 2*time.Second), "how long a decision waits for a verdict on a server never seen (MCPDRIFT_FIRST_SIGHT_WAIT)")
	arguments := fs.String("arguments", env("MCPDRIFT_ARGUMENTS", argumentsDigest), "what call observations hold of tool-call `arguments`: digest (a SHA-256 digest only) or full (the arguments too, as the client wrote them; they can hold secrets) (MCPDRIFT_ARGUMENTS)")
	logLevel := fs.String("log-level", env("MCPDRIFT_LOG_LEVEL", "warn"), "log `level` (MCPDRIFT_LOG_LEVEL)")
	opsAddr := fs.String("ops-addr", env("MCPDRIFT_OPS_ADDR", ""), "serve /healthz, /readyz and /metrics on this `address` (MCPDRIFT_OPS_ADDR; default: off)")
	listen := fs.String("listen", env("MCPDRIFT_LISTEN", ""), "HTTP mode: serve on this `address`, e.g. 127.0.0.1:8080 (MCPDRIFT_LISTEN)")
	var ups upstreamList
	fs.Var(&ups, "upstream", "HTTP mode: an upstream `ID=URL` (Streamable HTTP) or ID=sse:URL (HTTP+SSE); repeat for several (MCPDRIFT_UPSTREAMS, comma-separated)")
	if v := getenv("MCPDRIFT_UPSTREAMS"); v != "" {
		if err := ups.Set(v); err != nil {
			return Config{}, err
		}
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	cfg := Config{Tenant: *tenant, ServerID: *server, ProxyID: *proxyID, NATSURL: *natsURL, NATSCreds: *creds,
		OutboxDir: *outbox, FirstSightWait: *wait, Arguments: *arguments, Command: fs.Args(), OpsAddr: *opsAddr, Listen: *listen, Upstreams: ups}
	var errs []error
	ids := [][2]string{{"tenant", cfg.Tenant}, {"server", cfg.ServerID}, {"proxy", cfg.ProxyID}}
	if cfg.Listen == "" {
		if cfg.ServerID == "" {
			errs = append(errs, errors.New("--server-id is required"))
		}
		if len(cfg.Command) == 0 {
			errs = append(errs, errors.New("no upstream command: give it after --"))
		}
		if len(cfg.Upstreams) > 0 {
			errs = append(errs, errors.New("--upstream needs --listen (HTTP mode)"))
		}
	} else {
		if len(cfg.Command) > 0 || cfg.ServerID != "" {
			errs = append(errs, errors.New("HTTP mode (--listen) takes its servers from --upstream, not --server-id or a command"))
		}
		if len(cfg.Upstreams) == 0 {
			errs = append(errs, errors.New("HTTP mode needs at least one --upstream ID=URL"))
		}
		for _, u := range cfg.Upstreams {
			ids = append(ids, [2]string{"server", u.ID})
		}
	}
	for _, id := range ids {
		if id[1] != "" {
			if err := bus.ValidID(id[0], id[1]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if cfg.FirstSightWait <= 0 {
		errs = append(errs, errors.New("--first-sight-wait must be positive"))
	}
	if cfg.Arguments != argumentsDigest && cfg.Arguments != argumentsFull {
		errs = append(errs, fmt.Errorf("--arguments %q: want %s or %s", cfg.Arguments, argumentsDigest, argumentsFull))
	}
	var err error
	if cfg.LogLevel, err = zerolog.ParseLevel(*logLevel); err != nil {
		errs = append(errs, fmt.Errorf("log level %q: %w", *logLevel, err))
	}
	if len(errs) > 0 {
		fs.Usage()
	}
	return cfg, errors.Join(errs...)
}

func durationEnv(getenv func(string) string, k string, def time.Duration) time.Duration {
	if v := getenv(k); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		return -1 // reported by the check above
	}
	return def
}

// natsInboxPrefix is where a proxy's replies arrive (JetStream API answers,
// publish acks, status watch updates, manifest chunks): one prefix per
// tenant, the only inbox its tenant's proxy user may subscribe to
// (deploy/nats/auth.conf), so that one tenant's proxy cannot read another's.
// The tenant is a single subject token (bus.ValidID).
func natsInboxPrefix(tenant string) string { return "_INBOX_proxy_" + tenant }

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0, err
	}
	if err != nil {
		return 2, err
	}
	// base names no server: the gate and the publisher add tenant and
	// server themselves, so each line names the server once.
	base := zerolog.New(stderr).Level(cfg.LogLevel).With().Timestamp().Str("service", "proxy").Logger()
	log := base
	if cfg.ServerID != "" {
		log = log.With().Str("server", cfg.ServerID).Logger()
	}

	// NATS may be down: the proxy starts anyway, fails closed on what it
	// does not know, and spools its events.
	opts := []nats.Option{nats.Name("mcpdrift-proxy-" + cfg.ProxyID), nats.CustomInboxPrefix(natsInboxPrefix(cfg.Tenant)),
		nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(time.Second)}
	if cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	}
	nc, err := nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return 2, fmt.Errorf("connecting to NATS at %s: %w", bus.RedactURLs(cfg.NATSURL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 2, err
	}
	o := ops.New("proxy", log)
	o.AddCheck("nats", ops.NATSConnected(nc))
	var code int
	serve := func(ctx context.Context) error {
		var err error
		code, err = serveStdio(ctx, cfg, js, base, o, stdin, stdout, stderr)
		return err
	}
	if cfg.Listen != "" {
		// SIGINT and SIGTERM stop the HTTP mode (readiness turns false at
		// once); on stdio they are the server's, passed on to it.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		serve = func(ctx context.Context) error {
			var err error
			code, err = serveHTTP(ctx, cfg, js, base, o, stderr)
			return err
		}
	}
	if err := o.RunWith(ctx, cfg.OpsAddr, serve); err != nil {
		return max(code, 2), err
	}
	return code, nil
}

// serveStdio runs the stdio mode until the upstream server exits and
// returns its exit code. base is the service's logger, naming no server.
func serveStdio(ctx context.Context, cfg Config, js jetstream.JetStream, base zerolog.Logger, o *ops.Server, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	log := base.With().Str("server", cfg.ServerID).Logger()
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	gate, pub, err := startFleet(ctx, bg, &wg, js, cfg, cfg.ServerID, cfg.OutboxDir, base)
	if err != nil {
		stopBG()
		return 2, err
	}
	m := metrics.New(o.Registry(), []metrics.Upstream{{Gate: gate, Publisher: pub}})
	o.AddCheck("gate", gateCheck(map[string]*fleet.Gate{cfg.ServerID: gate}))

	p, err := stdio.Start(stdio.Config{Command: cfg.Command[0], Args: cfg.Command[1:]}, stdout, stderr)
	if err != nil {
		stopBG()
		wg.Wait()
		return 2, err
	}
	o.AddCheck("upstream", func(context.Context) error {
		if !p.Running() {
			return errors.New("the server process has exited")
		}
		return nil
	})
	scfg := cfg.sessionConfig(cfg.ServerID)
	scfg.SerialServer = true // one reader of the server's stdout
	scfg.Meter = newLoggedMeter(m, log)
	sess := session.New(scfg, gate, m.Observer(pub), p.Pipes().ToClient, p.Pipes().ToServer)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	code, serveErr := p.Serve(ctx, sess, stdin, sigs)
	sess.Wait() // decisions made off the reader report what they saw before the flush

	// The server is gone: flush what is queued (to NATS or the outbox).
	stopBG()
	wg.Wait()
	if cerr := pub.Close(); cerr != nil {
		log.Warn().Err(cerr).Msg("closing the publisher")
	}
	if serveErr != nil {
		return code, fmt.Errorf("serving: %w", serveErr)
	}
	return code, nil
}

// gateCheck is the readiness check "gate": every server's status watch is
// up and has loaded the records that exist.
func gateCheck(gates map[string]*fleet.Gate) func(context.Context) error {
	return func(context.Context) error {
		var down []string
		for id, g := range gates {
			if !g.Watching() {
				down = append(down, id)
			}
		}
		if len(down) > 0 {
			slices.Sort(down)
			return fmt.Errorf("no status watch for %s (answering from memory)", strings.Join(down, ", "))
		}
		return nil
	}
}

// startFleet makes the gate and the publisher of one upstream server and runs
// both on bg (counted in wg) until it ends. base must not name the server:
// the gate and the publisher add tenant and server to their lines.
func startFleet(ctx, bg context.Context, wg *sync.WaitGroup, js jetstream.JetStream, cfg Config, server, outbox string, base zerolog.Logger) (*fleet.Gate, *fleet.Publisher, error) {
	gate, err := fleet.NewGate(ctx, js, cfg.Tenant, server, base)
	if err != nil {
		return nil, nil, err
	}
	pub, err := fleet.NewPublisher(fleet.Config{Tenant: cfg.Tenant, Server: server, Proxy: cfg.ProxyID, Dir: outbox}, fleet.Deps{JS: js, Log: base})
	if err != nil {
		return nil, nil, err
	}
	log := base.With().Str("tenant", cfg.Tenant).Str("server", server).Logger()
	for _, part := range []func(context.Context) error{gate.Run, pub.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := part(bg); err != nil && !errors.Is(err, context.Canceled) {
				log.Error().Err(err).Msg("fleet connection stopped")
			}
		}()
	}
	return gate, pub, nil
}
