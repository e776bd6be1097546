// Package fpsvc is the fingerprint service: it consumes the proxies'
// ListObservation events from JetStream on a durable pull consumer shared by
// every instance, fingerprints each captured surface with package surface,
// stores the capture in the manifest object store under its surface hash,
// and publishes one Fingerprint event per observation.
//
// Settlement, once per delivery: a message that can never be processed is
// dead-lettered and terminated; a surface the engine rejects is published
// as a Fingerprint carrying the engine's error code (the drift service fails
// closed on it) and acked; a failure to store or publish is retried with
// NakWithDelay; a success is acked only after the publish was acknowledged.
// A bus.Router consumes, settles each of these through its bus.Settler,
// drains at shutdown and creates the consumer again when it is deleted.
// docs/services/fingerprint.md is the operator's reference.
package fpsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/settings"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// ServiceName names the service in dead letters and logs.
const ServiceName = "fingerprint"

// FilterSubject selects the ListObservation subjects of every tenant and server.
const FilterSubject = bus.Prefix + ".obs.list.>"

// Config tunes the consumer and the workers. Zero fields take the value of
// DefaultConfig.
type Config struct {
	// Durable names the pull consumer every instance shares.
	Durable string
	// Workers is how many observations one instance processes at once.
	Workers int
	// Prefetch is how many messages one instance holds buffered ahead of
	// its workers (the Consume batch).
	Prefetch int
	// MaxDeliver is how many times a message is delivered before the service
	// gives up on it and dead-letters it; -1 retries for ever.
	MaxDeliver int
	// AckWait is how long the server waits for a delivery that was never
	// settled (a crashed or hung instance) before delivering it again.
	AckWait time.Duration
	// MaxAckPending bounds the messages in flight over all instances.
	MaxAckPending int
	// RetryDelay is the NakWithDelay delay after the first transient
	// failure; it doubles with each delivery up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// OpTimeout bounds storing and publishing for one message; it must be
	// shorter than AckWait.
	OpTimeout time.Duration
	// DrainTimeout bounds shutdown: the buffered and in-flight messages are
	// finished within it, the rest are redelivered later.
	DrainTimeout time.Duration
	// Partitions is how many partitions the observation stream has (bus
	// Config.Partitions; 0 or 1: none). With more, the instance consumes
	// one durable consumer per partition of PartitionSet, named
	// <Durable>-p<i> and pinned by NATS to one instance at a time
	// (bus.PartitionRoutes), and MaxAckPending bounds each of them.
	Partitions int
	// PartitionSet is the partitions this instance takes; nil: every one
	// (a partition pinned to another instance waits here as a standby).
	PartitionSet []int
	// MemoBytes bounds the captures remembered (the last one per tenant,
	// server and variant) so that a byte-identical re-listing is not parsed
	// again; -1 turns the memo off.
	MemoBytes int
}

// markerMemoBytes bounds the strings the service's MarkerMemo keeps with
// their markers.
const markerMemoBytes = 16 << 20

// DefaultConfig holds the defaults.
var DefaultConfig = Config{
	Durable:       bus.ConsumerFingerprint,
	Workers:       128,
	Prefetch:      256,
	MaxDeliver:    20,
	AckWait:       30 * time.Second,
	MaxAckPending: 1024,
	RetryDelay:    500 * time.Millisecond,
	MaxRetryDelay: time.Minute,
	OpTimeout:     10 * time.Second,
	DrainTimeout:  15 * time.Second,
	MemoBytes:     64 << 20,
}

// WithDefaults returns c with every zero field set from DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig
	if c.Durable != "" {
		d.Durable = c.Durable
	}
	if c.Workers != 0 {
		d.Workers = c.Workers
	}
	if c.Prefetch != 0 {
		d.Prefetch = c.Prefetch
	}
	if c.MaxDeliver != 0 {
		d.MaxDeliver = c.MaxDeliver
	}
	if c.AckWait != 0 {
		d.AckWait = c.AckWait
	}
	if c.MaxAckPending != 0 {
		d.MaxAckPending = c.MaxAckPending
	}
	if c.RetryDelay != 0 {
		d.RetryDelay = c.RetryDelay
	}
	if c.MaxRetryDelay != 0 {
		d.MaxRetryDelay = c.MaxRetryDelay
	}
	if c.OpTimeout != 0 {
		d.OpTimeout = c.OpTimeout
	}
	if c.DrainTimeout != 0 {
		d.DrainTimeout = c.DrainTimeout
	}
	if c.MemoBytes != 0 {
		d.MemoBytes = c.MemoBytes
	}
	d.Partitions, d.PartitionSet = c.Partitions, c.PartitionSet
	return d
}

// Validate reports a configuration that cannot work, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if err := bus.ValidID("durable", c.Durable); err != nil {
		errs = append(errs, err)
	}
	if c.Workers < 1 || c.Workers > 4096 {
		errs = append(errs, fmt.Errorf("workers %d: want 1 to 4096", c.Workers))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("prefetch %d: want at least 1", c.Prefetch))
	}
	if c.MaxDeliver < -1 || c.MaxDeliver == 1 {
		errs = append(errs, fmt.Errorf("max deliver %d: want at least 2 (one retry), or -1 for no limit", c.MaxDeliver))
	}
	if err := bus.CheckPartitions(c.Partitions, c.PartitionSet); err != nil {
		errs = append(errs, err)
	}
	if c.MemoBytes < -1 {
		errs = append(errs, fmt.Errorf("memo bytes %d: want a size, or -1 for no memo", c.MemoBytes))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("max ack pending %d: want at least 1", c.MaxAckPending))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ack wait", c.AckWait}, {"retry delay", c.RetryDelay}, {"max retry delay", c.MaxRetryDelay},
		{"op timeout", c.OpTimeout}, {"drain timeout", c.DrainTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, d.v))
		}
	}
	if c.AckWait > 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait %v: want at least 1s", c.AckWait))
	}
	if c.MaxRetryDelay < c.RetryDelay {
		errs = append(errs, fmt.Errorf("max retry delay %v is shorter than retry delay %v", c.MaxRetryDelay, c.RetryDelay))
	}
	if c.OpTimeout >= c.AckWait {
		errs = append(errs, fmt.Errorf("op timeout %v must be shorter than ack wait %v, or a slow message is redelivered while still in progress", c.OpTimeout, c.AckWait))
	}
	return errors.Join(errs...)
}

// retryDelay is the NakWithDelay delay for the given delivery (1-based).
func (c Config) retryDelay(delivered uint64) time.Duration {
	return bus.Backoff(c.RetryDelay, c.MaxRetryDelay)(delivered)
}

// Deps are what the service uses and does not own.
type Deps struct {
	JS jetstream.JetStream
	// Manifests stores captures content-addressed; NewObjectManifests
	// adapts bus.Handles.Manifests.
	Manifests ManifestStore
	Log       zerolog.Logger
	Now       func() time.Time // time.Now when nil
	// Metrics records what the service does; nil records nothing.
	Metrics *Metrics
	// Policy is the policy bucket (bus.Handles.Policy): each observation is
	// hashed by its server's hashing settings, resolved from its tenant's
	// policy (package settings). Nil hashes every server with the defaults
	// (SHA-256, annotations covered).
	Policy jetstream.KeyValue
}

// Stats counts what the service did since New. Processed counts every
// observation acked after its Fingerprint was published, Rejected those of
// them whose surface the engine refused; Poison counts terminated messages
// (dead-lettered, including those that ran out of deliveries), Exhausted
// those that ran out of deliveries; Retries counts NakWithDelay calls.
type Stats struct {
	Processed, Rejected, Poison, Exhausted, Retries uint64
}

type counters struct {
	processed, rejected, poison, exhausted, retries atomic.Uint64
}

// Service is the fingerprint service. Run it once; several Services (in one
// process or many) share the durable consumer and split the work.
type Service struct {
	cfg   Config
	js    jetstream.JetStream
	store ManifestStore
	log   zerolog.Logger
	now   func() time.Time
	m     *Metrics

	router *bus.Router
	pol    *settings.Watch // nil: the default hashing for every server
	memo   *memo
	// markers remembers the poisoning markers of each string rated
	// (surface.MarkerMemo): a fleet's manifests share most of theirs.
	markers *surface.MarkerMemo
	known   *knownSet
	flight  flightGroup
	stats   counters
}

// New checks the configuration and dependencies.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fingerprint config: %w", err)
	}
	if d.JS == nil {
		return nil, errors.New("fingerprint deps: JS is nil")
	}
	if d.Manifests == nil {
		return nil, errors.New("fingerprint deps: Manifests is nil")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	cfg = cfg.WithDefaults()
	s := &Service{
		cfg:     cfg,
		js:      d.JS,
		store:   d.Manifests,
		log:     d.Log,
		now:     d.Now,
		m:       d.Metrics,
		memo:    newMemo(cfg.MemoBytes),
		markers: surface.NewMarkerMemo(markerMemoBytes),
		known:   newKnownSet(4096, 10*time.Minute, d.Now),
	}
	var err error
	if d.Policy != nil {
		if s.pol, err = settings.NewWatch(d.Policy, d.Log); err != nil {
			return nil, fmt.Errorf("fingerprint: %w", err)
		}
	}
	s.router, err = bus.NewRouter(bus.RouterConfig{
		Settle: bus.SettleConfig{
			Service: ServiceName, MaxDeliver: cfg.MaxDeliver, Timeout: cfg.OpTimeout,
			Backoff: bus.Backoff(cfg.RetryDelay, cfg.MaxRetryDelay),
		},
		Routes:       cfg.Routes(),
		DrainTimeout: cfg.DrainTimeout,
	}, bus.SettleDeps{JS: d.JS, Log: d.Log, Now: d.Now, Metrics: s.count}, s.process)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	return s, nil
}

// PolicyWatch is the service's watch of the policy bucket, nil without
// one (for its gauges: settings.Watch.Collectors).
func (s *Service) PolicyWatch() *settings.Watch { return s.pol }

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{
		Processed: s.stats.processed.Load(),
		Rejected:  s.stats.rejected.Load(),
		Poison:    s.stats.poison.Load(),
		Exhausted: s.stats.exhausted.Load(),
		Retries:   s.stats.retries.Load(),
	}
}

// ConsumerConfig is the durable consumer Run creates or updates.
// See docs/services/fingerprint.md for why it sets no BackOff.
func (c Config) ConsumerConfig() jetstream.ConsumerConfig {
	c = c.WithDefaults()
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   "fingerprint service: every instance shares this consumer",
		FilterSubject: FilterSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		// No BackOff: the server measures a NakWithDelay from AckWait but
		// its deadline from BackOff[deliveries], so with a growing BackOff a
		// short retry delay silently becomes BackOff[n]-AckWait longer.
		// Retries are paced by NakWithDelay alone (Config.retryDelay, the
		// Settler's Backoff).
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
	}
}

// PartitionFilter is the filter of one partition's consumer, the
// partition token appended (bus.PartitionRoutes).
const PartitionFilter = bus.Prefix + ".obs.list.*.*"

// Routes are the durable consumers Run consumes: ConsumerConfig, or one per
// partition of PartitionSet.
func (c Config) Routes() []bus.Route {
	c = c.WithDefaults()
	return bus.PartitionRoutes(bus.StreamObservations, c.ConsumerConfig(), c.Prefetch, PartitionFilter, c.Partitions, c.PartitionSet)
}

// Run creates or updates the durable consumer and processes observations
// until ctx is done; then it stops fetching, finishes the buffered and
// in-flight messages within DrainTimeout, and returns nil. A consumer
// deleted meanwhile is created again (bus.Router). It returns an error when
// the consumer cannot be created or consuming cannot go on.
func (s *Service) Run(ctx context.Context) error {
	if s.pol != nil {
		// The policies first: an observation hashed before its tenant's
		// policy arrived would be hashed with the defaults.
		stop, err := s.pol.Start(ctx)
		if err != nil {
			return nil // asked to stop before starting
		}
		defer stop()
	}
	return s.router.Run(ctx)
}

// process is the service's part of consuming (a bus.Processor): workers
// fingerprint observations and publish their Fingerprints asynchronously;
// one goroutine settles each message, in order, once its publish is
// answered. On one consumer shared by every instance the workers take
// observations in no particular order (bus.Workers), and a busy instance
// pulls no more than it handles, leaving the rest to the others. With
// partitions, each pinned to one instance, a server's observations are
// fingerprinted and published in the order they came (bus.Lanes), so that
// they reach the drift service in that order.
func (s *Service) process(ctx context.Context, in <-chan *bus.Delivery) {
	pending := make(chan inflight, s.cfg.Prefetch)
	settled := make(chan struct{})
	go func() { defer close(settled); s.settle(ctx, pending) }()
	workers := bus.Workers
	if s.cfg.Partitions > 1 {
		workers = bus.Lanes
	}
	workers(s.cfg.Workers, func(ctx context.Context, d *bus.Delivery) { s.handle(ctx, d, pending) })(ctx, in)
	close(pending)
	<-settled
}
