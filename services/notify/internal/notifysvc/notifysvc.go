// Package notifysvc is the notify service: it consumes verdicts (with
// quarantines and approvals among them) from the verdict stream and held
// calls and their resolutions from the approvals bucket, and delivers each
// event to webhooks, in a generic JSON, Slack or CloudEvents 1.0
// (structured mode) format, filtered per destination, signed with
// HMAC-SHA256 and carrying an idempotency key.
//
// Each destination has durable consumers of its own (notify-<name> on the
// verdict stream, notify-<name>-approvals on the approvals bucket's stream)
// and a bus.Router of its own, so a destination that is down only ever
// holds up its own events. A message is acked once the destination accepted
// it (a 2xx answer) or its filter left it out; a failed attempt is handed
// back with a growing delay (the Router's bus.Settler), and after the last
// delivery dead-lettered (retries_exhausted, on mcpdrift.dead.notify-<name>)
// and terminated. Delivery is at least once: an instance that stops or
// crashes before the ack leaves the message to be delivered again, and the
// receiver drops a repeat by its Idempotency-Key.
// docs/services/notify.md is the operator's reference.
package notifysvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// ServiceName names the service in logs and its NATS client.
const ServiceName = "notify"

// ConsumerPrefix starts the names of every destination's consumers and its
// dead letters' service: notify-<name>.
const ConsumerPrefix = bus.ConsumerNotifyPrefix

// approvalsSuffix ends the name of a destination's consumer of the
// approvals bucket.
const approvalsSuffix = "-approvals"

// Config is the destinations and how they are consumed and retried. Zero
// fields but Destinations take the value of DefaultConfig.
type Config struct {
	// Destinations are the webhooks, at least one (ParseDestination).
	Destinations []Destination
	// Workers is how many requests one instance has in flight to one
	// destination. A server's events go one at a time, in order
	// (bus.Lanes), except when a failed one is retried.
	Workers int
	// Prefetch is how many messages of each consumer one instance buffers.
	Prefetch int
	// MaxDeliver is how many times an event is tried at a destination
	// before it is dead-lettered; -1 tries for ever.
	MaxDeliver int
	// AckWait is how long the server waits for a delivery that was never
	// settled (a crashed instance) before delivering it again.
	AckWait time.Duration
	// MaxAckPending bounds the events in flight per consumer over all
	// instances.
	MaxAckPending int
	// RetryDelay is the wait after the first failed attempt; it doubles
	// with each delivery up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// Timeout bounds one request; it must be shorter than AckWait.
	Timeout time.Duration
	// DrainTimeout bounds shutdown: requests in flight finish within it.
	DrainTimeout time.Duration
}

// DefaultConfig holds the defaults: an event is tried 20 times over about
// two hours (2 s doubling to 10 min) before it is dead-lettered.
var DefaultConfig = Config{
	Workers:       4,
	Prefetch:      64,
	MaxDeliver:    20,
	AckWait:       60 * time.Second,
	MaxAckPending: 256,
	RetryDelay:    2 * time.Second,
	MaxRetryDelay: 10 * time.Minute,
	Timeout:       10 * time.Second,
	DrainTimeout:  15 * time.Second,
}

// WithDefaults returns c with every zero field set from DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig
	d.Destinations = c.Destinations
	for _, p := range []struct{ dst, src *int }{{&d.Workers, &c.Workers}, {&d.Prefetch, &c.Prefetch},
		{&d.MaxDeliver, &c.MaxDeliver}, {&d.MaxAckPending, &c.MaxAckPending}} {
		if *p.src != 0 {
			*p.dst = *p.src
		}
	}
	for _, p := range []struct{ dst, src *time.Duration }{{&d.AckWait, &c.AckWait}, {&d.RetryDelay, &c.RetryDelay},
		{&d.MaxRetryDelay, &c.MaxRetryDelay}, {&d.Timeout, &c.Timeout}, {&d.DrainTimeout, &c.DrainTimeout}} {
		if *p.src != 0 {
			*p.dst = *p.src
		}
	}
	return d
}

// Validate reports a configuration that cannot work, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if len(c.Destinations) == 0 {
		errs = append(errs, errors.New("no destination: give --webhook URL (or MCPDRIFT_NOTIFY_WEBHOOK)"))
	}
	var names []string
	for i, d := range c.Destinations {
		if slices.Contains(names, d.Name) {
			errs = append(errs, coded.Errorf(CodeInvalidDestination, "webhook %d: name %q is another destination's too (two destinations with one URL need --name)", i+1, d.Name))
		}
		names = append(names, d.Name)
	}
	if c.Workers < 1 || c.Workers > 256 {
		errs = append(errs, fmt.Errorf("workers %d: want 1 to 256", c.Workers))
	}
	if c.Prefetch < 1 {
		errs = append(errs, fmt.Errorf("prefetch %d: want at least 1", c.Prefetch))
	}
	if c.MaxDeliver < -1 || c.MaxDeliver == 1 {
		errs = append(errs, fmt.Errorf("max deliver %d: want at least 2 (one retry), or -1 for no limit", c.MaxDeliver))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("max ack pending %d: want at least 1", c.MaxAckPending))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ack wait", c.AckWait}, {"retry delay", c.RetryDelay}, {"max retry delay", c.MaxRetryDelay},
		{"timeout", c.Timeout}, {"drain timeout", c.DrainTimeout}} {
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
	if c.Timeout >= c.AckWait {
		errs = append(errs, fmt.Errorf("timeout %v must be shorter than ack wait %v, or a slow request's event is delivered again while still in flight", c.Timeout, c.AckWait))
	}
	return errors.Join(errs...)
}

// Routes are the consumers of destination d: its verdicts and its
// approvals. A new consumer starts with the events published after it was
// created (a destination added today is not sent last month's verdicts);
// from then on it keeps its place across restarts.
func (c Config) Routes(d Destination) []bus.Route {
	c = c.WithDefaults()
	base := jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		// No BackOff: retries are paced by NakWithDelay alone (the
		// Settler's Backoff), as the other services' consumers are.
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
	}
	verdicts, approvals := base, base
	verdicts.Durable = ConsumerPrefix + d.Name
	verdicts.Description = "notify: verdicts to destination " + d.Name
	approvals.Durable = ConsumerPrefix + d.Name + approvalsSuffix
	approvals.Description = "notify: held calls and their resolutions to destination " + d.Name
	approvals.FilterSubject = approvalsPrefix + ">"
	return []bus.Route{
		{Stream: bus.StreamVerdicts, Consumer: verdicts, Prefetch: c.Prefetch},
		{Stream: bus.Approvals.Stream, Consumer: approvals, Prefetch: c.Prefetch},
	}
}

// Deps are what the service uses and does not own.
type Deps struct {
	JS  jetstream.JetStream
	Log zerolog.Logger
	Now func() time.Time // time.Now when nil
	// Secret keys the HMAC-SHA256 signature of every request; empty: the
	// requests are not signed.
	Secret []byte
	// Metrics records what the service does; nil records nothing.
	Metrics *Metrics
}

// Stats counts what the service did since New, over every destination.
type Stats struct {
	Delivered, Filtered, Failures, Retries, DeadLettered uint64
}

// Service is the notify service.
type Service struct {
	cfg     Config
	log     zerolog.Logger
	now     func() time.Time
	send    *sender
	dests   []*destination
	routers []*bus.Router
	stats   struct{ delivered, filtered, failures, retries, deadLettered atomic.Uint64 }
}

// destination is a Destination with its metrics.
type destination struct {
	Destination
	m *destMetrics
}

// New checks the configuration and dependencies and makes one Router per
// destination.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("notify config: %w", err)
	}
	if d.JS == nil {
		return nil, errors.New("notify deps: JS is nil")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	cfg = cfg.WithDefaults()
	s := &Service{cfg: cfg, log: d.Log, now: d.Now, send: newSender(d.Secret, cfg.Timeout, d.Now)}
	for _, dst := range cfg.Destinations {
		dd := &destination{Destination: dst, m: d.Metrics.destination(dst.Name)}
		r, err := bus.NewRouter(bus.RouterConfig{
			Settle: bus.SettleConfig{
				Service: ConsumerPrefix + dst.Name, MaxDeliver: cfg.MaxDeliver, Timeout: cfg.Timeout,
				Backoff: bus.Backoff(cfg.RetryDelay, cfg.MaxRetryDelay),
			},
			Routes:       cfg.Routes(dst),
			DrainTimeout: cfg.DrainTimeout,
		}, bus.SettleDeps{JS: d.JS, Log: d.Log.With().Str("destination", dst.Name).Logger(), Now: d.Now, Metrics: s.counter(dd)},
			bus.Lanes(cfg.Workers, bus.Settling(s.handler(dd))))
		if err != nil {
			return nil, fmt.Errorf("notify: destination %s: %w", dst.Name, err)
		}
		s.dests = append(s.dests, dd)
		s.routers = append(s.routers, r)
	}
	return s, nil
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	return Stats{Delivered: s.stats.delivered.Load(), Filtered: s.stats.filtered.Load(), Failures: s.stats.failures.Load(),
		Retries: s.stats.retries.Load(), DeadLettered: s.stats.deadLettered.Load()}
}

// Run consumes for every destination until ctx is done, then lets requests
// in flight finish within DrainTimeout and returns nil. It returns an error
// when a consumer cannot be created or consuming cannot go on; the other
// destinations then stop too.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range s.routers {
		g.Go(func() error { return r.Run(gctx) })
	}
	return g.Wait()
}

// handler handles one message for destination d: nil once d accepted the
// event or its filter left it out, a poison error for a message that is not
// an event, a *deliveryError for a failed attempt.
func (s *Service) handler(d *destination) bus.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ev, skip, err := decode(msg, s.now())
		if err != nil {
			return err
		}
		if skip || !d.Filter.Match(ev) {
			s.stats.filtered.Add(1)
			d.m.filtered()
			return nil
		}
		body, contentType, err := Render(d.Format, ev)
		if err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "rendering event %s: %v", ev.ID, err)
		}
		start := time.Now()
		if err := s.send.post(ctx, &d.Destination, ev, body, contentType); err != nil {
			s.stats.failures.Add(1)
			var de *deliveryError
			if errors.As(err, &de) {
				d.m.failure(de.reason)
			}
			return err
		}
		s.stats.delivered.Add(1)
		d.m.delivered(time.Since(start))
		return nil
	}
}

// counter is told of every settlement of d's messages by its Settler.
func (s *Service) counter(d *destination) func(bus.Outcome, string) {
	return func(o bus.Outcome, code string) {
		switch o {
		case bus.Retried:
			s.stats.retries.Add(1)
			d.m.retry()
		case bus.DeadLettered:
			s.stats.deadLettered.Add(1)
			d.m.deadLetter(code)
		}
	}
}
