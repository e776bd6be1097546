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
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/metrics"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/stdio"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/streamhttp"
)

func main() {
	code, err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if err == nil {
		err = options.ExitStatus(code) // the upstream server's exit status
	}
	options.Exit("proxy", err)
}

// Config is everything the command is configured with.
type Config struct {
	options.Service // NATS, log level, ops address; it sets up no stream
	Tenant          string
	ServerID        string
	ProxyID         string
	OutboxDir       string
	// StatusCopyKey is the HMAC key of the status copies
	// (--status-cache-key-file); nil: one generated in each copy directory.
	StatusCopyKey    []byte
	StatusCopyMaxAge time.Duration // 0: no status copy
	FirstSightWait   time.Duration
	Arguments        string // what a call observation holds of the arguments: digest or full
	Policy           string // the per-call policy: enforce or off
	ApprovalWait     time.Duration
	Command          []string
	Listen           string     // HTTP mode: the address to serve on
	Upstreams        []upstream // HTTP mode: the servers fronted
	// AllowedHosts and AllowedOrigins are what the HTTP listener accepts in
	// Host and Origin (DNS rebinding, rebinding.go of streamhttp); nil: the
	// loopback defaults on a loopback listener.
	AllowedHosts, AllowedOrigins []string
	Edge                         edgeConfig // HTTP mode: agent authentication and TLS (agentauth.go)
	// Agent is the stdio agent's name in observations (--agent; by
	// default stdio:uid=<uid>).
	Agent string
	// OpsToken guards the ops listener's /metrics and readiness details
	// (--ops-token-file); nil: open.
	OpsToken []byte
	// CPUProfile, when set, is where a CPU profile of the whole run is
	// written (--cpu-profile).
	CPUProfile string
	// AllocProfile, when set, is where the allocation profile of the
	// whole run is written when the proxy stops (--alloc-profile).
	AllocProfile string
	// Trace, when set, is where an execution trace of the whole run is
	// written (--trace).
	Trace string
}

// upstream is one --upstream ID=URL (Streamable HTTP) or ID=sse:URL
// (HTTP+SSE, 2024-11-05).
type upstream struct {
	ID, URL string
	SSE     bool
}

// nonEmpty reads one element of a list flag.
func nonEmpty(s string) (string, error) {
	if s = strings.TrimSpace(s); s == "" {
		return "", errors.New("empty element")
	}
	return s, nil
}

// parseUpstream reads one ID=URL or ID=sse:URL.
func parseUpstream(one string) (upstream, error) {
	id, u, ok := strings.Cut(one, "=")
	if !ok || id == "" || u == "" {
		return upstream{}, fmt.Errorf("upstream %q: want ID=URL or ID=sse:URL", one)
	}
	up := upstream{ID: id, URL: u}
	if rest, ok := strings.CutPrefix(u, "sse:"); ok {
		up.URL, up.SSE = rest, true
	}
	return up, nil
}

const header = `proxy: the mcpdrift MCP proxy

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
their calls refused with an MCP tool error. Logs go to stderr. Exit status:
the upstream server's on stdio; 1 when the proxy fails, 2 for a usage or
configuration error.

Each flag can also be set by its environment variable; a flag wins.

`

var idClean = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// The --policy modes.
const (
	policyEnforce = "enforce"
	policyOff     = "off"
)

// The --arguments modes.
const (
	argumentsDigest = "digest"
	argumentsFull   = "full"
)

// sessionConfig is the session configuration of one upstream server; en is
// the per-call policy's enforcement (nil parts with --policy off).
func (c Config) sessionConfig(server string, en enforcement) session.Config {
	sc := session.Config{Server: server, Timeout: c.FirstSightWait, FullArguments: c.Arguments == argumentsFull, Agent: c.Agent}
	if en.policy != nil {
		sc.Policy, sc.Approvals = en.policy, en.approvals
	}
	return sc
}

// enforcement is the per-call policy of a proxy: its tenant's policy and
// the approvals of held calls; both nil with --policy off.
type enforcement struct {
	policy    *fleet.Policy
	approvals *fleet.Approvals
}

// startEnforcement makes the policy watcher (with its copy beside the
// status copies) and the approvals, and runs the watcher on bg (counted in
// wg) until it ends.
func startEnforcement(bg context.Context, wg *sync.WaitGroup, js jetstream.JetStream, cfg Config, o *ops.Server, base zerolog.Logger) (enforcement, error) {
	if cfg.Policy == policyOff {
		return enforcement{}, nil
	}
	pol, err := fleet.NewPolicy(js, cfg.Tenant, cfg.FirstSightWait, base)
	if err != nil {
		return enforcement{}, err
	}
	if cfg.StatusCopyMaxAge > 0 {
		copies, err := fleet.OpenStatusCopies(fleet.CopyConfig{Dir: filepath.Join(cfg.OutboxDir, "policy"), Proxy: cfg.ProxyID,
			Key: cfg.StatusCopyKey, MaxAge: cfg.StatusCopyMaxAge})
		if err != nil {
			base.Warn().Err(err).Msg("no policy copy: a restart while nats is unreachable refuses every call")
		} else {
			pol.UseCopies(copies)
		}
	}
	ap, err := fleet.NewApprovals(js, fleet.ApprovalsConfig{Tenant: cfg.Tenant, Proxy: cfg.ProxyID, Wait: cfg.ApprovalWait}, base)
	if err != nil {
		return enforcement{}, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := pol.Run(bg); err != nil {
			base.Error().Err(err).Msg("policy watch stopped")
		}
	}()
	o.AddCheck("policy", func(context.Context) error {
		if !pol.Watching() {
			return errors.New("no policy watch (enforcing the last good policy)")
		}
		return nil
	})
	return enforcement{policy: pol, approvals: ap}, nil
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	host, _ := os.Hostname()
	cfg := Config{Tenant: "default", ProxyID: strings.Trim(idClean.ReplaceAllString(host, "-"), "-"),
		OutboxDir: filepath.Join(os.TempDir(), "mcpdrift-outbox"), FirstSightWait: 2 * time.Second, Arguments: argumentsDigest,
		StatusCopyMaxAge: 24 * time.Hour, Policy: policyEnforce, ApprovalWait: 2 * time.Minute}
	if dir, err := os.UserCacheDir(); err == nil {
		cfg.OutboxDir = filepath.Join(dir, "mcpdrift", "outbox")
	}
	var keyFile, opsTokenFile string
	opts := append(cfg.Service.Options(""),
		options.Opt("tenant", "MCPDRIFT_TENANT", "ID", "tenant id", options.String(&cfg.Tenant)),
		options.Opt("server-id", "MCPDRIFT_SERVER_ID", "ID", "the upstream server's id, the same on every proxy that fronts it (required on stdio)", options.String(&cfg.ServerID)),
		options.Opt("proxy-id", "MCPDRIFT_PROXY_ID", "ID", "this proxy node's id", options.String(&cfg.ProxyID)),
		options.Opt("outbox-dir", "MCPDRIFT_OUTBOX_DIR", "DIR", "where events wait while NATS is unreachable, and the status copies (DIR/status)", options.String(&cfg.OutboxDir)),
		options.Opt("status-cache-key-file", "MCPDRIFT_STATUS_CACHE_KEY_FILE", "FILE", "HMAC key (at least 16 bytes) of the on-disk status copies; without it a key is generated beside them, which guards against corruption and misplaced copies but not against whoever can write the outbox directory", options.String(&keyFile)),
		options.Opt("status-cache-max-age", "MCPDRIFT_STATUS_CACHE_MAX_AGE", "DURATION", "a restart while NATS is unreachable serves what the status copy says is verified if its watch was live at most this long ago; 0: keep no copy", options.Duration(&cfg.StatusCopyMaxAge)),
		options.Opt("first-sight-wait", "MCPDRIFT_FIRST_SIGHT_WAIT", "DURATION", "how long a decision waits for a verdict on a server never seen", options.Duration(&cfg.FirstSightWait)),
		options.Opt("arguments", "MCPDRIFT_ARGUMENTS", "MODE", "what call observations hold of tool-call arguments: digest (a SHA-256 digest only) or full (the arguments too, as the client wrote them; they can hold secrets)", options.String(&cfg.Arguments)),
		options.Opt("policy", "MCPDRIFT_POLICY", "MODE", "the per-call policy: enforce (watch the tenant's rules in the policy bucket and apply them to every tools/call) or off", options.String(&cfg.Policy)),
		options.Opt("approval-wait", "MCPDRIFT_APPROVAL_WAIT", "DURATION", "how long a call a rule holds for approval waits for an admin's decision before it is refused (policy_approval_timeout)", options.Duration(&cfg.ApprovalWait)),
		options.Opt("listen", "MCPDRIFT_LISTEN", "ADDR", "HTTP mode: serve on this address, e.g. 127.0.0.1:8080", options.String(&cfg.Listen)),
		options.Opt("allowed-hosts", "MCPDRIFT_ALLOWED_HOSTS", "HOST[:PORT]", "HTTP mode: the Host values the listener serves (DNS rebinding protection); others get 403. Default on a loopback --listen: localhost, 127.0.0.1 and [::1] with its port; elsewhere any. * for any; repeat or comma-separate", options.List(&cfg.AllowedHosts, nonEmpty)),
		options.Opt("allowed-origins", "MCPDRIFT_ALLOWED_ORIGINS", "ORIGIN", "HTTP mode: the Origin values (scheme://host[:port]) the listener serves; a request without Origin is not checked, others get 403. Default on a loopback --listen: http://localhost, http://127.0.0.1 and http://[::1] with its port; elsewhere none. * for any; repeat or comma-separate", options.List(&cfg.AllowedOrigins, nonEmpty)),
		options.Opt("upstream", "MCPDRIFT_UPSTREAMS", "ID=URL", "HTTP mode: an upstream, ID=URL (Streamable HTTP) or ID=sse:URL (HTTP+SSE); repeat, or comma-separate, for several", options.List(&cfg.Upstreams, parseUpstream)),
	)
	opts = append(opts, cfg.Edge.options()...)
	opts = append(opts,
		options.Opt("agent", "MCPDRIFT_AGENT", "NAME", "stdio: the agent's name in call and listing observations; without it stdio:uid=<uid>, the user the agent runs the proxy as", options.String(&cfg.Agent)),
		options.Opt("cpu-profile", "MCPDRIFT_CPU_PROFILE", "FILE", "write a CPU profile (pprof) of the whole run to FILE when the proxy stops, for finding where its time goes", options.String(&cfg.CPUProfile)),
		options.Opt("alloc-profile", "MCPDRIFT_ALLOC_PROFILE", "FILE", "write the allocation profile (pprof allocs, sampled) of the whole run to FILE when the proxy stops, for finding what it allocates and where", options.String(&cfg.AllocProfile)),
		options.Opt("trace", "MCPDRIFT_TRACE", "FILE", "write an execution trace (runtime/trace) of the whole run to FILE, for finding where its latency goes (go tool trace FILE); large: megabytes a second under load", options.String(&cfg.Trace)),
		options.Opt("ops-token-file", "MCPDRIFT_OPS_TOKEN_FILE", "FILE", "a file holding a secret (at least 16 bytes) that the ops listener's /metrics and /readyz's details require as Authorization: Bearer; /healthz and /readyz's status stay open for probes", options.String(&opsTokenFile)),
	)
	var err error
	cfg.Command, err = options.Parse(options.Command{Name: "proxy", Header: header, Options: opts, Args: options.Positional}, args, getenv, stderr)
	if err != nil {
		return Config{}, err
	}
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
		if cfg.Edge.set() {
			errs = append(errs, errors.New("--agent-tokens-file, --tls-cert, --tls-key and --client-ca need --listen (HTTP mode); on stdio the agent is the parent process (--agent)"))
		}
		if cfg.Agent == "" {
			cfg.Agent = fmt.Sprintf("stdio:uid=%d", os.Getuid())
		}
	} else {
		if cfg.Agent != "" {
			errs = append(errs, errors.New("--agent names the stdio agent; on HTTP agents authenticate (--agent-tokens-file, --client-ca)"))
		}
		errs = append(errs, cfg.Edge.validate())
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
	if err := (streamhttp.HostPolicy{Hosts: cfg.AllowedHosts, Origins: cfg.AllowedOrigins}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if cfg.StatusCopyMaxAge < 0 {
		errs = append(errs, errors.New("--status-cache-max-age must not be negative"))
	}
	if keyFile != "" {
		if cfg.StatusCopyKey, err = fleet.ReadCopyKey(keyFile); err != nil {
			errs = append(errs, fmt.Errorf("--status-cache-key-file: %w", err))
		}
	}
	if opsTokenFile != "" {
		if cfg.OpsToken, err = readOpsToken(opsTokenFile); err != nil {
			errs = append(errs, fmt.Errorf("--ops-token-file: %w", err))
		}
	}
	if cfg.FirstSightWait <= 0 {
		errs = append(errs, errors.New("--first-sight-wait must be positive"))
	}
	if cfg.Policy != policyEnforce && cfg.Policy != policyOff {
		errs = append(errs, fmt.Errorf("--policy %q: want %s or %s", cfg.Policy, policyEnforce, policyOff))
	}
	if cfg.ApprovalWait <= 0 {
		errs = append(errs, errors.New("--approval-wait must be positive"))
	}
	if cfg.Arguments != argumentsDigest && cfg.Arguments != argumentsFull {
		errs = append(errs, fmt.Errorf("--arguments %q: want %s or %s", cfg.Arguments, argumentsDigest, argumentsFull))
	}
	if _, err := cfg.Service.Validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, options.Invalid(errors.Join(errs...))
}

// natsInboxPrefix is where a proxy's replies arrive (JetStream API answers,
// publish acks, status watch updates, manifest chunks): one prefix per
// tenant, the only inbox its tenant's proxy user may subscribe to
// (deploy/nats/auth.conf), so that one tenant's proxy cannot read another's.
// The tenant is a single subject token (bus.ValidID).
func natsInboxPrefix(tenant string) string { return "_INBOX_proxy_" + tenant }

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return options.Status(err), err
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return options.ExitFailure, err
		}
		defer stop()
	}
	if cfg.AllocProfile != "" {
		stop, err := startAllocProfile(cfg.AllocProfile)
		if err != nil {
			return options.ExitFailure, err
		}
		defer stop()
	}
	if cfg.Trace != "" {
		stop, err := startTrace(cfg.Trace)
		if err != nil {
			return options.ExitFailure, err
		}
		defer stop()
	}
	// base names no server: the gate and the publisher add tenant and
	// server themselves, so each line names the server once.
	lvl, _ := options.ParseLevel(cfg.LogLevel) // validated
	base := options.Logger(stderr, lvl, "proxy")
	log := base
	if cfg.ServerID != "" {
		log = log.With().Str("server", cfg.ServerID).Logger()
	}

	// NATS may be down: the proxy starts anyway (in the background), fails
	// closed on what it does not know, and spools its events.
	nc, err := bus.Connect(ctx, bus.Conn{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: "mcpdrift-proxy-" + cfg.ProxyID,
		InboxPrefix: natsInboxPrefix(cfg.Tenant), Background: true}, base)
	if err != nil {
		return options.ExitFailure, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return options.ExitFailure, err
	}
	o := ops.New("proxy", log)
	if cfg.OpsToken != nil {
		o.RequireToken(cfg.OpsToken)
	}
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
		return max(code, options.ExitFailure), err
	}
	return code, nil
}

// serveStdio runs the stdio mode until the upstream server exits and
// returns its exit code. base is the service's logger, naming no server.
func serveStdio(ctx context.Context, cfg Config, js jetstream.JetStream, base zerolog.Logger, o *ops.Server, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	log := base.With().Str("server", cfg.ServerID).Logger()
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	gates, pubs, fatal, err := startFleet(bg, &wg, js, cfg, []fronted{{cfg.ServerID, cfg.OutboxDir}}, base)
	if err != nil {
		stopBG()
		wg.Wait()
		return options.ExitFailure, err
	}
	gate, pub := gates[0], pubs[0]
	en, err := startEnforcement(bg, &wg, js, cfg, o, base)
	if err != nil {
		stopBG()
		wg.Wait()
		return options.ExitFailure, err
	}
	m := metrics.New(o.Registry(), []metrics.Upstream{{Gate: gate, Publisher: pub}})
	m.AddPolicy(o.Registry(), en.policy, en.approvals)
	o.AddCheck("gate", gateCheck(map[string]*fleet.Gate{cfg.ServerID: gate}))

	p, err := stdio.Start(stdio.Config{Command: cfg.Command[0], Args: cfg.Command[1:]}, stdout, stderr)
	if err != nil {
		stopBG()
		wg.Wait()
		return options.ExitFailure, err
	}
	o.AddCheck("upstream", func(context.Context) error {
		if !p.Running() {
			return errors.New("the server process has exited")
		}
		return nil
	})
	scfg := cfg.sessionConfig(cfg.ServerID, en)
	scfg.Meter = newLoggedMeter(m, log)
	h := stdio.Bind(session.New(scfg, gate, m.Observer(pub), p.Pipes().ToServer), p.Pipes())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A status watch that NATS refuses stops the proxy and its server.
	sctx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	go func() {
		select {
		case err := <-fatal:
			stopServing(err)
		case <-sctx.Done():
		}
	}()
	code, serveErr := p.Serve(sctx, h, stdin, sigs)
	// Decisions made off the reader report what they saw before the flush;
	// what the server's messages failed at (Serve returns the client's
	// side) is logged.
	if werr := h.Wait(); werr != nil {
		log.Warn().Err(werr).Msg("delivering the server's messages")
	}

	// The server is gone: flush what is queued (to NATS or the outbox).
	stopBG()
	wg.Wait()
	if cerr := pub.Close(); cerr != nil {
		log.Warn().Err(cerr).Msg("closing the publisher")
	}
	if cause := context.Cause(sctx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return max(code, options.ExitFailure), cause
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

// fronted is an upstream server of the proxy and the directory of its
// outbox and status copy.
type fronted struct{ server, outbox string }

// startFleet makes the proxy's one status watch with a gate for each
// upstream server, and a publisher for each, and runs them on bg (counted
// in wg) until it ends. base must not name a server: the gates and the
// publishers add tenant and server to their lines. fatal delivers the
// error the status watch stopped with when no retry mends it (NATS refuses
// the proxy's user the watch, ErrStatusPermission): the proxy stops. On an
// error it returns the publishers it started, for the caller to close.
func startFleet(bg context.Context, wg *sync.WaitGroup, js jetstream.JetStream, cfg Config, servers []fronted, base zerolog.Logger) (gates []*fleet.Gate, pubs []*fleet.Publisher, fatal <-chan error, err error) {
	watch, err := fleet.NewStatusWatch(js, cfg.Tenant, base)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, f := range servers {
		gate, err := watch.Gate(f.server, base)
		if err != nil {
			return nil, pubs, nil, err
		}
		if cfg.StatusCopyMaxAge > 0 {
			copies, err := fleet.OpenStatusCopies(fleet.CopyConfig{Dir: filepath.Join(f.outbox, "status"), Proxy: cfg.ProxyID,
				Key: cfg.StatusCopyKey, MaxAge: cfg.StatusCopyMaxAge})
			if err != nil {
				base.Warn().Err(err).Str("tenant", cfg.Tenant).Str("server", f.server).Msg("no status copy: a restart while nats is unreachable will fail closed")
			} else {
				gate.UseCopies(copies)
			}
		}
		pub, err := fleet.NewPublisher(fleet.Config{Tenant: cfg.Tenant, Server: f.server, Proxy: cfg.ProxyID, Dir: f.outbox}, fleet.Deps{JS: js, Log: base})
		if err != nil {
			return nil, pubs, nil, err
		}
		gates, pubs = append(gates, gate), append(pubs, pub)
		wg.Go(func() {
			if err := pub.Run(bg); err != nil && !errors.Is(err, context.Canceled) {
				base.Error().Err(err).Str("tenant", cfg.Tenant).Str("server", f.server).Msg("publisher stopped")
			}
		})
	}
	stopped := make(chan error, 1)
	wg.Go(func() {
		if err := watch.Run(bg); err != nil && !errors.Is(err, context.Canceled) {
			stopped <- err
		}
	})
	return gates, pubs, stopped, nil
}

// startAllocProfile creates file, and stop writes the allocation profile
// of the run so far to it (sampled: pprof allocs).
func startAllocProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--alloc-profile: %w", err)
	}
	return func() {
		_ = pprof.Lookup("allocs").WriteTo(f, 0)
		_ = f.Close()
	}, nil
}

// startTrace traces the process's execution into file until stop is
// called.
func startTrace(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}, nil
}

// startCPUProfile profiles the process into file until stop is called.
func startCPUProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
