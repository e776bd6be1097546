// Command fingerprint is the mcpdrift fingerprint service: it consumes the
// proxies' tools/list observations from NATS JetStream, fingerprints each
// surface, stores the manifest and publishes a Fingerprint event. Run as many
// instances as needed: they share one durable consumer.
// docs/services/fingerprint.md is the reference.
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/fingerprint/internal/fpsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

func main() {
	options.Main("fingerprint", func(ctx context.Context, args []string) error {
		return run(ctx, args, os.Getenv, os.Stderr)
	})
}

// settings are what run reads from flags and the environment.
type settings struct {
	options.Service
	svc          fpsvc.Config
	partitionSet string
}

func settingsOptions(s *settings) []options.Option {
	s.svc = fpsvc.DefaultConfig
	return append(s.Service.Options("only check that they exist (the fingerprint role's rights suffice)"),
		options.Opt("durable", "MCPDRIFT_FINGERPRINT_DURABLE", "NAME", "durable consumer shared by every instance (with partitions: NAME-p<i>, one per partition)", options.String(&s.svc.Durable)),
		options.Partitions(&s.Partitions),
		options.PartitionSet(&s.partitionSet, "MCPDRIFT_FINGERPRINT_PARTITION_SET"),
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
shared by every instance (with --partitions, one per partition, each pinned
to one instance at a time), fingerprints each captured surface, stores the
manifest in the object store ` + bus.BucketManifests + `, and publishes a Fingerprint
event on mcpdrift.fp.<tenant>.<server>. Stops on SIGINT or SIGTERM after
finishing the messages it holds. With --ops-addr it serves /healthz, /readyz
(connected to NATS, streams checked, not stopping) and Prometheus /metrics.

Usage: fingerprint [flags]

Each flag can also be set by its environment variable; a flag wins.

`
}

// parse fills settings from defaults, then the environment, then flags.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*settings, error) {
	s := new(settings)
	_, err := options.Parse(options.Command{Name: "fingerprint", Header: header(), Options: settingsOptions(s)}, args, getenv, stderr)
	return s, err
}

func (s *settings) validate() (zerolog.Level, error) {
	lvl, err := s.Service.Validate()
	return lvl, options.Invalid(errors.Join(err, s.svc.Validate()))
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
	log := options.Logger(stderr, lvl, fpsvc.ServiceName)
	o := ops.New(fpsvc.ServiceName, log)
	return o.RunWith(ctx, s.OpsAddr, func(ctx context.Context) error { return serve(ctx, s, log, o) })
}

// serve connects, sets up the bus and runs the service until ctx ends; o
// holds its readiness checks and metrics.
func serve(ctx context.Context, s *settings, log zerolog.Logger, o *ops.Server) error {
	started := o.Starting("connecting and checking streams")
	metrics := fpsvc.NewMetrics(o.Registry())
	c := s.svc.WithDefaults()
	// Asynchronous publishes that get no answer are dropped after the
	// operation timeout instead of being tracked for ever.
	b, err := s.Open(ctx, fpsvc.ServiceName, log, []bus.Object{bus.Observations, bus.Fingerprints, bus.Policy, bus.Manifests},
		jetstream.WithPublishAsyncTimeout(c.OpTimeout))
	if err != nil {
		return err
	}
	defer b.Close(2 * time.Second) // acks and naks still buffered
	o.AddCheck("nats", ops.NATSConnected(b.NC))
	if s.svc.Partitions, s.svc.PartitionSet, err = b.Partitioning(ctx, bus.StreamObservations, s.Partitions, s.partitionSet); err != nil {
		return err
	}
	svc, err := fpsvc.New(s.svc, fpsvc.Deps{
		JS:        b.JS,
		Manifests: fpsvc.NewObjectManifests(b.JS, b.Manifests),
		Policy:    b.Policy,
		Log:       log,
		Now:       time.Now,
		Metrics:   metrics,
	})
	if err != nil {
		return err
	}
	if w := svc.PolicyWatch(); w != nil {
		o.Registry().MustRegister(w.Collectors("fingerprint")...)
	}
	for _, rt := range s.svc.Routes() {
		o.AddConsumerLag(b.JS, bus.StreamObservations, rt.Consumer.Durable)
	}
	started()
	log.Info().Str("url", b.NC.ConnectedUrlRedacted()).Str("durable", c.Durable).Int("workers", c.Workers).
		Int("partitions", max(s.svc.Partitions, 1)).Ints("partition_set", s.svc.PartitionSet).
		Int("max_deliver", c.MaxDeliver).Int("max_ack_pending", c.MaxAckPending).Msg("fingerprint service started")
	err = svc.Run(ctx)
	st := svc.Stats()
	log.Info().Uint64("processed", st.Processed).Uint64("rejected", st.Rejected).Uint64("poison", st.Poison).
		Uint64("exhausted", st.Exhausted).Uint64("retries", st.Retries).Msg("fingerprint service stopped")
	return err
}
