// Command drift runs the mcpdrift drift service: the one writer of schema
// status, the admin API (under /v1) and the review console (at /, on the
// same address).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/approvals"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/console"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/policystore"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

func main() {
	options.Main("drift", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Getenv, os.Stderr)
	})
}

// Config is everything the command is configured with.
type Config struct {
	options.Service // NATS, bus setup, log level, ops address
	HTTPAddr        string
	Tokens          []admin.Token
	Drift           driftsvc.Config
	// PartitionSet names the partitions this instance consumes
	// (bus.ParsePartitionSet); empty: every one.
	PartitionSet string
	// ClickHouse, when Addr is set, is where the review console reads the
	// audit queries (package auditq); the password is MCPDRIFT_CLICKHOUSE_PASSWORD.
	ClickHouse struct{ Addr, User, Password, Database string }
	Ready      func(addr net.Addr) // tests learn the admin address
	LogOutput  io.Writer
}

const header = `drift: the mcpdrift drift service (schema status and admin API)

Usage: drift [flags]

Each flag can also be set by its environment variable; a flag wins.
Admin tokens are "name:role:secret" entries (role read or write), separated
by commas or newlines; give them in MCPDRIFT_ADMIN_TOKENS or a file.
With --ops-addr it serves /healthz, /readyz (connected to NATS, streams
checked, admin API listening, not stopping) and Prometheus /metrics.

`

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := Config{HTTPAddr: "127.0.0.1:8470"}
	cfg.ClickHouse.User, cfg.ClickHouse.Database = "default", "mcpdrift"
	cfg.Drift.Workers = driftsvc.DefaultConfig.Workers
	p := &cfg.Drift.Policy
	p.Posture, p.OnDrift = state.Discovery, state.Block
	var tokens, tokensFile, baselineKeys string
	opts := append(cfg.Service.Options("only check that they exist (the drift role's rights suffice)"),
		options.Opt("http-addr", "MCPDRIFT_ADMIN_ADDR", "ADDR", "admin API listen address", options.String(&cfg.HTTPAddr)),
		options.Opt("tokens", "MCPDRIFT_ADMIN_TOKENS", "TOKENS", "admin API tokens (prefer the variable or a file: flags show in ps)", options.String(&tokens)),
		options.Opt("tokens-file", "MCPDRIFT_ADMIN_TOKENS_FILE", "FILE", "read admin API tokens from this file", options.String(&tokensFile)),
		options.Opt("posture", "MCPDRIFT_POSTURE", "MODE", "first sight of a server: discovery (trust on first use) or strict", options.String(&p.Posture)),
		options.Opt("on-drift", "MCPDRIFT_ON_DRIFT", "MODE", "on drift: block (withhold the server), withhold_changed (withhold only its changed and added items) or alert (serve and alert)", options.String(&p.OnDrift)),
		options.Opt("guard", "MCPDRIFT_GUARD", "", "auto-accept provably benign changes as new baselines", options.Bool(&p.Guard)),
		options.Opt("baseline-keys", "MCPDRIFT_BASELINE_KEYS", "FILE", "trusted public keys (PEM, one or more) that a baseline lockfile must be signed with to be imported; none: imports are refused", options.String(&baselineKeys)),
		options.Opt("workers", "MCPDRIFT_DRIFT_WORKERS", "N", "fingerprints one instance applies at once (one server's always in order)", options.Int(&cfg.Drift.Workers)),
		options.Partitions(&cfg.Partitions),
		options.PartitionSet(&cfg.PartitionSet, "MCPDRIFT_DRIFT_PARTITION_SET"),
		options.Opt("clickhouse", "MCPDRIFT_CLICKHOUSE_ADDR", "HOST:PORT", "ClickHouse of the audit tables, for the review console's activity page (password in MCPDRIFT_CLICKHOUSE_PASSWORD); none: the page shows the streams only", options.String(&cfg.ClickHouse.Addr)),
		options.Opt("clickhouse-user", "MCPDRIFT_CLICKHOUSE_USER", "USER", "ClickHouse user", options.String(&cfg.ClickHouse.User)),
		options.Opt("audit-database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "database of the audit tables", options.String(&cfg.ClickHouse.Database)),
	)
	if _, err := options.Parse(options.Command{Name: "drift", Header: header, Options: opts}, args, getenv, stderr); err != nil {
		return Config{}, err
	}
	_, err := cfg.Service.Validate()
	errs := []error{err}
	if tokensFile != "" {
		b, err := os.ReadFile(tokensFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading tokens file: %w", err))
		}
		tokens += "\n" + string(b)
	}
	if cfg.Tokens, err = admin.ParseTokens(tokens); err != nil {
		errs = append(errs, err)
	}
	if len(cfg.Tokens) == 0 {
		errs = append(errs, errors.New("no admin tokens: set --tokens, --tokens-file or MCPDRIFT_ADMIN_TOKENS (the API refuses anonymous requests)"))
	}
	if baselineKeys != "" {
		if cfg.Drift.BaselineKeys, err = readBaselineKeys(baselineKeys); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, cfg.Drift.Validate())
	if cfg.ClickHouse.Addr != "" {
		errs = append(errs, auditq.ValidDatabase(cfg.ClickHouse.Database))
	}
	cfg.ClickHouse.Password = getenv("MCPDRIFT_CLICKHOUSE_PASSWORD")
	return cfg, options.Invalid(errors.Join(errs...))
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
	lvl, err := cfg.Service.Validate()
	if err != nil {
		return options.Invalid(err)
	}
	log := options.Logger(cfg.LogOutput, lvl, "drift")
	o := ops.New("drift", log)
	return o.RunWith(ctx, cfg.OpsAddr, func(ctx context.Context) error { return serveDrift(ctx, cfg, log, o) })
}

// serveDrift connects, sets up the bus, and runs the service and the admin
// API until ctx ends; o holds its readiness checks and metrics.
func serveDrift(ctx context.Context, cfg Config, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting, checking streams and opening the admin API")
	b, err := cfg.Open(ctx, "drift", log, []bus.Object{bus.Fingerprints, bus.Verdicts, bus.Admin, bus.Status, bus.Baselines, bus.Manifests, bus.Approvals, bus.Policy, bus.Sessions})
	if err != nil {
		return err
	}
	defer b.Close(2 * time.Second)
	o.AddCheck("nats", ops.NATSConnected(b.NC))
	js, nc := b.JS, b.NC
	if cfg.Drift.Partitions, cfg.Drift.PartitionSet, err = b.Partitioning(ctx, bus.StreamFingerprints, cfg.Partitions, cfg.PartitionSet); err != nil {
		return err
	}
	svc, err := driftsvc.New(cfg.Drift, driftsvc.Deps{JS: js, Handles: b.Handles, Log: log, Metrics: driftsvc.NewMetrics(o.Registry()), Policy: b.Policy})
	if err != nil {
		return err
	}
	counts, err := driftsvc.NewStatusCounts(b.Handles.Status, log)
	if err != nil {
		return err
	}
	o.Registry().MustRegister(counts)
	if w := svc.PolicyWatch(); w != nil {
		o.Registry().MustRegister(w.Collectors("drift")...)
	}
	held, err := approvals.New(approvals.Deps{NC: nc, KV: b.Handles.Approvals, Log: log})
	if err != nil {
		return err
	}
	follow := func(fn func([]byte)) (func(), error) {
		sub, err := nc.Subscribe(bus.Prefix+".drift.>", func(m *nats.Msg) { fn(m.Data) })
		if err != nil {
			return nil, err
		}
		if err := nc.Flush(); err != nil { // the server has the subscription
			_ = sub.Unsubscribe()
			return nil, err
		}
		return func() { _ = sub.Unsubscribe() }, nil
	}
	publishAction := func(ctx context.Context, a *mcpdriftv1.AdminAction) error {
		data, err := bus.MarshalJSON(a)
		if err != nil {
			return err
		}
		subject := bus.AdminSubject(orDash(a.Tenant), orDash(a.Server))
		_, err = bus.Publish(ctx, js, subject, data, a.EventId)
		return err
	}
	api := admin.NewHandler(svc, cfg.Tokens, admin.Deps{
		Audit:     publishAction,
		Follow:    follow,
		Code:      driftsvc.Code,
		Log:       log,
		Metrics:   admin.NewMetrics(o.Registry()),
		Approvals: held,
		Policies:  policystore.New(b.Handles.Policy, nil),
		Baselines: svc,
	})
	// The review console shares the address: the API under /v1, pages at /.
	cd := console.Deps{Backend: svc, API: api, Sessions: b.Handles.Sessions, Manifest: svc.Manifest, Follow: follow, JS: js, Log: log,
		Record: publishAction}
	if ch := cfg.ClickHouse; ch.Addr != "" {
		conn, err := auditq.Open(ch.Addr, ch.User, ch.Password)
		if err != nil {
			return fmt.Errorf("clickhouse %s: %w", ch.Addr, err)
		}
		defer conn.Close()
		cd.Audit = func(ctx context.Context, q auditq.Query, sinceMs int64) (*auditq.Result, error) {
			return auditq.Run(ctx, conn, ch.Database, q, sinceMs)
		}
	}
	con, err := console.New(console.Config{Tokens: cfg.Tokens}, cd)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.Handle("/healthz", api)
	mux.Handle("/", con)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}
	for _, rt := range cfg.Drift.Routes() {
		o.AddConsumerLag(js, bus.StreamFingerprints, rt.Consumer.Durable)
	}
	started()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(con.Shutdown)
	log.Info().Str("admin_addr", ln.Addr().String()).Str("nats", nc.ConnectedUrlRedacted()).
		Str("posture", cfg.Drift.Policy.Posture).Str("on_drift", cfg.Drift.Policy.OnDrift).Bool("guard", cfg.Drift.Policy.Guard).
		Int("baseline_keys", len(cfg.Drift.BaselineKeys)).Int("partitions", max(cfg.Drift.Partitions, 1)).Ints("partition_set", cfg.Drift.PartitionSet).
		Msg("drift service started")
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return svc.Run(gctx) })
	g.Go(func() error { return held.Run(gctx) })
	g.Go(func() error { return counts.Run(gctx) })
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

// orDash stands in for an empty subject token (GET /v1/servers has no server).
func orDash(s string) string {
	if s == "" {
		return "_"
	}
	return s
}
