package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Config configures a Publisher.
type Config struct {
	Tenant string
	Server string
	// Proxy names this proxy node (bus.ValidID): the proxy field of every
	// event and the first part of its event id.
	Proxy string
	// Dir is the outbox root. The publisher takes the first slot
	// Dir/0, Dir/1, ... that no running publisher holds, and publishes what
	// an earlier publisher left there.
	Dir string
	// MaxEvents and MaxBytes bound the outbox slot (defaults 10,000 and
	// 256 MiB). When full, the oldest calls and compact listings are
	// dropped first.
	MaxEvents int
	MaxBytes  int64
	// QueueEvents and QueueBytes bound the in-memory queue (defaults 4096
	// and 64 MiB). Beyond them events go straight to the outbox.
	QueueEvents int
	QueueBytes  int64
	// PublishTimeout is how long a batch waits for its acknowledgements
	// before its unacknowledged events are spooled (default 5s).
	PublishTimeout time.Duration
	// RetryInterval is how often the outbox is retried while NATS is
	// unreachable or refusing (default 2s); a reconnect retries at once.
	RetryInterval time.Duration
	// ShutdownTimeout is how long Run, once its context ends, tries to
	// publish the in-memory queue before spooling the rest (default 5s).
	ShutdownTimeout time.Duration
	// WarnInterval: dropped events are logged at warn at most once per
	// interval (default 1m).
	WarnInterval time.Duration
	// Linger is how long a publish round made only of calls and compact
	// listings waits for more to join it (default 2ms; negative: no wait).
	// Under a steady stream of them that makes one message of many; a
	// whole listing never waits, and nothing on the data path does.
	Linger time.Duration
}

// Defaults for zero Config fields.
const (
	DefaultMaxEvents       = 10_000
	DefaultMaxBytes        = 256 << 20
	DefaultQueueEvents     = 4096
	DefaultQueueBytes      = 64 << 20
	DefaultPublishTimeout  = 5 * time.Second
	DefaultRetryInterval   = 2 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
	DefaultWarnInterval    = time.Minute
	DefaultLinger          = 2 * time.Millisecond
)

// Reasons for spooling, for the log.
var (
	errBehind   = errors.New("nats unreachable, or older events are still in the outbox")
	errOverflow = errors.New("in-memory queue full, or the publisher is shutting down")
)

// Batches: how many events one publish round sends before waiting for
// their acknowledgements.
const (
	batchEvents = 256
	batchBytes  = 8 << 20
)

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	if c.QueueEvents == 0 {
		c.QueueEvents = DefaultQueueEvents
	}
	def(&c.MaxBytes, DefaultMaxBytes)
	def(&c.QueueBytes, DefaultQueueBytes)
	defDur(&c.PublishTimeout, DefaultPublishTimeout)
	defDur(&c.RetryInterval, DefaultRetryInterval)
	defDur(&c.ShutdownTimeout, DefaultShutdownTimeout)
	defDur(&c.WarnInterval, DefaultWarnInterval)
	defDur(&c.Linger, DefaultLinger)
	return c
}

// Validate reports a configuration that cannot work, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	errs := []error{bus.ValidID("tenant", c.Tenant), bus.ValidID("server", c.Server), bus.ValidID("proxy", c.Proxy)}
	if c.Dir == "" {
		errs = append(errs, errors.New("outbox dir: required"))
	}
	if c.MaxEvents < 1 || c.QueueEvents < 1 {
		errs = append(errs, fmt.Errorf("max events %d, queue events %d: want at least 1", c.MaxEvents, c.QueueEvents))
	}
	if c.MaxBytes < 1 || c.QueueBytes < 1 {
		errs = append(errs, fmt.Errorf("max bytes %d, queue bytes %d: want at least 1", c.MaxBytes, c.QueueBytes))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"publish timeout", c.PublishTimeout}, {"retry interval", c.RetryInterval},
		{"shutdown timeout", c.ShutdownTimeout}, {"warn interval", c.WarnInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// Deps are what the publisher uses and does not own.
type Deps struct {
	JS jetstream.JetStream
	// Log must not name the tenant, server or proxy: the publisher adds
	// them to its lines.
	Log zerolog.Logger
	Now func() time.Time // time.Now when nil
}

// Stats are the publisher's counters since NewPublisher (totals) and its
// current depths (gauges), in observations: a batch of calls counts its
// calls, a batch of compact listings its listings.
type Stats struct {
	Queued          int    // events in the in-memory queue now
	Published       uint64 // acknowledged by JetStream, directly or from the outbox
	Spooled         uint64 // written to the outbox
	Dropped         uint64 // lost: outbox full, outbox unusable, event after Close, unreadable outbox file
	DroppedListings uint64 // of Dropped, listings (whole or compact)
	Rejected        uint64 // refused by JetStream for good (too large, bad request); not in Dropped
	OutboxDepth     int    // events in the outbox now
	OutboxBytes     int64  // bytes of the outbox now
}

// Add adds o's counts to s: the totals of several publishers.
func (s *Stats) Add(o Stats) {
	s.Queued += o.Queued
	s.Published += o.Published
	s.Spooled += o.Spooled
	s.Dropped += o.Dropped
	s.DroppedListings += o.DroppedListings
	s.Rejected += o.Rejected
	s.OutboxDepth += o.OutboxDepth
	s.OutboxBytes += o.OutboxBytes
}

// Publisher publishes the proxy's observations (session.Observer). Listing
// and Call never wait on the network. Create it with NewPublisher, run it
// once with Run, and Close it after Run returned.
type Publisher struct {
	cfg      Config
	js       jetstream.JetStream
	log      zerolog.Logger
	now      func() time.Time
	idPrefix string
	// callSubject is where call observations go (the same for every call).
	callSubject string
	seq         atomic.Uint64
	ob          *outbox

	queue      chan *event
	queueBytes atomic.Int64
	// A publish round starts when the first event queued after the last
	// round has waited Linger (timer, armed by that event's enqueue), or
	// at once when an event cannot wait (urgent: a whole listing, a full
	// round, no linger). Queuing any other event wakes nobody: the round
	// collects it from queue when it starts.
	timer  *time.Timer
	armed  atomic.Bool   // the timer runs for the events queued since the last round began
	urgent chan struct{} // 1 slot: a round is due now

	mu       lockorder.RWMutex[lockorder.PublisherMu] // held for reading while an event is queued
	draining bool                                     // Run is flushing or has returned: events go to the outbox

	published, spooled, dropped, droppedLists, rejected atomic.Uint64
	spooling                                            atomic.Bool // a spool was logged and the outbox has not drained since

	warnMu         lockorder.Mutex[lockorder.PublisherWarnMu]
	lastWarn       time.Time
	unwarnedCalls  uint64
	unwarnedLists  uint64
	lastSpoolError time.Time

	alerted sync.Map // alert codes already logged (once each per publisher, that is per server)
}

// NewPublisher checks the configuration, takes an outbox slot and indexes
// the events left in it.
func NewPublisher(cfg Config, d Deps) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fleet publisher config: %w", err)
	}
	if d.JS == nil {
		return nil, errors.New("fleet publisher deps: JS is nil")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	cfg = cfg.WithDefaults()
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	p := &Publisher{
		cfg: cfg, js: d.JS, now: d.Now,
		log: d.Log.With().Str("tenant", cfg.Tenant).Str("server", cfg.Server).Str("proxy", cfg.Proxy).Logger(),
		// Unique across restarts: the boot time and a random nonce tell two
		// lives of the same proxy apart, the sequence the events of one.
		idPrefix:    cfg.Proxy + "-" + strconv.FormatInt(d.Now().UnixNano(), 36) + hex.EncodeToString(nonce[:]) + "-",
		callSubject: bus.CallObservationsSubject(cfg.Tenant, cfg.Server),
		queue:       make(chan *event, cfg.QueueEvents),
		timer:       time.NewTimer(time.Hour),
		urgent:      make(chan struct{}, 1),
	}
	p.timer.Stop()
	ob, err := openOutbox(cfg.Dir, cfg.MaxEvents, cfg.MaxBytes, p.noteDrop)
	if err != nil {
		return nil, err
	}
	p.ob = ob
	if n, size := ob.depth(); n > 0 {
		p.spooling.Store(true)
		p.log.Info().Int("events", n).Int64("bytes", size).Str("dir", ob.dir).Msg("outbox holds events from an earlier run")
	}
	return p, nil
}

// Listing implements session.Observer: a complete listing, in the capture
// format, for l's variant ("" is the default variant), listed by l's
// agent's session.
func (p *Publisher) Listing(l session.Listed, capture []byte) {
	variant := l.Variant
	if variant == "" {
		variant = bus.DefaultVariant
	}
	id := p.nextID()
	data, err := proto.Marshal(&mcpdriftv1.ListObservation{
		EventId: id, Tenant: p.cfg.Tenant, Server: p.cfg.Server, Proxy: p.cfg.Proxy,
		Variant: variant, ObservedAtUnixMs: p.now().UnixMilli(), Capture: capture, Agent: l.Agent,
		Session: l.Session, SurfaceHash: l.Hash,
	})
	if err != nil { // cannot happen for these field types
		p.log.Error().Err(err).Str("event_id", id).Msg("encoding list observation")
		p.noteDrop(kindList, 1)
		return
	}
	p.enqueue(&event{id: id, subject: bus.ListObservationSubject(p.cfg.Tenant, p.cfg.Server), kind: kindList, data: data})
}

// Seen implements session.Observer: a listing whose surface the pipeline
// already confirmed, published in the compact form (a ListingSeen, no
// manifest), batched as calls are.
func (p *Publisher) Seen(l session.Listed) {
	variant := l.Variant
	if variant == "" {
		variant = bus.DefaultVariant
	}
	id := p.nextID()
	batch, err := proto.Marshal(&mcpdriftv1.ListingsSeen{Seen: []*mcpdriftv1.ListingSeen{{
		EventId: id, Tenant: p.cfg.Tenant, Server: p.cfg.Server, Proxy: p.cfg.Proxy, Variant: variant,
		Agent: l.Agent, Session: l.Session, SurfaceHash: l.Hash, ObservedAtUnixMs: p.now().UnixMilli(),
	}}})
	if err != nil { // cannot happen for these field types
		p.log.Error().Err(err).Str("event_id", id).Msg("encoding compact listing")
		p.noteDrop(kindSeen, 1)
		return
	}
	p.enqueue(&event{id: id, subject: bus.ListingsSeenSubject(p.cfg.Tenant, p.cfg.Server), kind: kindSeen, n: 1, data: batch})
}

// Call implements session.Observer.
func (p *Publisher) Call(c session.Call) {
	outcome := mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED
	switch {
	case c.Refused:
		outcome = mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED
	case c.Error:
		outcome = mcpdriftv1.CallOutcome_CALL_OUTCOME_ERROR
	}
	if c.AlertCode != "" {
		if _, logged := p.alerted.LoadOrStore(c.AlertCode, true); !logged {
			p.log.Warn().Str("code", string(c.AlertCode)).Str("tool", c.Tool).
				Msg("forwarding calls the block posture would refuse (on_drift alert); logged once per code")
		}
	}
	id := p.nextID()
	enc := callEncs.Get().(*callEnc)
	defer enc.release()
	obs := &enc.obs
	*obs = mcpdriftv1.CallObservation{
		EventId: id, Tenant: p.cfg.Tenant, Server: p.cfg.Server, Proxy: p.cfg.Proxy,
		Tool: c.Tool, Outcome: outcome, RefusalCode: string(c.RefusalCode), LatencyUs: c.Latency.Microseconds(),
		ArgumentsDigest: c.ArgsDigest, Arguments: c.Arguments, ObservedAtUnixMs: p.now().UnixMilli(),
		AlertCode: string(c.AlertCode), Agent: c.Agent,
		PolicyRule: c.Policy.Rule, PolicyAction: c.Policy.Action, PolicyReason: c.Policy.Reason, RiskMode: c.Policy.RiskMode,
		ShadowRule: c.Policy.ShadowRule, ShadowAction: c.Policy.ShadowAction,
		ApprovalId: c.Policy.ApprovalID, ApprovalOutcome: c.Policy.ApprovalOutcome, ApprovalActor: c.Policy.Who,
	}
	// A CallObservations batch of one (mergeBatches joins them; ADR 0004,
	// and ADR 0008 for why this is proto.Marshal and not framed by hand),
	// in messages reused from call to call: the bytes are the event's own.
	enc.calls[0] = obs
	enc.batch.Calls = enc.calls[:]
	batch, err := proto.MarshalOptions{}.MarshalAppend(nil, &enc.batch)
	if err != nil {
		p.log.Error().Err(err).Str("event_id", id).Msg("encoding call observation")
		p.noteDrop(kindCall, 1)
		return
	}
	p.enqueue(&event{id: id, subject: p.callSubject, kind: kindCall, n: 1, data: batch})
}

// callEnc holds the messages Call encodes an observation with, reused
// (callEncs): only the encoded bytes are allocated per call.
type callEnc struct {
	obs   mcpdriftv1.CallObservation
	batch mcpdriftv1.CallObservations
	calls [1]*mcpdriftv1.CallObservation
}

var callEncs = sync.Pool{New: func() any { return new(callEnc) }}

// release forgets what the messages held (the call's strings and
// arguments) and gives them back.
func (e *callEnc) release() {
	e.obs.Reset()
	e.batch.Reset()
	e.calls[0] = nil
	callEncs.Put(e)
}

// mergeBatches joins each run of consecutive events of one batched kind
// (calls, compact listings) of evs, all batches of one, into batches of at
// most limit bytes: protobuf concatenates repeated fields, so a batch is
// its parts' bytes one after the other. A merged batch's message id is its
// first event's id followed by "+<number of further events>", so that a
// batch sent again (from the outbox) is the same message to JetStream's
// duplicate window; batches are only ever formed here, of fresh events,
// never of what the outbox holds.
func mergeBatches(evs []*event, limit int) []*event {
	out := make([]*event, 0, len(evs))
	for _, ev := range evs {
		if n := len(out); n > 0 && batched(ev.kind) && out[n-1].kind == ev.kind && len(out[n-1].data)+len(ev.data) <= limit {
			last := out[n-1]
			if last.n == 1 {
				// The first merge: a batch of its own, leaving the event as it was.
				last = &event{id: last.id, subject: last.subject, kind: last.kind, n: 1,
					data: append(make([]byte, 0, min(limit, 4*len(last.data))), last.data...)}
				out[n-1] = last
			}
			last.data = append(last.data, ev.data...)
			last.n += ev.count()
			continue
		}
		out = append(out, ev)
	}
	for _, ev := range out {
		if ev.n > 1 {
			ev.id += "+" + strconv.Itoa(ev.n-1)
		}
	}
	return out
}

// mergeLimit is the largest batch: three quarters of what the
// server takes (headroom for the headers), at most 1 MiB.
func (p *Publisher) mergeLimit() int {
	limit := 1 << 20
	if nc := p.js.Conn(); nc != nil {
		if mp := int(nc.MaxPayload()); mp > 0 {
			limit = min(limit, mp*3/4)
		}
	}
	return limit
}

func (p *Publisher) nextID() string {
	var b [128]byte // prefix (at most 88 bytes: a 64-byte proxy id and 24) and sequence: one allocation, the string
	return string(strconv.AppendUint(append(b[:0], p.idPrefix...), p.seq.Add(1), 10))
}

// enqueue hands an event to Run without waiting: into the in-memory queue,
// or, when the queue is full or Run is shutting down, into the outbox (a
// local disk write, never a network wait). An event that may linger wakes
// no goroutine: the first one of a round arms the round's timer, later ones
// join it; one that cannot wait (a whole listing, a full round, no linger)
// starts the round at once.
func (p *Publisher) enqueue(ev *event) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.draining {
		size := int64(len(ev.data))
		if queued := p.queueBytes.Add(size); queued <= p.cfg.QueueBytes {
			select {
			case p.queue <- ev:
				// Queued first, armed after: a round that began before
				// this event (and disarmed) was not too early to collect
				// it, or this event arms the next one.
				switch {
				case !batched(ev.kind) || p.cfg.Linger <= 0 || len(p.queue) >= batchEvents || queued >= batchBytes:
					p.roundNow()
				case !p.armed.Load() && p.armed.CompareAndSwap(false, true): // read first: callers at once do not contend for it
					p.timer.Reset(p.cfg.Linger)
				}
				return
			default:
			}
		}
		p.queueBytes.Add(-size)
	}
	p.spool([]*event{ev}, errOverflow)
}

// roundNow has Run start a publish round without waiting for the timer.
func (p *Publisher) roundNow() {
	if len(p.urgent) > 0 {
		return // one is due already (read first: a full queue's callers do not contend for the channel)
	}
	select {
	case p.urgent <- struct{}{}:
	default: // one is due already
	}
}

// Run publishes queued events and replays the outbox until ctx ends, then
// publishes what is still queued within ShutdownTimeout and spools the
// rest. Events observed after that go straight to the outbox. Run it once;
// it returns nil.
func (p *Publisher) Run(ctx context.Context) error {
	var reconnected chan nats.Status
	if nc := p.js.Conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	// Each of the two goroutines that publish (drain, and replay) reads its
	// own acknowledgements.
	drainAcks, replayAcks := p.newAcks(), p.newAcks()
	defer drainAcks.close()
	defer replayAcks.close()
	var wg sync.WaitGroup
	wg.Go(func() { p.replay(ctx, reconnected, replayAcks) })
	p.drain(ctx, drainAcks)
	wg.Wait()
	return nil
}

// Close releases the outbox slot, after Run returned. Events observed after
// Close are dropped (and counted).
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	return p.ob.close()
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	n, size := p.ob.depth()
	return Stats{
		Queued:          len(p.queue),
		Published:       p.published.Load(),
		Spooled:         p.spooled.Load(),
		Dropped:         p.dropped.Load(),
		DroppedListings: p.droppedLists.Load(),
		Rejected:        p.rejected.Load(),
		OutboxDepth:     n,
		OutboxBytes:     size,
	}
}

func (p *Publisher) connected() bool {
	nc := p.js.Conn()
	return nc != nil && nc.Status() == nats.CONNECTED
}

// drain publishes the in-memory queue in rounds until ctx ends, then
// flushes it. A round starts when its timer fires (the first of its events
// has waited Linger) or when one is due at once (enqueue), and takes what
// is queued, up to one batch; what a full round left starts the next at
// once.
func (p *Publisher) drain(ctx context.Context, a *acks) {
	full := false
	for {
		if !full {
			select {
			case <-ctx.Done():
				p.flush(ctx, a)
				return
			case <-p.timer.C:
			case <-p.urgent:
			}
		}
		batch := p.collect()
		full = len(batch) >= batchEvents || batchSize(batch) >= batchBytes
		if len(batch) == 0 {
			continue // a round already taken by the one before it
		}
		if n, _ := p.ob.depth(); n > 0 || !p.connected() {
			// Behind older spooled events, or nowhere to send: keep the order.
			p.spool(batch, errBehind)
			continue
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
		failed, err := p.publish(pctx, mergeBatches(batch, p.mergeLimit()), a)
		cancel()
		p.spool(failed, err)
	}
}

// collect begins a round: it disarms the timer, so that the next event
// queued arms it for the next round, then takes what is queued, up to one
// batch.
func (p *Publisher) collect() []*event {
	p.timer.Stop()
	p.armed.Store(false)
	var batch []*event
	size := 0
	for len(batch) < batchEvents && size < batchBytes {
		select {
		case ev := <-p.queue:
			p.queueBytes.Add(-int64(len(ev.data)))
			batch = append(batch, ev)
			size += len(ev.data)
			continue
		default:
		}
		break
	}
	return batch
}

// batchSize is the bytes of evs.
func batchSize(evs []*event) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.data)
	}
	return n
}

// flush stops the queue and publishes what it holds within ShutdownTimeout,
// spooling whatever is not acknowledged by then.
func (p *Publisher) flush(ctx context.Context, a *acks) {
	p.mu.Lock() // waits for enqueues in progress; later ones spool
	p.draining = true
	p.mu.Unlock()
	var rest []*event
	for len(p.queue) > 0 { // no one sends any more, and only drain receives
		ev := <-p.queue
		p.queueBytes.Add(-int64(len(ev.data)))
		rest = append(rest, ev)
	}
	if len(rest) == 0 {
		return
	}
	if n, _ := p.ob.depth(); n > 0 || !p.connected() {
		p.spool(rest, errBehind)
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ShutdownTimeout)
	defer cancel()
	rest = mergeBatches(rest, p.mergeLimit())
	for len(rest) > 0 {
		n := min(len(rest), batchEvents)
		if err := sctx.Err(); err != nil {
			p.spool(rest, err)
			return
		}
		p.spool(p.publish(sctx, rest[:n], a))
		rest = rest[n:]
	}
}

// publish sends a batch without waiting between messages, then waits for
// the acknowledgements, read from a (nil: through JetStream's asynchronous
// publishing), until ctx ends. It returns the events to retry, in order,
// and the last error; events JetStream refuses for good are counted and
// logged.
func (p *Publisher) publish(ctx context.Context, evs []*event, a *acks) ([]*event, error) {
	var errs []error
	if a != nil {
		errs = a.publish(ctx, evs)
	} else {
		errs = p.publishAsync(ctx, evs)
	}
	var retry []*event
	var last error
	for i, ev := range evs {
		if errs[i] == nil {
			p.published.Add(uint64(ev.count()))
			continue
		}
		if permanent(errs[i]) {
			p.rejected.Add(uint64(ev.count()))
			p.log.Error().Err(errs[i]).Str("event_id", ev.id).Str("subject", ev.subject).Int("bytes", len(ev.data)).
				Int("observations", ev.count()).Msg("jetstream refused observation, dropping it")
			continue
		}
		retry = append(retry, ev)
		last = errs[i]
	}
	return retry, last
}

// publishAsync publishes evs with JetStream's asynchronous publishing and
// returns the error of each (nil: acknowledged), ctx's once it ends.
func (p *Publisher) publishAsync(ctx context.Context, evs []*event) []error {
	futures := make([]jetstream.PubAckFuture, len(evs))
	errs := make([]error, len(evs))
	for i, ev := range evs {
		futures[i], errs[i] = p.js.PublishMsgAsync(&nats.Msg{Subject: ev.subject, Data: ev.data}, jetstream.WithMsgID(ev.id))
	}
	for i := range evs {
		if errs[i] == nil {
			select {
			case <-futures[i].Ok():
			case err := <-futures[i].Err():
				errs[i] = err
			case <-ctx.Done():
				errs[i] = ctx.Err()
			}
		}
	}
	return errs
}

// permanent reports an error that retrying the same message cannot fix.
func permanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 400
}

// spool writes events to the outbox; why is the reason, for the log.
func (p *Publisher) spool(evs []*event, why error) {
	if len(evs) == 0 {
		return
	}
	n, err := p.ob.add(evs)
	p.spooled.Add(uint64(n))
	if err != nil && !errors.Is(err, errOutboxClosed) {
		p.warnMu.Lock()
		if p.now().Sub(p.lastSpoolError) >= p.cfg.WarnInterval {
			p.lastSpoolError = p.now()
			p.log.Error().Err(err).Msg("outbox write failed, events lost")
		}
		p.warnMu.Unlock()
	}
	if n > 0 && !p.spooling.Swap(true) {
		depth, _ := p.ob.depth()
		p.log.Warn().Err(why).Int("outbox_depth", depth).Msg("spooling observations to the outbox")
	}
}

// noteDrop counts dropped events of kind and warns at most once per
// WarnInterval. The outbox calls it with its lock held.
func (p *Publisher) noteDrop(kind string, n int) {
	p.dropped.Add(uint64(n))
	call := kind == kindCall
	if !call {
		p.droppedLists.Add(uint64(n))
	}
	p.warnMu.Lock()
	defer p.warnMu.Unlock()
	if call {
		p.unwarnedCalls += uint64(n)
	} else {
		p.unwarnedLists += uint64(n)
	}
	if now := p.now(); p.lastWarn.IsZero() || now.Sub(p.lastWarn) >= p.cfg.WarnInterval {
		p.lastWarn = now
		p.log.Warn().Uint64("dropped_calls", p.unwarnedCalls).Uint64("dropped_listings", p.unwarnedLists).
			Uint64("dropped_total", p.dropped.Load()).Msg("observations dropped (outbox full: oldest calls first)")
		p.unwarnedCalls, p.unwarnedLists = 0, 0
	}
}

// replay publishes the outbox, oldest first, whenever NATS is reachable,
// until ctx ends.
func (p *Publisher) replay(ctx context.Context, reconnected <-chan nats.Status, a *acks) {
	wait := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-reconnected:
		case <-time.After(p.cfg.RetryInterval):
		}
		return true
	}
	for {
		if n, _ := p.ob.depth(); n == 0 {
			if p.spooling.Swap(false) {
				p.log.Info().Msg("outbox drained")
			}
			select {
			case <-ctx.Done():
				return
			case <-p.ob.added:
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !p.connected() {
			if !wait() {
				return
			}
			continue
		}
		if !p.replayBatch(ctx, a) && !wait() {
			return
		}
	}
}

// replayBatch publishes the oldest events of the outbox and deletes each
// once acknowledged. It reports whether all of them were.
func (p *Publisher) replayBatch(ctx context.Context, a *acks) bool {
	entries := p.ob.head(batchEvents, batchBytes)
	if len(entries) == 0 {
		return true
	}
	var evs []*event
	var from []*entry
	for _, e := range entries {
		ev, err := p.ob.read(e)
		if err != nil {
			p.log.Error().Err(err).Msg("outbox event unreadable, dropping it")
			p.ob.done(e, true)
			p.noteDrop(e.kind, e.n)
			continue
		}
		evs = append(evs, ev)
		from = append(from, e)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
	retry, err := p.publish(pctx, evs, a)
	cancel()
	if err != nil {
		p.log.Debug().Err(err).Int("events", len(retry)).Msg("outbox replay incomplete, retrying")
	}
	again := make(map[*event]bool, len(retry))
	for _, ev := range retry {
		again[ev] = true
	}
	for i, ev := range evs {
		p.ob.done(from[i], !again[ev])
	}
	return len(retry) == 0
}
