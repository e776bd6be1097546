// Package sink is the audit sink: it consumes every observation, verdict,
// admin action and dead letter from JetStream on durable pull consumers
// shared by every instance, and writes them to ClickHouse in batches.
//
// Settlement: a message is acked only after every row of its batch is in
// ClickHouse. When ClickHouse cannot be written, the batch is held and
// retried with a growing delay (its messages kept in progress), nothing
// further is acked, and the events wait in JetStream until ClickHouse
// returns. A message that can never be written (undecodable, a subject it
// does not match, an impossible time) is copied to mcpdrift.dead.audit as a
// DeadLetter with a stable code and terminated. A CallObservations message
// becomes one row per call, all or none: one bad call dead-letters it whole.
// Rows carry the event's (the call's) deterministic id in the sort key of
// ReplacingMergeTree tables, so a redelivery after a crash collapses into
// the row already written. A bus.Router consumes, does every ack, hand-back
// and dead letter through its bus.Settler, drains at shutdown and creates a
// deleted consumer again; the sink supplies its batcher and writer.
// docs/services/audit.md is the operator's reference.
package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// ServiceName names the service in dead letters and logs.
const ServiceName = "audit"

// Arguments modes: what is stored of tool-call arguments.
const (
	ArgumentsDigest = "digest" // the digest only (the default)
	ArgumentsFull   = "full"   // the arguments too, with known secrets redacted
)

// Config tunes the consumers and batches. Zero fields take the value of
// DefaultConfig.
type Config struct {
	// Database holds the audit tables.
	Database string
	// BatchSize is how many rows make a batch that is written at once.
	BatchSize int
	// BatchAge is how long the oldest row of a batch waits before the batch
	// is written anyway.
	BatchAge time.Duration
	// Prefetch is how many messages each consumer buffers ahead.
	Prefetch int
	// AckWait is how long JetStream waits for a delivery that was never
	// settled (a crashed instance) before delivering it again.
	AckWait time.Duration
	// MaxAckPending bounds the messages in flight per consumer, over all
	// instances; it must hold at least two batches.
	MaxAckPending int
	// RetryDelay is the first wait after a failed write; it doubles up to
	// MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// WriteTimeout bounds one write attempt; it must be shorter than AckWait.
	WriteTimeout time.Duration
	// DrainTimeout bounds shutdown: buffered messages are written within it;
	// what is not written by then is handed back to JetStream.
	DrainTimeout time.Duration
	// Arguments is ArgumentsDigest or ArgumentsFull.
	Arguments string
}

// DefaultConfig holds the defaults.
var DefaultConfig = Config{
	Database:      "mcpdrift",
	BatchSize:     20000,
	BatchAge:      time.Second,
	Prefetch:      5000,
	AckWait:       60 * time.Second,
	MaxAckPending: 100000,
	RetryDelay:    250 * time.Millisecond,
	MaxRetryDelay: 30 * time.Second,
	WriteTimeout:  30 * time.Second,
	DrainTimeout:  30 * time.Second,
	Arguments:     ArgumentsDigest,
}

// WithDefaults returns c with every zero field set from DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	if c.Database != "" {
		d.Database = c.Database
	}
	if c.Arguments != "" {
		d.Arguments = c.Arguments
	}
	set(&d.BatchSize, c.BatchSize)
	set(&d.Prefetch, c.Prefetch)
	set(&d.MaxAckPending, c.MaxAckPending)
	setD(&d.BatchAge, c.BatchAge)
	setD(&d.AckWait, c.AckWait)
	setD(&d.RetryDelay, c.RetryDelay)
	setD(&d.MaxRetryDelay, c.MaxRetryDelay)
	setD(&d.WriteTimeout, c.WriteTimeout)
	setD(&d.DrainTimeout, c.DrainTimeout)
	return d
}

// Validate reports a configuration that cannot work, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.BatchSize < 1 || c.BatchSize > 1_000_000 {
		errs = append(errs, fmt.Errorf("batch size %d: want 1 to 1000000", c.BatchSize))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("prefetch %d: want at least 1", c.Prefetch))
	}
	if c.MaxAckPending < 2*c.BatchSize {
		errs = append(errs, fmt.Errorf("max ack pending %d: want at least two batches (%d)", c.MaxAckPending, 2*c.BatchSize))
	}
	if c.Arguments != ArgumentsDigest && c.Arguments != ArgumentsFull {
		errs = append(errs, fmt.Errorf("arguments %q: want %s or %s", c.Arguments, ArgumentsDigest, ArgumentsFull))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"batch age", c.BatchAge}, {"ack wait", c.AckWait}, {"retry delay", c.RetryDelay},
		{"max retry delay", c.MaxRetryDelay}, {"write timeout", c.WriteTimeout}, {"drain timeout", c.DrainTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, d.v))
		}
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait %v: want at least 1s", c.AckWait))
	}
	if c.MaxRetryDelay < c.RetryDelay {
		errs = append(errs, fmt.Errorf("max retry delay %v is shorter than retry delay %v", c.MaxRetryDelay, c.RetryDelay))
	}
	if c.WriteTimeout >= c.AckWait {
		errs = append(errs, fmt.Errorf("write timeout %v must be shorter than ack wait %v", c.WriteTimeout, c.AckWait))
	}
	if c.BatchAge >= c.AckWait {
		errs = append(errs, fmt.Errorf("batch age %v must be shorter than ack wait %v", c.BatchAge, c.AckWait))
	}
	return errors.Join(errs...)
}

// Consumer is one durable consumer of the sink.
type Consumer struct {
	Stream, Durable, Description string
}

// Consumers are the sink's durable consumers, one per stream.
var Consumers = []Consumer{
	{bus.StreamObservations, bus.ConsumerAuditObservations, "audit sink: list and call observations"},
	{bus.StreamVerdicts, bus.ConsumerAuditVerdicts, "audit sink: verdicts"},
	{bus.StreamAdmin, bus.ConsumerAuditAdmin, "audit sink: admin actions and dead letters"},
}

// ConsumerConfig is the durable consumer Run creates or updates on a stream.
// MaxDeliver is unlimited: a message that can never be written is
// terminated by the sink itself, and an outage must not use up deliveries.
func (c Config) ConsumerConfig(k Consumer) jetstream.ConsumerConfig {
	c = c.WithDefaults()
	return jetstream.ConsumerConfig{
		Durable:       k.Durable,
		Description:   k.Description,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.MaxAckPending,
	}
}

// Deps are what the service uses and does not own.
type Deps struct {
	JS   jetstream.JetStream
	Conn driver.Conn // ClickHouse, native protocol; the schema already migrated
	Log  zerolog.Logger
	Now  func() time.Time // time.Now when nil
	// Metrics records what the sink does; nil records nothing.
	Metrics *Metrics
}

// Stats counts what the service did since New.
type Stats struct {
	// Written counts rows written: one per event, which is one per acked
	// message except for CallObservations, one per call (none for a batch
	// of no calls).
	Written uint64
	// Batches counts successful batch writes.
	Batches uint64
	// WriteFailures counts failed write attempts (ClickHouse unreachable or
	// refusing); each is retried.
	WriteFailures uint64
	// Poison counts messages dead-lettered and terminated.
	Poison uint64
	// Down is true while writes are failing.
	Down bool
}

// Service is the audit sink. Run it once; several Services (in one process
// or many) share the durable consumers and split the work.
type Service struct {
	cfg  Config
	js   jetstream.JetStream
	conn driver.Conn
	log  zerolog.Logger
	now  func() time.Time
	m    *Metrics

	router *bus.Router

	written, batches, failures, poisoned atomic.Uint64
	down                                 atomic.Bool
}

// New checks the configuration and dependencies.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit config: %w", err)
	}
	if d.JS == nil || d.Conn == nil {
		return nil, errors.New("audit deps: JS and Conn are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	cfg = cfg.WithDefaults()
	s := &Service{cfg: cfg, js: d.JS, conn: d.Conn, log: d.Log, now: d.Now, m: d.Metrics}
	var err error
	routes := make([]bus.Route, len(Consumers))
	for i, k := range Consumers {
		routes[i] = bus.Route{Stream: k.Stream, Consumer: cfg.ConsumerConfig(k), Prefetch: cfg.Prefetch}
	}
	s.router, err = bus.NewRouter(bus.RouterConfig{
		Settle: bus.SettleConfig{
			// No delivery limit (ConsumerConfig): only poison is dead-lettered.
			Service: ServiceName, MaxDeliver: -1, Timeout: cfg.WriteTimeout,
			Backoff: bus.Backoff(cfg.RetryDelay, cfg.MaxRetryDelay),
		},
		Routes:       routes,
		Buffer:       cfg.Prefetch,
		DrainTimeout: cfg.DrainTimeout,
	}, bus.SettleDeps{JS: d.JS, Log: d.Log, Now: d.Now, Metrics: s.count}, s.process)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return s, nil
}

// count is told of every settlement by the Settler.
func (s *Service) count(o bus.Outcome, code string) {
	if o == bus.DeadLettered {
		s.poisoned.Add(1)
		s.m.deadLetter(code)
	}
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{Written: s.written.Load(), Batches: s.batches.Load(), WriteFailures: s.failures.Load(),
		Poison: s.poisoned.Load(), Down: s.down.Load()}
}

// Run creates or updates the durable consumers and writes events until ctx
// is done; then it stops fetching, writes what it holds within DrainTimeout
// (handing back to JetStream what it could not write), and returns nil. A
// consumer deleted meanwhile is created again (bus.Router). It returns an
// error when a consumer cannot be created or consuming cannot go on.
func (s *Service) Run(ctx context.Context) error { return s.router.Run(ctx) }

// process is the sink's part of consuming (a bus.Processor): the batcher
// decodes deliveries into a batch; the writer writes each full batch and
// only then acks its messages. Two batches: one filling while the other is
// written.
func (s *Service) process(ctx context.Context, in <-chan *bus.Delivery) {
	full := make(chan *batch, 1)
	free := make(chan *batch, 2)
	free <- new(batch)
	free <- new(batch)
	var wg sync.WaitGroup
	wg.Go(func() { s.batcher(ctx, in, full, free) })
	wg.Go(func() {
		for b := range full {
			s.flush(ctx, b)
			b.reset()
			free <- b
		}
	})
	wg.Wait()
}

// batcher decodes messages into batches and hands a batch to the writer
// when it holds BatchSize rows or its oldest row is BatchAge old. It writes
// the last batch when in is closed.
func (s *Service) batcher(ctx context.Context, in <-chan *bus.Delivery, full chan<- *batch, free <-chan *batch) {
	defer close(full)
	b := <-free
	tick := time.NewTicker(max(s.cfg.BatchAge/4, 5*time.Millisecond))
	defer tick.Stop()
	hand := func() {
		full <- b
		b = <-free
	}
	for {
		select {
		case d, ok := <-in:
			if !ok {
				if len(b.msgs) > 0 {
					full <- b
				}
				return
			}
			s.add(ctx, d, b)
			if b.rows() >= s.cfg.BatchSize {
				hand()
			}
		case <-tick.C:
			if len(b.msgs) > 0 && s.now().Sub(b.first) >= s.cfg.BatchAge {
				hand()
			}
		}
	}
}

// add decodes one message into the batch, or dead-letters it.
func (s *Service) add(ctx context.Context, d *bus.Delivery, b *batch) {
	msg := d.Msg
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to settle.
		d.Settle(ctx, err) // logged, counted unsettled
		return
	}
	env := envelope{subject: msg.Subject(), seq: md.Sequence.Stream, stamp: md.Timestamp,
		msgID: func() string { return msg.Headers().Get("Nats-Msg-Id") }}
	before := b.rows()
	if err := s.decode(env, msg.Data(), b); err != nil {
		d.Settle(ctx, err) // poison: dead-lettered and terminated
		return
	}
	if len(b.msgs) == 0 {
		b.first = s.now()
	}
	b.msgs = append(b.msgs, d)
	s.m.added(b.rows() - before)
}

// flush writes a batch, retrying until it is written or the work context
// ends (then the messages are handed back), and acks its messages.
func (s *Service) flush(ctx context.Context, b *batch) {
	delay := s.cfg.RetryDelay
	var downSince time.Time
	lastKeep := s.now()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := s.write(ctx, b)
		if err == nil {
			s.m.written(b, time.Since(start))
			for _, d := range b.msgs {
				d.Settle(ctx, nil) // a lost ack means a redelivery, which collapses
			}
			s.written.Add(uint64(b.rows()))
			s.batches.Add(1)
			if !downSince.IsZero() {
				s.down.Store(false)
				s.log.Info().Dur("down_for", s.now().Sub(downSince)).Int("attempts", attempt).
					Int("rows", b.rows()).Msg("clickhouse writes resumed")
			}
			return
		}
		s.failures.Add(1)
		s.m.failure()
		if downSince.IsZero() {
			downSince = s.now()
			s.down.Store(true)
		}
		if ctx.Err() != nil {
			for _, d := range b.msgs {
				d.HandBack()
			}
			s.m.handedBack(b)
			s.log.Warn().Err(err).Int("rows", b.rows()).Msg("stopping with an unwritten batch; handed back to jetstream")
			return
		}
		s.log.Warn().Err(err).Int("rows", b.rows()).Int("attempt", attempt).Dur("retry_in", delay).
			Msg("writing to clickhouse; holding the batch and acking nothing")
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		// Keep the held messages from being redelivered while we wait.
		if s.now().Sub(lastKeep) >= s.cfg.AckWait/3 {
			for _, d := range b.msgs {
				d.InProgress()
			}
			lastKeep = s.now()
		}
		delay = min(2*delay, s.cfg.MaxRetryDelay)
	}
}

// write inserts every table of the batch that has rows.
func (s *Service) write(ctx context.Context, b *batch) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	for _, t := range b.tables() {
		if t.len() == 0 {
			continue
		}
		if err := insert(ctx, s.conn, s.cfg.Database, t); err != nil {
			return fmt.Errorf("writing %d rows to %s: %w", t.len(), t.name(), err)
		}
	}
	return nil
}
