// Command audit is the mcpdrift audit sink: it writes every observation,
// verdict, admin action and dead letter from NATS JetStream into ClickHouse,
// in batches, acking each message only once ClickHouse has its row. It
// applies the schema migrations at start. Run as many instances as needed:
// they share the durable consumers. docs/services/audit.md is the reference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/sink"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "audit: %v\n", err)
		stop()
		os.Exit(1) // the only exit
	}
}

// settings are what run reads from flags and the environment.
type settings struct {
	natsURL   string
	natsCreds string
	replicas  int
	busSetup  string
	logLevel  string
	chAddr    string
	chUser    string
	chPass    string // from the environment only: flags show in ps
	retention int
	svc       sink.Config
}

// option is one setting, as a flag and an environment variable.
type option struct {
	flag, env, arg, usage string
	value                 flag.Value
}

func options(s *settings) []option {
	s.natsURL, s.replicas, s.busSetup, s.logLevel, s.svc = "nats://127.0.0.1:4222", 1, "create", "info", sink.DefaultConfig
	s.chAddr, s.chUser = "127.0.0.1:9000", "default"
	return []option{
		{"nats-url", "MCPDRIFT_NATS_URL", "URL", "NATS server URLs, comma-separated", (*stringValue)(&s.natsURL)},
		{"nats-creds", "MCPDRIFT_NATS_CREDS", "FILE", "NATS credentials file (.creds) for this role", (*stringValue)(&s.natsCreds)},
		{"replicas", "MCPDRIFT_REPLICAS", "N", "replicas of the streams and buckets it creates: 1 on a single node, 3 in a cluster", (*intValue)(&s.replicas)},
		{"bus-setup", "MCPDRIFT_BUS_SETUP", "MODE", "create: create or update the streams and buckets at start (needs the NATS admin's rights); check: only check that the streams it reads exist (the audit role's rights suffice)", (*stringValue)(&s.busSetup)},
		{"log-level", "MCPDRIFT_LOG_LEVEL", "LEVEL", "debug, info, warn or error", (*stringValue)(&s.logLevel)},
		{"clickhouse-addr", "MCPDRIFT_CLICKHOUSE_ADDR", "HOST:PORT", "ClickHouse native protocol addresses, comma-separated", (*stringValue)(&s.chAddr)},
		{"clickhouse-user", "MCPDRIFT_CLICKHOUSE_USER", "NAME", "ClickHouse user (password in MCPDRIFT_CLICKHOUSE_PASSWORD)", (*stringValue)(&s.chUser)},
		{"database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "ClickHouse database of the audit tables; created when missing", (*stringValue)(&s.svc.Database)},
		{"retention-days", "MCPDRIFT_AUDIT_RETENTION_DAYS", "N", "TTL of raw events set when the tables are created (ClickHouse 19.6+); 0 keeps everything", (*intValue)(&s.retention)},
		{"arguments", "MCPDRIFT_AUDIT_ARGUMENTS", "MODE", "tool-call arguments: digest (the digest only) or full (also the arguments, known secrets redacted)", (*stringValue)(&s.svc.Arguments)},
		{"batch-size", "MCPDRIFT_AUDIT_BATCH_SIZE", "N", "rows written in one batch", (*intValue)(&s.svc.BatchSize)},
		{"batch-age", "MCPDRIFT_AUDIT_BATCH_AGE", "DURATION", "longest wait of a row before its batch is written", (*durationValue)(&s.svc.BatchAge)},
		{"prefetch", "MCPDRIFT_AUDIT_PREFETCH", "N", "messages each consumer buffers ahead", (*intValue)(&s.svc.Prefetch)},
		{"ack-wait", "MCPDRIFT_AUDIT_ACK_WAIT", "DURATION", "redelivery wait of a message no instance settled (a crash)", (*durationValue)(&s.svc.AckWait)},
		{"max-ack-pending", "MCPDRIFT_AUDIT_MAX_ACK_PENDING", "N", "messages in flight per consumer over all instances; at least two batches", (*intValue)(&s.svc.MaxAckPending)},
		{"retry-delay", "MCPDRIFT_AUDIT_RETRY_DELAY", "DURATION", "first wait after a failed write; doubles per attempt", (*durationValue)(&s.svc.RetryDelay)},
		{"max-retry-delay", "MCPDRIFT_AUDIT_MAX_RETRY_DELAY", "DURATION", "longest wait between write attempts", (*durationValue)(&s.svc.MaxRetryDelay)},
		{"write-timeout", "MCPDRIFT_AUDIT_WRITE_TIMEOUT", "DURATION", "bound on one write attempt; below --ack-wait", (*durationValue)(&s.svc.WriteTimeout)},
		{"drain-timeout", "MCPDRIFT_AUDIT_DRAIN_TIMEOUT", "DURATION", "bound on writing what it holds at shutdown", (*durationValue)(&s.svc.DrainTimeout)},
	}
}

func usage(w io.Writer, opts []option) {
	fmt.Fprint(w, `audit: the mcpdrift audit sink

Writes every list and call observation (`+bus.StreamObservations+`), verdict
(`+bus.StreamVerdicts+`), admin action and dead letter (`+bus.StreamAdmin+`) into
ClickHouse, in batches by size and age, on durable consumers shared by every
instance (`+bus.ConsumerAuditObservations+`, `+bus.ConsumerAuditVerdicts+`, `+bus.ConsumerAuditAdmin+`).
A message is acked only once ClickHouse has its row; while ClickHouse is
unreachable nothing is acked and events wait in JetStream. Applies the
schema migrations at start. Stops on SIGINT or SIGTERM after writing what it
holds.

Usage: audit [flags]

Each flag can also be set by its environment variable; a flag wins.
MCPDRIFT_CLICKHOUSE_PASSWORD holds the ClickHouse password (no flag).

`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, o := range opts {
		fmt.Fprintf(tw, "  --%s %s\t%s\t%s (default %s)\n", o.flag, o.arg, o.env, o.usage, orNone(o.value.String()))
	}
	tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// parse fills settings from defaults, then the environment, then flags.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*settings, bool, error) {
	s := new(settings)
	opts := options(s)
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, o := range opts {
		fs.Var(o.value, o.flag, o.usage)
	}
	var help strings.Builder
	usage(&help, opts)
	for _, o := range opts {
		if v := getenv(o.env); v != "" {
			if err := o.value.Set(v); err != nil {
				return nil, false, fmt.Errorf("usage: %s=%q: %v", o.env, v, err)
			}
		}
	}
	s.chPass = getenv("MCPDRIFT_CLICKHOUSE_PASSWORD")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, help.String())
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("usage: %v (see --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, false, fmt.Errorf("usage: unexpected argument %q (see --help)", fs.Arg(0))
	}
	return s, false, nil
}

func (s *settings) validate() (zerolog.Level, error) {
	var errs []error
	lvl, err := zerolog.ParseLevel(s.logLevel)
	if err != nil || s.logLevel == "" {
		errs = append(errs, fmt.Errorf("log level %q: want debug, info, warn or error", s.logLevel))
	}
	if s.natsURL == "" {
		errs = append(errs, errors.New("nats url is empty"))
	}
	if s.busSetup != "create" && s.busSetup != "check" {
		errs = append(errs, fmt.Errorf("bus setup %q: want create or check", s.busSetup))
	}
	if s.chAddr == "" {
		errs = append(errs, errors.New("clickhouse address is empty"))
	}
	if err := (bus.Config{Replicas: s.replicas}).Validate(); err != nil || s.replicas < 1 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", s.replicas))
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
	return lvl, errors.Join(errs...)
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	s, helped, err := parse(args, getenv, stderr)
	if helped || err != nil {
		return err
	}
	lvl, err := s.validate()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := zerolog.New(stderr).Level(lvl).With().Timestamp().Str("service", sink.ServiceName).Logger()
	cfg := s.svc.WithDefaults()

	nopts := []nats.Option{
		nats.Name("mcpdrift-" + sink.ServiceName),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
	}
	if s.natsCreds != "" {
		nopts = append(nopts, nats.UserCredentials(s.natsCreds))
	}
	nc, err := nats.Connect(s.natsURL, nopts...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", s.natsURL, err)
	}
	defer func() {
		_ = nc.FlushTimeout(5 * time.Second) // acks still buffered
		nc.Close()
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if s.busSetup == "check" {
		// A least-privilege role: the administrator ran the bus setup
		// (docs/deployment.md); only look that the streams are there.
		for _, name := range []string{bus.StreamObservations, bus.StreamVerdicts, bus.StreamAdmin} {
			if _, err = js.Stream(setupCtx, name); err != nil {
				err = fmt.Errorf("checking stream %s (run the bus setup first): %w", name, err)
				break
			}
		}
	} else {
		_, err = bus.Setup(setupCtx, js, bus.Config{Replicas: s.replicas})
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("setting up streams and buckets: %w", err)
	}

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
	res, err := migrate(ctx, conn, schema.Options{Database: cfg.Database, RetentionDays: s.retention}, cfg, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	svc, err := sink.New(s.svc, sink.Deps{JS: js, Conn: conn, Log: log, Now: time.Now})
	if err != nil {
		return err
	}
	log.Info().Str("url", nc.ConnectedUrlRedacted()).Str("clickhouse", s.chAddr).Str("clickhouse_version", res.Features.Version).
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

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (like 500ms, 30s, 1m)")
	}
	*v = durationValue(d)
	return nil
}
