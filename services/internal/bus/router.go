package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Route is one durable pull consumer a Router consumes.
type Route struct {
	// Stream holds the consumer.
	Stream string
	// Consumer is created or updated at start, and created again when it is
	// deleted while the Router runs.
	Consumer jetstream.ConsumerConfig
	// Prefetch is how many messages are pulled ahead of the Processor
	// (jetstream.PullMaxMessages); 0 leaves the client library's default.
	Prefetch int
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// Settle configures the Settler every delivery is settled with; its
	// Service names the service in dead letters and logs.
	Settle SettleConfig
	// Routes are the consumers, at least one. Their deliveries all go to the
	// one Processor.
	Routes []Route
	// Buffer is how many deliveries wait between the consumers and the
	// Processor; 0 hands each one over directly.
	Buffer int
	// DrainTimeout bounds shutdown: the messages buffered and in hand are
	// processed and settled within it; then the work context ends and
	// whatever is left is handed back or redelivered later.
	DrainTimeout time.Duration
	// RecreateDelay is the first wait between attempts to create a deleted
	// consumer again; it doubles up to 16 times as long. 0: 250 ms.
	RecreateDelay time.Duration
}

// Processor is a service's part of consuming: it takes deliveries from in
// until in is closed, settles each exactly once (Delivery.Settle, HandBack),
// and returns once every delivery it took is settled. ctx is the work
// context: a shutdown does not end it, so that what is in hand is finished
// and settled; it ends when the drain deadline passes, and then a Processor
// gives up fast (a failed attempt settles as a retry; HandBack).
//
// Workers, Lanes and Settling make the usual Processors from a Handler; a
// Processor of its own suits work settled later than it is handed over (a
// batch written when full, a publish acknowledged asynchronously).
type Processor func(ctx context.Context, in <-chan *Delivery)

// Handler handles one message: nil acks it, a Poison error dead-letters and
// terminates it, any other error retries it with a delay (the Settler).
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Settling returns a handler of deliveries that settles each by what h
// returned.
func Settling(h Handler) func(context.Context, *Delivery) {
	return func(ctx context.Context, d *Delivery) { d.Settle(ctx, h(ctx, d.Msg)) }
}

// Workers returns a Processor that handles deliveries with h on n
// goroutines, one delivery each at a time, in no particular order. A
// delivery taken after the work context ended is handed back unhandled.
func Workers(n int, h func(context.Context, *Delivery)) Processor {
	return func(ctx context.Context, in <-chan *Delivery) {
		var wg sync.WaitGroup
		for range max(n, 1) {
			wg.Go(func() {
				for d := range in {
					handleOrHandBack(ctx, d, h)
				}
			})
		}
		wg.Wait()
	}
}

// Lanes returns a Processor that handles deliveries with h on n
// goroutines, where the deliveries of one subject always go to the same
// goroutine (LaneOf), in the order they arrived: a subject's messages are
// handled in order and never at once. A lane's queue has no bound of its
// own, so a lane whose work is slow holds up only its own subjects, never
// the consumers and with them every other lane; the consumers'
// MaxAckPending bounds what the lanes hold together. A delivery taken after
// the work context ended is handed back unhandled.
func Lanes(n int, h func(context.Context, *Delivery)) Processor {
	n = max(n, 1)
	return func(ctx context.Context, in <-chan *Delivery) {
		ln := newLanes(n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for {
					d, ok := ln.next(i)
					if !ok {
						return
					}
					handleOrHandBack(ctx, d, h)
				}
			})
		}
		for d := range in {
			ln.push(d)
		}
		ln.close()
		wg.Wait()
	}
}

func handleOrHandBack(ctx context.Context, d *Delivery, h func(context.Context, *Delivery)) {
	if ctx.Err() != nil {
		d.HandBack() // past the drain deadline: another delivery, at once, to any instance
		return
	}
	h(ctx, d)
}

// Delivery is one delivery of a message, to be settled exactly once: a
// second settlement is a bug, logged and ignored.
type Delivery struct {
	Msg jetstream.Msg
	r   *Router
	// done is set by the first settlement.
	done atomic.Bool
}

// Settle settles the delivery by the outcome of its handling (see
// Settler.Settle) and returns how.
func (d *Delivery) Settle(ctx context.Context, err error) Outcome {
	if !d.settling() {
		return Unsettled
	}
	return d.r.settler.Settle(ctx, d.Msg, err)
}

// HandBack gives the message back unprocessed, for another delivery at
// once (Settler.HandBack).
func (d *Delivery) HandBack() Outcome {
	if !d.settling() {
		return Unsettled
	}
	return d.r.settler.HandBack(d.Msg)
}

// InProgress keeps the message from being delivered again while its work
// is retried (Settler.InProgress); it does not settle it.
func (d *Delivery) InProgress() {
	if !d.done.Load() {
		d.r.settler.InProgress(d.Msg)
	}
}

func (d *Delivery) settling() bool {
	if !d.done.CompareAndSwap(false, true) {
		d.r.log.Error().Str("subject", d.Msg.Subject()).Msg("message settled twice; the second settlement is ignored")
		return false
	}
	d.r.unsettled.Add(-1)
	return true
}

// Router is the one consume loop of every service, as Watermill's Router
// owns every handler's loop: it creates or updates the service's durable
// consumers, consumes them, hands every delivery to the service's
// Processor, which settles each exactly once through the Router's Settler,
// drains on shutdown within a deadline, and creates a consumer that was
// deleted again and goes on, the same way for every service. A service
// supplies only its Processor.
type Router struct {
	cfg     RouterConfig
	js      jetstream.JetStream
	log     zerolog.Logger
	settler *Settler
	proc    Processor

	unsettled atomic.Int64 // deliveries made and not settled yet
	recreated atomic.Int64 // consumers created again after a deletion
}

// NewRouter checks the configuration and makes the Router's Settler from
// cfg.Settle and d.
func NewRouter(cfg RouterConfig, d SettleDeps, p Processor) (*Router, error) {
	var errs []error
	if len(cfg.Routes) == 0 {
		errs = append(errs, errors.New("router: no routes"))
	}
	for _, rt := range cfg.Routes {
		if err := ValidID("durable", rt.Consumer.Durable); err != nil {
			errs = append(errs, fmt.Errorf("router: %w", err))
		}
		if rt.Stream == "" {
			errs = append(errs, fmt.Errorf("router: consumer %s names no stream", rt.Consumer.Durable))
		}
	}
	if cfg.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("router: drain timeout %v: want a positive duration", cfg.DrainTimeout))
	}
	if cfg.Buffer < 0 {
		errs = append(errs, fmt.Errorf("router: buffer %d: must not be negative", cfg.Buffer))
	}
	if p == nil {
		errs = append(errs, errors.New("router: Processor is nil"))
	}
	settler, err := NewSettler(cfg.Settle, d)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.RecreateDelay <= 0 {
		cfg.RecreateDelay = 250 * time.Millisecond
	}
	return &Router{cfg: cfg, js: d.JS, log: d.Log, settler: settler, proc: p}, nil
}

// Unsettled returns how many deliveries were handed to the Processor and
// not settled yet.
func (r *Router) Unsettled() int64 { return r.unsettled.Load() }

// Recreated returns how many times a deleted consumer was created again.
func (r *Router) Recreated() int64 { return r.recreated.Load() }

// Run creates or updates the consumers and consumes them until ctx is done;
// then it stops fetching, lets the Processor finish and settle what it
// holds within DrainTimeout, and returns nil. A consumer deleted meanwhile
// is created again (logged once per deletion). Run returns an error when a
// consumer cannot be created at start or consuming cannot go on (the
// connection was closed).
func (r *Router) Run(ctx context.Context) error {
	conss := make([]jetstream.Consumer, len(r.cfg.Routes))
	for i, rt := range r.cfg.Routes {
		cons, err := r.js.CreateOrUpdateConsumer(ctx, rt.Stream, rt.Consumer)
		if err != nil {
			if ctx.Err() != nil {
				return nil // asked to stop before starting
			}
			return fmt.Errorf("creating consumer %s on %s: %w", rt.Consumer.Durable, rt.Stream, err)
		}
		conss[i] = cons
	}

	// Work outlives ctx so that a shutdown finishes what is in hand; it
	// ends when the drain deadline passes.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	in := make(chan *Delivery, r.cfg.Buffer)
	processed := make(chan struct{})
	go func() { defer close(processed); r.proc(workCtx, in) }()
	var consuming sync.WaitGroup
	for i := range r.cfg.Routes {
		consuming.Go(func() {
			if err := r.consume(runCtx, workCtx, r.cfg.Routes[i], conss[i], in); err != nil {
				stop(err)
			}
		})
	}

	<-runCtx.Done()
	deadline := time.AfterFunc(r.cfg.DrainTimeout, cancelWork)
	defer deadline.Stop()
	consuming.Wait() // every consumer drained, or stopped at the deadline
	close(in)
	<-processed
	if workCtx.Err() != nil {
		r.log.Warn().Str("service", r.cfg.Settle.Service).Dur("drain_timeout", r.cfg.DrainTimeout).
			Msg("drain deadline passed; unsettled messages will be redelivered")
	}
	if n := r.unsettled.Load(); n != 0 {
		r.log.Error().Str("service", r.cfg.Settle.Service).Int64("unsettled", n).
			Msg("processor returned with messages unsettled; they will be redelivered after ack wait")
	}
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(runCtx)
}

// consume consumes one route until ctx is done, creating its consumer again
// whenever it is deleted, and then drains it (stops it when the work
// context ends first).
func (r *Router) consume(ctx, workCtx context.Context, rt Route, cons jetstream.Consumer, in chan<- *Delivery) error {
	var pin atomic.Pointer[string] // the pin this instance was last delivered under
	for {
		lost := make(chan error, 1)
		check := make(chan struct{}, 1)
		opts := []jetstream.PullConsumeOpt{
			jetstream.PullExpiry(PullExpiry),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				switch {
				case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
					select {
					case lost <- err:
					default:
					}
					return
				case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoHeartbeat):
					// A pull nobody answered: a leader change, an update by
					// another instance, or a consumer deleted between two
					// pulls. The loop looks.
					select {
					case check <- struct{}{}:
					default:
					}
				}
				r.log.Warn().Err(err).Str("consumer", rt.Consumer.Durable).Str("stream", rt.Stream).Msg("consuming messages")
			}),
		}
		if rt.Prefetch > 0 {
			opts = append(opts, jetstream.PullMaxMessages(rt.Prefetch))
		}
		if g := rt.Consumer.PriorityGroups; len(g) > 0 {
			opts = append(opts, jetstream.PullPriorityGroup(g[0]))
		}
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			if pinned(rt) {
				if id := msg.Headers().Get(pinIDHeader); id != "" {
					pin.Store(&id)
				}
			}
			r.deliver(workCtx, msg, in)
		}, opts...)
		if err != nil {
			return fmt.Errorf("consuming %s: %w", rt.Consumer.Durable, err)
		}
		var why error
		for why == nil {
			select {
			case <-ctx.Done():
				StopConsuming(r.js, cc)
				select {
				case <-cc.Closed():
				case <-workCtx.Done():
					cc.Stop() // the callback hands back what it still gets
					<-cc.Closed()
				}
				r.unpin(workCtx, rt, pin.Load())
				return nil
			case why = <-lost:
			case <-check:
				if _, err := cons.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) {
					why = err
				}
			case <-cc.Closed():
				why = errors.New("consuming stopped on its own")
			}
		}
		cc.Stop()
		<-cc.Closed()
		if nc := r.js.Conn(); nc != nil && nc.IsClosed() {
			return fmt.Errorf("consuming %s: %w", rt.Consumer.Durable, nats.ErrConnectionClosed)
		}
		r.log.Warn().AnErr("reason", why).Str("consumer", rt.Consumer.Durable).Str("stream", rt.Stream).
			Msg("consumer lost; creating it again")
		if cons, err = r.recreate(ctx, rt); cons == nil {
			return err
		}
	}
}

// pinIDHeader carries, on each message of a pinned consumer, the id of the
// pin it was delivered under.
const pinIDHeader = "Nats-Pin-Id"

func pinned(rt Route) bool {
	return rt.Consumer.PriorityPolicy == jetstream.PriorityPolicyPinned && len(rt.Consumer.PriorityGroups) > 0
}

// unpin hands a consumer pinned to this instance over to another instance
// of its priority group at once (PartitionRoutes), rather than after
// PinnedTTL: called once this instance pulls no more. It unpins only when
// the pin is still the one this instance was last delivered under, never
// another instance's. Best effort: without it the pin expires.
func (r *Router) unpin(workCtx context.Context, rt Route, pin *string) {
	if !pinned(rt) || pin == nil {
		return
	}
	if nc := r.js.Conn(); nc == nil || !nc.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(workCtx, 2*time.Second)
	defer cancel()
	group := rt.Consumer.PriorityGroups[0]
	err := func() error {
		s, err := r.js.Stream(ctx, rt.Stream)
		if err != nil {
			return err
		}
		c, err := s.Consumer(ctx, rt.Consumer.Durable)
		if err != nil {
			return err
		}
		for _, g := range c.CachedInfo().PriorityGroups {
			if g.Group == group && g.PinnedClientID == *pin {
				return s.UnpinConsumer(ctx, rt.Consumer.Durable, group)
			}
		}
		return nil // pinned to another instance by now, or to none
	}()
	if err != nil {
		r.log.Debug().Err(err).Str("consumer", rt.Consumer.Durable).Msg("unpinning the consumer; its pin expires instead")
	}
}

// recreate creates the route's consumer again, retrying with a growing
// delay until it succeeds or ctx is done (nil, nil).
func (r *Router) recreate(ctx context.Context, rt Route) (jetstream.Consumer, error) {
	delay := r.cfg.RecreateDelay
	var failed bool
	for {
		cons, err := r.js.CreateOrUpdateConsumer(ctx, rt.Stream, rt.Consumer)
		if err == nil {
			r.recreated.Add(1)
			r.log.Info().Str("consumer", rt.Consumer.Durable).Str("stream", rt.Stream).Msg("consumer created again")
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("creating consumer %s on %s again: %w", rt.Consumer.Durable, rt.Stream, err)
		}
		if !failed {
			failed = true
			r.log.Warn().Err(err).Str("consumer", rt.Consumer.Durable).Str("stream", rt.Stream).Dur("retry_in", delay).
				Msg("creating the consumer again; retrying")
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		delay = min(2*delay, 16*r.cfg.RecreateDelay)
	}
}

// deliver hands a message to the Processor, or back to the server once the
// work context has ended (past the drain deadline).
func (r *Router) deliver(workCtx context.Context, msg jetstream.Msg, in chan<- *Delivery) {
	d := &Delivery{Msg: msg, r: r}
	r.unsettled.Add(1)
	select {
	case in <- d:
	case <-workCtx.Done():
		d.HandBack()
	}
}

// lanes queues deliveries by a hash of their subject (trusted: our own
// subject names); see Lanes.
type lanes struct {
	mu     sync.Mutex
	conds  []*sync.Cond // one per lane, on mu: a push wakes its lane's goroutine only
	queues [][]*Delivery
	closed bool
}

func newLanes(n int) *lanes {
	l := &lanes{queues: make([][]*Delivery, n), conds: make([]*sync.Cond, n)}
	for i := range l.conds {
		l.conds[i] = sync.NewCond(&l.mu)
	}
	return l
}

// LaneOf is the lane of a subject among n (Lanes).
func LaneOf(subject string, n int) int {
	return int(xxhash.Sum64String(subject) % uint64(n))
}

// push queues d on its subject's lane; it never blocks.
func (l *lanes) push(d *Delivery) {
	i := LaneOf(d.Msg.Subject(), len(l.queues))
	l.mu.Lock()
	l.queues[i] = append(l.queues[i], d)
	l.mu.Unlock()
	l.conds[i].Signal()
}

// next waits for lane i's next delivery; false once the lanes are closed
// and lane i is empty.
func (l *lanes) next(i int) (*Delivery, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.queues[i]) == 0 {
		if l.closed {
			return nil, false
		}
		l.conds[i].Wait()
	}
	d := l.queues[i][0]
	l.queues[i][0] = nil
	l.queues[i] = l.queues[i][1:]
	if len(l.queues[i]) == 0 {
		l.queues[i] = nil // let a long queue's array go
	}
	return d, true
}

// close lets each lane's goroutine finish its lane and stop.
func (l *lanes) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	for _, c := range l.conds {
		c.Broadcast()
	}
}
