// Command fingerprint is the mcpdrift fingerprint service: it consumes the
// proxies' tools/list observations from NATS JetStream, fingerprints each
// surface, stores the manifest and publishes a Fingerprint event. Run as many
// instances as needed: they share one durable consumer.
// docs/services/fingerprint.md is the reference.
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/fingerprint/internal/fpsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "fingerprint: %v\n", err)
		stop()
		os.Exit(1) // the only exit
	}
}

// Bus setup modes (--bus-setup).
const (
	setupCreate = "create" // create or update every stream and bucket (bus.Setup)
	setupCheck  = "check"  // only check that they exist: a least-privilege role
)

// settings are what run reads from flags and the environment.
type settings struct {
	natsURL   string
	natsCreds string
	replicas  int
	busSetup  string
	logLevel  string
	svc       fpsvc.Config
}

// option is one setting, as a flag and an environment variable.
type option struct {
	flag, env, arg, usage string
	value                 flag.Value
}

func options(s *settings) []option {
	d := fpsvc.DefaultConfig
	s.natsURL, s.replicas, s.busSetup, s.logLevel, s.svc = "nats://127.0.0.1:4222", 1, setupCreate, "info", d
	return []option{
		{"nats-url", "MCPDRIFT_NATS_URL", "URL", "NATS server URLs, comma-separated", (*stringValue)(&s.natsURL)},
		{"nats-creds", "MCPDRIFT_NATS_CREDS", "FILE", "NATS credentials file (.creds) for this role", (*stringValue)(&s.natsCreds)},
		{"replicas", "MCPDRIFT_REPLICAS", "N", "replicas of the streams and buckets it creates: 1 on a single node, 3 in a cluster", (*intValue)(&s.replicas)},
		{"bus-setup", "MCPDRIFT_BUS_SETUP", "MODE", "create: create or update the streams and buckets at start (needs the NATS admin's rights); check: only check that they exist (the fingerprint role's rights suffice)", (*stringValue)(&s.busSetup)},
		{"log-level", "MCPDRIFT_LOG_LEVEL", "LEVEL", "debug, info, warn or error", (*stringValue)(&s.logLevel)},
		{"durable", "MCPDRIFT_FINGERPRINT_DURABLE", "NAME", "durable consumer shared by every instance", (*stringValue)(&s.svc.Durable)},
		{"workers", "MCPDRIFT_FINGERPRINT_WORKERS", "N", "observations one instance processes at once", (*intValue)(&s.svc.Workers)},
		{"prefetch", "MCPDRIFT_FINGERPRINT_PREFETCH", "N", "messages one instance buffers ahead of its workers", (*intValue)(&s.svc.Prefetch)},
		{"max-deliver", "MCPDRIFT_FINGERPRINT_MAX_DELIVER", "N", "deliveries before a message is dead-lettered; -1 for no limit", (*intValue)(&s.svc.MaxDeliver)},
		{"ack-wait", "MCPDRIFT_FINGERPRINT_ACK_WAIT", "DURATION", "redelivery wait of a message no instance settled (a crash)", (*durationValue)(&s.svc.AckWait)},
		{"max-ack-pending", "MCPDRIFT_FINGERPRINT_MAX_ACK_PENDING", "N", "messages in flight over all instances", (*intValue)(&s.svc.MaxAckPending)},
		{"retry-delay", "MCPDRIFT_FINGERPRINT_RETRY_DELAY", "DURATION", "first retry delay after a transient failure; doubles per delivery", (*durationValue)(&s.svc.RetryDelay)},
		{"max-retry-delay", "MCPDRIFT_FINGERPRINT_MAX_RETRY_DELAY", "DURATION", "longest retry delay", (*durationValue)(&s.svc.MaxRetryDelay)},
		{"op-timeout", "MCPDRIFT_FINGERPRINT_OP_TIMEOUT", "DURATION", "bound on storing and publishing for one message; below --ack-wait", (*durationValue)(&s.svc.OpTimeout)},
		{"drain-timeout", "MCPDRIFT_FINGERPRINT_DRAIN_TIMEOUT", "DURATION", "bound on finishing in-flight messages at shutdown", (*durationValue)(&s.svc.DrainTimeout)},
		{"memo-bytes", "MCPDRIFT_FINGERPRINT_MEMO_BYTES", "N", "bytes of captures remembered to skip re-parsing identical ones; -1 for none", (*intValue)(&s.svc.MemoBytes)},
	}
}

func usage(w io.Writer, opts []option) {
	fmt.Fprint(w, `fingerprint: the mcpdrift fingerprint service

Consumes ListObservation events (`+fpsvc.FilterSubject+`) on a durable consumer
shared by every instance, fingerprints each captured surface, stores the
manifest in the object store `+bus.BucketManifests+`, and publishes a Fingerprint
event on mcpdrift.fp.<tenant>.<server>. Stops on SIGINT or SIGTERM after
finishing the messages it holds.

Usage: fingerprint [flags]

Each flag can also be set by its environment variable; a flag wins.

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
	fs := flag.NewFlagSet("fingerprint", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, o := range opts {
		fs.Var(o.value, o.flag, o.usage)
	}
	// Usage shows the built-in defaults, before the environment applies.
	var help strings.Builder
	usage(&help, opts)
	for _, o := range opts {
		if v := getenv(o.env); v != "" {
			if err := o.value.Set(v); err != nil {
				return nil, false, fmt.Errorf("usage: %s=%q: %v", o.env, v, err)
			}
		}
	}
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
	if err := (bus.Config{Replicas: s.replicas}).Validate(); err != nil || s.replicas < 1 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", s.replicas))
	}
	if s.busSetup != setupCreate && s.busSetup != setupCheck {
		errs = append(errs, fmt.Errorf("bus setup %q: want %s or %s", s.busSetup, setupCreate, setupCheck))
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
	log := zerolog.New(stderr).Level(lvl).With().Timestamp().Str("service", fpsvc.ServiceName).Logger()

	nopts := []nats.Option{
		nats.Name("mcpdrift-" + fpsvc.ServiceName),
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
		_ = nc.FlushTimeout(2 * time.Second) // acks and naks still buffered
		nc.Close()
	}()
	// Asynchronous publishes that get no answer are dropped after the
	// operation timeout instead of being tracked for ever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(s.svc.WithDefaults().OpTimeout))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var manifests jetstream.ObjectStore
	if s.busSetup == setupCheck {
		manifests, err = checkBus(setupCtx, js)
	} else {
		var h *bus.Handles
		if h, err = bus.Setup(setupCtx, js, bus.Config{Replicas: s.replicas}); err == nil {
			manifests = h.Manifests
		}
	}
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop while starting
		}
		return fmt.Errorf("setting up streams and buckets: %w", err)
	}
	svc, err := fpsvc.New(s.svc, fpsvc.Deps{
		JS:        js,
		Manifests: fpsvc.NewObjectManifests(manifests),
		Log:       log,
		Now:       time.Now,
	})
	if err != nil {
		return err
	}
	c := s.svc.WithDefaults()
	log.Info().Str("url", nc.ConnectedUrlRedacted()).Str("durable", c.Durable).Int("workers", c.Workers).
		Int("max_deliver", c.MaxDeliver).Int("max_ack_pending", c.MaxAckPending).Msg("fingerprint service started")
	err = svc.Run(ctx)
	st := svc.Stats()
	log.Info().Uint64("processed", st.Processed).Uint64("rejected", st.Rejected).Uint64("poison", st.Poison).
		Uint64("exhausted", st.Exhausted).Uint64("retries", st.Retries).Msg("fingerprint service stopped")
	return err
}

// checkBus checks that the streams the service uses exist and binds the
// manifest store, with no right to create or change them: a deployment whose
// administrator ran the bus setup (docs/deployment.md).
func checkBus(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	for _, name := range []string{bus.StreamObservations, bus.StreamFingerprints} {
		if _, err := js.Stream(ctx, name); err != nil {
			return nil, fmt.Errorf("checking stream %s (run the bus setup first): %w", name, err)
		}
	}
	store, err := js.ObjectStore(ctx, bus.BucketManifests)
	if err != nil {
		return nil, fmt.Errorf("binding object store %s (run the bus setup first): %w", bus.BucketManifests, err)
	}
	return store, nil
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
