// Command drift runs the mcpdrift drift service: the one writer of schema
// status, and the admin API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "drift: %v\n", err)
		stop()
		os.Exit(1) // the only exit
	}
}

// Config is everything the command is configured with.
type Config struct {
	NATSURL   string
	NATSCreds string // a .creds file; empty: none
	HTTPAddr  string
	OpsAddr   string // /healthz, /readyz and /metrics; empty: not served
	Tokens    []admin.Token
	Replicas  int
	BusSetup  string // setupCreate or setupCheck
	LogLevel  zerolog.Level
	Service   driftsvc.Config
	Ready     func(addr net.Addr) // tests learn the admin address
	LogOutput io.Writer
}

const usage = `drift: the mcpdrift drift service (schema status and admin API)

Usage: drift [flags]

Every flag can also be set by the environment variable shown with it.
Admin tokens are "name:role:secret" entries (role read or write), separated
by commas or newlines; give them in MCPDRIFT_ADMIN_TOKENS or a file.
With --ops-addr it serves /healthz, /readyz (connected to NATS, streams
checked, admin API listening, not stopping) and Prometheus /metrics.

Flags:
`

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("drift", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	natsURL := fs.String("nats-url", env("MCPDRIFT_NATS_URL", nats.DefaultURL), "NATS server `URL` (MCPDRIFT_NATS_URL)")
	natsCreds := fs.String("nats-creds", env("MCPDRIFT_NATS_CREDS", ""), "NATS credentials `file` (.creds) for this role (MCPDRIFT_NATS_CREDS)")
	httpAddr := fs.String("http-addr", env("MCPDRIFT_ADMIN_ADDR", "127.0.0.1:8470"), "admin API listen `address` (MCPDRIFT_ADMIN_ADDR)")
	opsAddr := fs.String("ops-addr", env("MCPDRIFT_OPS_ADDR", ""), "`host:port` of /healthz, /readyz and /metrics (docs/metrics.md); empty: not served (MCPDRIFT_OPS_ADDR)")
	tokens := fs.String("tokens", "", "admin API `tokens` (MCPDRIFT_ADMIN_TOKENS; prefer the variable or a file: flags show in ps)")
	tokensFile := fs.String("tokens-file", env("MCPDRIFT_ADMIN_TOKENS_FILE", ""), "read admin API tokens from this `file` (MCPDRIFT_ADMIN_TOKENS_FILE)")
	busSetup := fs.String("bus-setup", env("MCPDRIFT_BUS_SETUP", setupCreate), "`mode`: create (create or update the streams and buckets at start; needs the NATS admin's rights) or check (only check that they exist; the drift role's rights suffice) (MCPDRIFT_BUS_SETUP)")
	replicas := fs.Int("replicas", atoi(env("MCPDRIFT_REPLICAS", "1")), "replicas of streams and buckets: 1, or 3 in a cluster (MCPDRIFT_REPLICAS)")
	posture := fs.String("posture", env("MCPDRIFT_POSTURE", state.Discovery), "first sight of a server: discovery (trust on first use) or strict (MCPDRIFT_POSTURE)")
	onDrift := fs.String("on-drift", env("MCPDRIFT_ON_DRIFT", state.Block), "on drift: block (withhold tools) or alert (serve and alert) (MCPDRIFT_ON_DRIFT)")
	guard := fs.Bool("guard", env("MCPDRIFT_GUARD", "false") == "true", "auto-accept provably benign changes as new baselines (MCPDRIFT_GUARD)")
	logLevel := fs.String("log-level", env("MCPDRIFT_LOG_LEVEL", "info"), "log `level`: debug, info, warn, error (MCPDRIFT_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	var errs []error
	cfg := Config{NATSURL: *natsURL, NATSCreds: *natsCreds, HTTPAddr: *httpAddr, OpsAddr: *opsAddr, Replicas: *replicas, BusSetup: *busSetup,
		Service: driftsvc.Config{Policy: state.Policy{Posture: *posture, OnDrift: *onDrift, Guard: *guard}}}
	spec := *tokens
	if spec == "" {
		spec = getenv("MCPDRIFT_ADMIN_TOKENS") // not a flag default: --help would print the secrets
	}
	if *tokensFile != "" {
		b, err := os.ReadFile(*tokensFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading tokens file: %w", err))
		}
		spec += "\n" + string(b)
	}
	var err error
	if cfg.Tokens, err = admin.ParseTokens(spec); err != nil {
		errs = append(errs, err)
	}
	if len(cfg.Tokens) == 0 {
		errs = append(errs, errors.New("no admin tokens: set --tokens, --tokens-file or MCPDRIFT_ADMIN_TOKENS (the API refuses anonymous requests)"))
	}
	if cfg.BusSetup != setupCreate && cfg.BusSetup != setupCheck {
		errs = append(errs, fmt.Errorf("bus setup %q: want %s or %s", cfg.BusSetup, setupCreate, setupCheck))
	}
	if cfg.LogLevel, err = zerolog.ParseLevel(*logLevel); err != nil {
		errs = append(errs, fmt.Errorf("log level %q: %w", *logLevel, err))
	}
	errs = append(errs, cfg.Service.Validate(), bus.Config{Replicas: cfg.Replicas}.Validate())
	return cfg, errors.Join(errs...)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1 // reported by Validate
	}
	return n
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.LogOutput = stderr
	return serve(ctx, cfg)
}

// serve runs the service, and its ops listener when cfg.OpsAddr is set.
func serve(ctx context.Context, cfg Config) error {
	log := zerolog.New(cfg.LogOutput).Level(cfg.LogLevel).With().Timestamp().Str("service", "drift").Logger()
	o := ops.New("drift", log)
	return o.RunWith(ctx, cfg.OpsAddr, func(ctx context.Context) error { return serveDrift(ctx, cfg, log, o) })
}

// natsInboxPrefix is where the service's replies arrive (JetStream API
// answers, publish acks, pulled messages, KV reads and watches): the drift
// role may subscribe there and nowhere else under an inbox
// (deploy/nats/auth.conf).
const natsInboxPrefix = "_INBOX_drift"

// serveDrift connects, sets up the bus, and runs the service and the admin
// API until ctx ends; o holds its readiness checks and metrics.
func serveDrift(ctx context.Context, cfg Config, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting, checking streams and opening the admin API")
	nc, err := nats.Connect(cfg.NATSURL, bus.ServiceOptions("mcpdrift-drift", natsInboxPrefix, cfg.NATSCreds, log)...)
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w", bus.RedactURLs(cfg.NATSURL), err)
	}
	defer nc.Close()
	o.AddCheck("nats", ops.NATSConnected(nc))
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var h *bus.Handles
	if cfg.BusSetup == setupCheck {
		h, err = checkBus(ctx, js)
	} else {
		h, err = bus.Setup(ctx, js, bus.Config{Replicas: cfg.Replicas})
	}
	if err != nil {
		return err
	}
	svc, err := driftsvc.New(cfg.Service, driftsvc.Deps{JS: js, Handles: h, Log: log, Metrics: driftsvc.NewMetrics(o.Registry())})
	if err != nil {
		return err
	}
	api := admin.NewHandler(svc, cfg.Tokens, admin.Deps{
		Audit: func(ctx context.Context, a *mcpdriftv1.AdminAction) error {
			data, err := bus.MarshalJSON(a)
			if err != nil {
				return err
			}
			subject := bus.AdminSubject(orDash(a.Tenant), orDash(a.Server))
			_, err = bus.Publish(ctx, js, subject, data, a.EventId)
			return err
		},
		Follow: func(fn func([]byte)) (func(), error) {
			sub, err := nc.Subscribe(bus.Prefix+".drift.>", func(m *nats.Msg) { fn(m.Data) })
			if err != nil {
				return nil, err
			}
			if err := nc.Flush(); err != nil { // the server has the subscription
				_ = sub.Unsubscribe()
				return nil, err
			}
			return func() { _ = sub.Unsubscribe() }, nil
		},
		Code:    driftsvc.Code,
		Log:     log,
		Metrics: admin.NewMetrics(o.Registry()),
	})
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	durable := cfg.Service.Durable
	if durable == "" {
		durable = driftsvc.DefaultConfig.Durable
	}
	o.AddConsumerLag(js, bus.StreamFingerprints, durable)
	started()
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("admin_addr", ln.Addr().String()).Str("nats", nc.ConnectedUrlRedacted()).
		Str("posture", cfg.Service.Policy.Posture).Str("on_drift", cfg.Service.Policy.OnDrift).Bool("guard", cfg.Service.Policy.Guard).
		Msg("drift service started")
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return svc.Run(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	err = g.Wait()
	log.Info().Msg("drift service stopped")
	return err
}

// Bus setup modes (--bus-setup).
const (
	setupCreate = "create" // create or update every stream and bucket (bus.Setup)
	setupCheck  = "check"  // only check that they exist: a least-privilege role
)

// checkBus checks that the streams the service uses exist and binds the
// buckets and object store, with no right to create or change them: a
// deployment whose administrator ran the bus setup (docs/deployment.md).
func checkBus(ctx context.Context, js jetstream.JetStream) (*bus.Handles, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.CheckStreams(ctx, js, bus.StreamFingerprints, bus.StreamVerdicts, bus.StreamAdmin); err != nil {
		return nil, err
	}
	var h bus.Handles
	var err error
	if h.Status, err = js.KeyValue(ctx, bus.BucketStatus); err != nil {
		return nil, fmt.Errorf("binding bucket %s (run the bus setup first): %w", bus.BucketStatus, err)
	}
	if h.Baselines, err = js.KeyValue(ctx, bus.BucketBaselines); err != nil {
		return nil, fmt.Errorf("binding bucket %s (run the bus setup first): %w", bus.BucketBaselines, err)
	}
	if h.Manifests, err = js.ObjectStore(ctx, bus.BucketManifests); err != nil {
		return nil, fmt.Errorf("binding object store %s (run the bus setup first): %w", bus.BucketManifests, err)
	}
	return &h, nil
}

// orDash stands in for an empty subject token (GET /v1/servers has no server).
func orDash(s string) string {
	if s == "" {
		return "_"
	}
	return s
}
