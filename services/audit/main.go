// Command audit is the mcpdrift audit sink: it writes every observation,
// verdict, admin action and dead letter from NATS JetStream into ClickHouse,
// in batches, acking each message only once ClickHouse has its row. It
// applies the schema migrations at start. Run as many instances as needed:
// they share the durable consumers. docs/services/audit.md is the reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/sink"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

func main() {
	options.Main("audit", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Getenv, os.Stderr)
	})
}

// settings are what run reads from flags and the environment.
type settings struct {
	options.Service
	chAddr    string
	chUser    string
	chPass    string // from the environment only: flags show in ps
	retention int
	svc       sink.Config
}

func settingsOptions(s *settings) []options.Option {
	s.svc = sink.DefaultConfig
	s.chAddr, s.chUser = "127.0.0.1:9000", "default"
	return append(s.Service.Options("only check that the streams it reads exist (the audit role's rights suffice)"),
		options.Opt("clickhouse-addr", "MCPDRIFT_CLICKHOUSE_ADDR", "HOST:PORT", "ClickHouse native protocol addresses, comma-separated", options.String(&s.chAddr)),
		options.Opt("clickhouse-user", "MCPDRIFT_CLICKHOUSE_USER", "NAME", "ClickHouse user (password in MCPDRIFT_CLICKHOUSE_PASSWORD)", options.String(&s.chUser)),
		options.Opt("database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "ClickHouse database of the audit tables; created when missing", options.String(&s.svc.Database)),
		options.Opt("retention-days", "MCPDRIFT_AUDIT_RETENTION_DAYS", "N", "TTL of raw events set when the tables are created (ClickHouse 19.6+); 0 keeps everything", options.Int(&s.retention)),
		options.Opt("arguments", "MCPDRIFT_AUDIT_ARGUMENTS", "MODE", "tool-call arguments: digest (the digest only) or full (also the arguments, known secrets redacted)", options.String(&s.svc.Arguments)),
		options.Opt("batch-size", "MCPDRIFT_AUDIT_BATCH_SIZE", "N", "rows written in one batch", options.Int(&s.svc.BatchSize)),
		options.Opt("batch-age", "MCPDRIFT_AUDIT_BATCH_AGE", "DURATION", "longest wait of a row before its batch is written", options.Duration(&s.svc.BatchAge)),
		options.Opt("prefetch", "MCPDRIFT_AUDIT_PREFETCH", "N", "messages each consumer buffers ahead", options.Int(&s.svc.Prefetch)),
		options.Opt("ack-wait", "MCPDRIFT_AUDIT_ACK_WAIT", "DURATION", "redelivery wait of a message no instance settled (a crash)", options.Duration(&s.svc.AckWait)),
		options.Opt("max-ack-pending", "MCPDRIFT_AUDIT_MAX_ACK_PENDING", "N", "messages in flight per consumer over all instances; at least two batches", options.Int(&s.svc.MaxAckPending)),
		options.Opt("retry-delay", "MCPDRIFT_AUDIT_RETRY_DELAY", "DURATION", "first wait after a failed write; doubles per attempt", options.Duration(&s.svc.RetryDelay)),
		options.Opt("max-retry-delay", "MCPDRIFT_AUDIT_MAX_RETRY_DELAY", "DURATION", "longest wait between write attempts", options.Duration(&s.svc.MaxRetryDelay)),
		options.Opt("write-timeout", "MCPDRIFT_AUDIT_WRITE_TIMEOUT", "DURATION", "bound on one write attempt; below --ack-wait", options.Duration(&s.svc.WriteTimeout)),
		options.Opt("drain-timeout", "MCPDRIFT_AUDIT_DRAIN_TIMEOUT", "DURATION", "bound on writing what it holds at shutdown", options.Duration(&s.svc.DrainTimeout)),
	)
}

// header starts the --help text; options.Usage lists the options after it.
func header() string {
	return `audit: the mcpdrift audit sink

Writes every list and call observation (` + bus.StreamObservations + `), verdict
(` + bus.StreamVerdicts + `), admin action and dead letter (` + bus.StreamAdmin + `) into
ClickHouse, in batches by size and age, on durable consumers shared by every
instance (` + bus.ConsumerAuditObservations + `, ` + bus.ConsumerAuditVerdicts + `, ` + bus.ConsumerAuditAdmin + `).
A message is acked only once ClickHouse has its row; while ClickHouse is
unreachable nothing is acked and events wait in JetStream. Applies the
schema migrations at start. Stops on SIGINT or SIGTERM after writing what it
holds. With --ops-addr it serves /healthz, /readyz (connected to NATS,
streams checked, ClickHouse reachable, migrations applied, not stopping) and
Prometheus /metrics.

Usage: audit [flags]

Each flag can also be set by its environment variable; a flag wins.
MCPDRIFT_CLICKHOUSE_PASSWORD holds the ClickHouse password (no flag).

`
}

// parse fills settings from defaults, then the environment, then flags.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*settings, error) {
	s := new(settings)
	if _, err := options.Parse(options.Command{Name: "audit", Header: header(), Options: settingsOptions(s)}, args, getenv, stderr); err != nil {
		return nil, err
	}
	s.chPass = getenv("MCPDRIFT_CLICKHOUSE_PASSWORD")
	return s, nil
}

func (s *settings) validate() (zerolog.Level, error) {
	lvl, err := s.Service.Validate()
	errs := []error{err}
	if s.chAddr == "" {
		errs = append(errs, errors.New("clickhouse address is empty"))
	}
	if s.retention < 0 {
		errs = append(errs, fmt.Errorf("retention days %d: must not be negative", s.retention))
	}
	if err := schema.ValidDatabase(s.svc.WithDefaults().Database); err != nil {
		errs = append(errs, err)
	}
	if err := s.svc.Validate(); err != nil {
		errs = append(errs, err)
	}
	return lvl, options.Invalid(errors.Join(errs...))
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	s, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	lvl, err := s.validate()
	if err != nil {
		return err
	}
	log := options.Logger(stderr, lvl, sink.ServiceName)
	o := ops.New(sink.ServiceName, log)
	return o.RunWith(ctx, s.OpsAddr, func(ctx context.Context) error { return serve(ctx, s, log, o) })
}

// serve connects, sets up the bus, migrates the schema and runs the sink
// until ctx ends; o holds its readiness checks and metrics.
func serve(ctx context.Context, s *settings, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting, checking streams and migrating the schema")
	cfg := s.svc.WithDefaults()
	b, err := s.Open(ctx, sink.ServiceName, log, []bus.Object{bus.Observations, bus.Verdicts, bus.Admin})
	if err != nil {
		return err
	}
	defer b.Close(5 * time.Second) // acks still buffered
	o.AddCheck("nats", ops.NATSConnected(b.NC))
	js := b.JS

	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:         strings.Split(s.chAddr, ","),
		Auth:         clickhouse.Auth{Database: "default", Username: s.chUser, Password: s.chPass},
		DialTimeout:  5 * time.Second,
		MaxOpenConns: 4,
		Compression:  &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	if err != nil {
		return fmt.Errorf("clickhouse %s: %w", s.chAddr, err)
	}
	defer conn.Close()
	o.AddCheck("clickhouse", func(ctx context.Context) error {
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("clickhouse not reachable: %v", err)
		}
		return nil
	})
	res, err := migrate(ctx, conn, schema.Options{Database: cfg.Database, RetentionDays: s.retention}, cfg, log)
	if err != nil {
		return err
	}
	svc, err := sink.New(s.svc, sink.Deps{JS: js, Conn: conn, Log: log, Now: time.Now, Metrics: sink.NewMetrics(o.Registry())})
	if err != nil {
		return err
	}
	for _, k := range sink.Consumers {
		o.AddConsumerLag(js, k.Stream, k.Durable)
	}
	started()
	log.Info().Str("url", b.NC.ConnectedUrlRedacted()).Str("clickhouse", s.chAddr).Str("clickhouse_version", res.Features.Version).
		Str("database", cfg.Database).Interface("migrations_applied", res.Applied).Int("batch_size", cfg.BatchSize).
		Dur("batch_age", cfg.BatchAge).Str("arguments", cfg.Arguments).Msg("audit sink started")
	err = svc.Run(ctx)
	st := svc.Stats()
	log.Info().Uint64("written", st.Written).Uint64("batches", st.Batches).Uint64("write_failures", st.WriteFailures).
		Uint64("poison", st.Poison).Msg("audit sink stopped")
	return err
}

// migrate applies the schema, waiting for ClickHouse when it is not
// reachable yet; a server that answers with an error stops the start.
func migrate(ctx context.Context, conn driver.Conn, opts schema.Options, cfg sink.Config, log zerolog.Logger) (schema.Result, error) {
	delay := cfg.RetryDelay
	for {
		res, err := schema.Migrate(ctx, conn, opts)
		if err == nil {
			return res, nil
		}
		var ex *clickhouse.Exception
		if errors.As(err, &ex) || errors.Is(err, schema.ErrUnsupported) || errors.Is(err, schema.ErrInvalidDatabase) {
			return res, fmt.Errorf("migrating the audit schema: %w", err)
		}
		log.Warn().Err(err).Dur("retry_in", delay).Msg("clickhouse not reachable; waiting to migrate")
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, cfg.MaxRetryDelay)
	}
}
