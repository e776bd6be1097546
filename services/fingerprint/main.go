// Command fingerprint is the mcpdrift fingerprint service: it consumes the
// proxies' tools/list observations from NATS JetStream, fingerprints each
// surface, stores the manifest and publishes a Fingerprint event. Run as many
// instances as needed: they share one durable consumer.
// docs/services/fingerprint.md is the reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/fingerprint/internal/fpsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
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

// settings are what run reads from flags and the environment.
type settings struct {
	options.Service
	svc fpsvc.Config
}

func settingsOptions(s *settings) []options.Option {
	s.svc = fpsvc.DefaultConfig
	return append(s.Service.Options("only check that they exist (the fingerprint role's rights suffice)"),
		options.Opt("durable", "MCPDRIFT_FINGERPRINT_DURABLE", "NAME", "durable consumer shared by every instance", options.String(&s.svc.Durable)),
		options.Opt("workers", "MCPDRIFT_FINGERPRINT_WORKERS", "N", "observations one instance processes at once", options.Int(&s.svc.Workers)),
		options.Opt("prefetch", "MCPDRIFT_FINGERPRINT_PREFETCH", "N", "messages one instance buffers ahead of its workers", options.Int(&s.svc.Prefetch)),
		options.Opt("max-deliver", "MCPDRIFT_FINGERPRINT_MAX_DELIVER", "N", "deliveries before a message is dead-lettered; -1 for no limit", options.Int(&s.svc.MaxDeliver)),
		options.Opt("ack-wait", "MCPDRIFT_FINGERPRINT_ACK_WAIT", "DURATION", "redelivery wait of a message no instance settled (a crash)", options.Duration(&s.svc.AckWait)),
		options.Opt("max-ack-pending", "MCPDRIFT_FINGERPRINT_MAX_ACK_PENDING", "N", "messages in flight over all instances", options.Int(&s.svc.MaxAckPending)),
		options.Opt("retry-delay", "MCPDRIFT_FINGERPRINT_RETRY_DELAY", "DURATION", "first retry delay after a transient failure; doubles per delivery", options.Duration(&s.svc.RetryDelay)),
		options.Opt("max-retry-delay", "MCPDRIFT_FINGERPRINT_MAX_RETRY_DELAY", "DURATION", "longest retry delay", options.Duration(&s.svc.MaxRetryDelay)),
		options.Opt("op-timeout", "MCPDRIFT_FINGERPRINT_OP_TIMEOUT", "DURATION", "bound on storing and publishing for one message; below --ack-wait", options.Duration(&s.svc.OpTimeout)),
		options.Opt("drain-timeout", "MCPDRIFT_FINGERPRINT_DRAIN_TIMEOUT", "DURATION", "bound on finishing in-flight messages at shutdown", options.Duration(&s.svc.DrainTimeout)),
		options.Opt("memo-bytes", "MCPDRIFT_FINGERPRINT_MEMO_BYTES", "N", "bytes of captures remembered to skip re-parsing identical ones; -1 for none", options.Int(&s.svc.MemoBytes)),
	)
}

// header starts the --help text; options.Usage lists the options after it.
func header() string {
	return `fingerprint: the mcpdrift fingerprint service

Consumes ListObservation events (` + fpsvc.FilterSubject + `) on a durable consumer
shared by every instance, fingerprints each captured surface, stores the
manifest in the object store ` + bus.BucketManifests + `, and publishes a Fingerprint
event on mcpdrift.fp.<tenant>.<server>. Stops on SIGINT or SIGTERM after
finishing the messages it holds. With --ops-addr it serves /healthz, /readyz
(connected to NATS, streams checked, not stopping) and Prometheus /metrics.

Usage: fingerprint [flags]

Each flag can also be set by its environment variable; a flag wins.

`
}

// parse fills settings from defaults, then the environment, then flags.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*settings, bool, error) {
	s := new(settings)
	help, err := options.Parse("fingerprint", header(), settingsOptions(s), args, getenv, stderr)
	if help || err != nil {
		return nil, help, err
	}
	return s, false, nil
}

func (s *settings) validate() (zerolog.Level, error) {
	lvl, err := s.Service.Validate()
	return lvl, errors.Join(err, s.svc.Validate())
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
	o := ops.New(fpsvc.ServiceName, log)
	return o.RunWith(ctx, s.OpsAddr, func(ctx context.Context) error { return serve(ctx, s, log, o) })
}

// natsInboxPrefix is where the service's replies arrive (JetStream API
// answers, publish acks, pulled messages): the fingerprint role may
// subscribe there and nowhere else under an inbox (deploy/nats/auth.conf).
const natsInboxPrefix = "_INBOX_fingerprint"

// serve connects, sets up the bus and runs the service until ctx ends; o
// holds its readiness checks and metrics.
func serve(ctx context.Context, s *settings, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting and checking streams")
	metrics := fpsvc.NewMetrics(o.Registry())

	nc, err := nats.Connect(s.NATSURL, bus.ServiceOptions("mcpdrift-"+fpsvc.ServiceName, natsInboxPrefix, s.NATSCreds, log)...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", s.NATSURL, err)
	}
	o.AddCheck("nats", ops.NATSConnected(nc))
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
	if s.BusSetup == options.SetupCheck {
		manifests, err = checkBus(setupCtx, js)
	} else {
		var h *bus.Handles
		if h, err = bus.Setup(setupCtx, js, bus.Config{Replicas: s.Replicas}); err == nil {
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
		Metrics:   metrics,
	})
	if err != nil {
		return err
	}
	c := s.svc.WithDefaults()
	o.AddConsumerLag(js, bus.StreamObservations, c.Durable)
	started()
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
	if err := bus.CheckStreams(ctx, js, bus.StreamObservations, bus.StreamFingerprints); err != nil {
		return nil, err
	}
	store, err := js.ObjectStore(ctx, bus.BucketManifests)
	if err != nil {
		return nil, fmt.Errorf("binding object store %s (run the bus setup first): %w", bus.BucketManifests, err)
	}
	return store, nil
}
