// Package driftsvc is the drift service: the one writer of schema status. It
// consumes fingerprint results, runs the state machine of package state over
// the status bucket with compare-and-set, keeps every baseline version,
// broadcasts verdicts, and carries out approve and quarantine for the admin
// API.
package driftsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Config configures the service.
type Config struct {
	Policy        state.Policy
	Durable       string        // the durable consumer's name
	MaxDeliver    int           // deliveries before a message is given up (and dead-lettered)
	AckWait       time.Duration // time to settle a message before it is redelivered
	MaxAckPending int           // messages in flight
	Workers       int           // fingerprints applied at once (one server's always in order)
	DrainTimeout  time.Duration // how long shutdown waits for messages in flight
}

// DefaultConfig holds the defaults for zero fields.
var DefaultConfig = Config{
	Policy:        state.Policy{Posture: state.Discovery, OnDrift: state.Block},
	Durable:       bus.ConsumerDrift,
	MaxDeliver:    20,
	AckWait:       30 * time.Second,
	MaxAckPending: 1024,
	Workers:       16,
	DrainTimeout:  10 * time.Second,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.Policy.Posture != "" {
		d.Policy.Posture = c.Policy.Posture
	}
	if c.Policy.OnDrift != "" {
		d.Policy.OnDrift = c.Policy.OnDrift
	}
	d.Policy.Guard = c.Policy.Guard
	if c.Durable != "" {
		d.Durable = c.Durable
	}
	if c.MaxDeliver > 0 {
		d.MaxDeliver = c.MaxDeliver
	}
	if c.AckWait > 0 {
		d.AckWait = c.AckWait
	}
	if c.MaxAckPending > 0 {
		d.MaxAckPending = c.MaxAckPending
	}
	if c.DrainTimeout > 0 {
		d.DrainTimeout = c.DrainTimeout
	}
	if c.Workers > 0 {
		d.Workers = c.Workers
	}
	return d
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	return c.withDefaults().Policy.Validate()
}

// Deps are what the service runs on.
type Deps struct {
	JS      jetstream.JetStream
	Handles *bus.Handles
	Log     zerolog.Logger
	Now     func() time.Time
	// Metrics records what the service does; nil records nothing.
	Metrics *Metrics
}

// Service is the drift service.
type Service struct {
	cfg  Config
	js   jetstream.JetStream
	h    *bus.Handles
	log  zerolog.Logger
	now  func() time.Time
	m    *Metrics
	surf sync.Map // surface hash -> *surface.Surface, parsed manifests

	applied, redelivered, poison, conflicts atomic.Int64
}

// New returns a Service; Run starts it.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.JS == nil || d.Handles == nil {
		return nil, errors.New("driftsvc: Deps.JS and Deps.Handles are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{cfg: cfg.withDefaults(), js: d.JS, h: d.Handles, log: d.Log, now: d.Now, m: d.Metrics}, nil
}

// Stats are counters for logs and metrics.
type Stats struct{ Applied, Redelivered, Poison, Conflicts int64 }

// Stats returns the counters so far.
func (s *Service) Stats() Stats {
	return Stats{s.applied.Load(), s.redelivered.Load(), s.poison.Load(), s.conflicts.Load()}
}

// Run consumes fingerprint results until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, bus.StreamFingerprints, jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		Description:   "drift service: fingerprint results to schema status",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    s.cfg.MaxDeliver,
		MaxAckPending: s.cfg.MaxAckPending,
		FilterSubject: bus.Prefix + ".fp.>",
	})
	if err != nil {
		return fmt.Errorf("creating consumer %s: %w", s.cfg.Durable, err)
	}
	// Workers apply fingerprints concurrently; a server's fingerprints go to
	// one worker, by a hash of the subject (trusted: our own subject names),
	// so that they are applied in order and do not fight over one record.
	queues := make([]chan jetstream.Msg, s.cfg.Workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan jetstream.Msg, 64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range queues[i] {
				s.handle(ctx, msg)
			}
		}()
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		queues[xxhash.Sum64String(msg.Subject())%uint64(len(queues))] <- msg
	}, jetstream.PullExpiry(bus.PullExpiry))
	if err != nil {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
		return fmt.Errorf("consuming %s: %w", bus.StreamFingerprints, err)
	}
	<-ctx.Done()
	bus.StopConsuming(s.js, cc)
	select {
	case <-cc.Closed():
	case <-time.After(s.cfg.DrainTimeout):
		s.log.Warn().Dur("timeout", s.cfg.DrainTimeout).Msg("drain timed out; unsettled messages will be redelivered")
		cc.Stop()
		<-cc.Closed() // no callback runs after this, so the queues can close
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return nil
}

func (s *Service) handle(ctx context.Context, msg jetstream.Msg) {
	// Work on with a context of its own so that a shutdown lets the message
	// in hand finish and settle instead of leaving it half done.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AckWait)
	defer cancel()
	var fp mcpdriftv1.Fingerprint
	if err := proto.Unmarshal(msg.Data(), &fp); err != nil {
		s.deadLetter(wctx, msg, CodeMalformedEvent, err.Error())
		return
	}
	if fp.Variant == "" {
		fp.Variant = bus.DefaultVariant
	}
	for _, id := range [][2]string{{"tenant", fp.Tenant}, {"server", fp.Server}, {"variant", fp.Variant}} {
		if err := bus.ValidID(id[0], id[1]); err != nil {
			s.deadLetter(wctx, msg, CodeInvalidID, err.Error())
			return
		}
	}
	if msg.Subject() != bus.FingerprintSubject(fp.Tenant, fp.Server) {
		// NATS permissions apply to subjects: a body must not speak for
		// another tenant or server than its subject does.
		s.deadLetter(wctx, msg, CodeSubjectMismatch, fmt.Sprintf("the fingerprint for %s/%s came on %s", fp.Tenant, fp.Server, msg.Subject()))
		return
	}
	if fp.EventId == "" || (fp.SurfaceHash == "" && fp.ErrorCode == "") {
		s.deadLetter(wctx, msg, CodeMalformedEvent, "a fingerprint needs an event_id and a surface_hash or an error_code")
		return
	}
	if err := s.Observe(wctx, &fp); err != nil {
		meta, _ := msg.Metadata()
		if meta != nil && s.cfg.MaxDeliver > 0 && meta.NumDelivered >= uint64(s.cfg.MaxDeliver) {
			s.deadLetter(wctx, msg, CodeRetriesExhausted, fmt.Sprintf("gave up after %d deliveries: %v", meta.NumDelivered, err))
			return
		}
		delay := time.Second
		if meta != nil {
			delay = min(time.Duration(meta.NumDelivered)*time.Second, 30*time.Second)
		}
		s.log.Warn().Err(err).Str("event_id", fp.EventId).Str("tenant", fp.Tenant).Str("server", fp.Server).Msg("applying fingerprint; will retry")
		_ = msg.NakWithDelay(delay)
		s.m.fingerprint(ResultRetried)
		return
	}
	_ = msg.Ack()
	s.m.fingerprint(ResultOK)
}

func (s *Service) deadLetter(ctx context.Context, msg jetstream.Msg, code, text string) {
	s.poison.Add(1)
	seq := ""
	if meta, err := msg.Metadata(); err == nil {
		seq = fmt.Sprint(meta.Sequence.Stream)
	}
	dl := &mcpdriftv1.DeadLetter{EventId: "dead-drift-" + seq, Service: "drift", Subject: msg.Subject(),
		StreamSequence: seq, ErrorCode: code, ErrorMessage: text, AtUnixMs: s.now().UnixMilli()}
	data, err := bus.MarshalJSON(dl)
	if err == nil {
		_, err = bus.Publish(ctx, s.js, bus.DeadLetterSubject("drift"), data, dl.EventId)
	}
	if err != nil {
		// Not dead-lettered yet: let it come back rather than lose the record of it.
		s.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("publishing dead letter; will retry")
		_ = msg.NakWithDelay(time.Second)
		s.m.fingerprint(ResultRetried)
		return
	}
	s.log.Warn().Str("subject", msg.Subject()).Str("code", code).Str("stream_seq", seq).Msg("terminated a poison message")
	_ = msg.Term()
	s.m.deadLetter(code)
}

// Observe applies one fingerprint result.
func (s *Service) Observe(ctx context.Context, fp *mcpdriftv1.Fingerprint) error {
	key := bus.StatusKey(fp.Tenant, fp.Server, fp.Variant)
	o := state.Observation{
		EventID: fp.EventId, Hash: fp.SurfaceHash, ErrorCode: fp.ErrorCode,
		ObservedAt: time.UnixMilli(fp.ObservedAtUnixMs),
		Assess: func(base, live string) (string, bool) {
			rep, err := s.diffHashes(ctx, base, live)
			if err != nil {
				s.log.Warn().Err(err).Str("baseline", base).Str("live", live).Msg("assessing drift without manifests; treating it as critical")
				return surface.SeverityCritical.String(), false
			}
			return rep.Severity.String(), rep.Benign
		},
	}
	_, err := s.transact(ctx, key, fp.EventId, func(rec *state.Record) (state.Outcome, error) {
		return state.Observe(rec, fp.Tenant, fp.Server, fp.Variant, o, s.cfg.Policy, s.now()), nil
	})
	return err
}

// errConflict: another writer changed the record between read and write.
var errConflict = errors.New("conflict")

// transact reads a record, applies f, and writes the result with
// compare-and-set, retrying on conflicts; then it keeps the new baseline
// version and announces the verdict.
func (s *Service) transact(ctx context.Context, key, eventID string, f func(*state.Record) (state.Outcome, error)) (*state.Record, error) {
	for attempt := 0; ; attempt++ {
		rec, rev, err := s.get(ctx, key)
		if err != nil {
			return nil, err
		}
		out, err := f(rec)
		if err != nil {
			return rec, err
		}
		if !out.Write {
			if rec != nil && eventID != "" && slices.Contains(rec.Applied, eventID) {
				// A redelivery of an applied event: its verdict may not have
				// gone out; announcing the current state again is harmless
				// (same message id as the first time for this revision).
				s.redelivered.Add(1)
				return rec, s.announce(ctx, rec, rev, out.Previous)
			}
			return rec, nil
		}
		if out.NewBaseline != nil {
			if err := s.keepBaseline(ctx, &out.Record, out.NewBaseline); err != nil {
				if errors.Is(err, errConflict) && attempt < 20 {
					s.conflicts.Add(1)
					s.m.conflict()
					continue
				}
				return nil, err
			}
		}
		newRev, err := s.put(ctx, key, rec == nil, rev, &out.Record)
		if errors.Is(err, errConflict) && attempt < 20 {
			s.conflicts.Add(1)
			s.m.conflict()
			continue
		}
		if err != nil {
			return nil, err
		}
		s.applied.Add(1)
		s.m.write()
		if out.Announce {
			return &out.Record, s.announce(ctx, &out.Record, newRev, out.Previous)
		}
		return &out.Record, nil
	}
}

func (s *Service) get(ctx context.Context, key string) (*state.Record, uint64, error) {
	e, err := s.h.Status.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading status %s: %w", key, err)
	}
	var rec state.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("decoding status %s: %w", key, err)
	}
	return &rec, e.Revision(), nil
}

func (s *Service) put(ctx context.Context, key string, create bool, rev uint64, rec *state.Record) (uint64, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	var newRev uint64
	if create {
		newRev, err = s.h.Status.Create(ctx, key, data)
	} else {
		newRev, err = s.h.Status.Update(ctx, key, data, rev)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return 0, errConflict
	case err != nil:
		return 0, fmt.Errorf("writing status %s: %w", key, err)
	}
	return newRev, nil
}

// keepBaseline stores a baseline version. Versions are created, never
// overwritten: finding the same version with another hash means another
// writer got there first.
func (s *Service) keepBaseline(ctx context.Context, rec *state.Record, b *state.Baseline) error {
	key := bus.BaselineKey(rec.Tenant, rec.Server, rec.Variant, b.Version)
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if _, err := s.h.Baselines.Create(ctx, key, data); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("keeping baseline %s: %w", key, err)
	}
	e, err := s.h.Baselines.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading baseline %s: %w", key, err)
	}
	var have state.Baseline
	if err := json.Unmarshal(e.Value(), &have); err != nil {
		return fmt.Errorf("decoding baseline %s: %w", key, err)
	}
	if have.Hash != b.Hash {
		return errConflict
	}
	return nil
}

// announce publishes the verdict for a record at a revision. The message id
// is the key and revision, so announcing a revision twice stores it once.
func (s *Service) announce(ctx context.Context, rec *state.Record, rev uint64, prev state.Status) error {
	v := Verdict(rec, prev)
	v.EventId = fmt.Sprintf("verdict-%s.%s.%s-%d", rec.Tenant, rec.Server, rec.Variant, rev)
	v.AtUnixMs = rec.UpdatedAtMs
	data, err := bus.MarshalJSON(v)
	if err != nil {
		return err
	}
	ack, err := bus.Publish(ctx, s.js, bus.VerdictSubject(rec.Tenant, rec.Server), data, v.EventId)
	if err != nil {
		return err
	}
	if !ack.Duplicate {
		s.m.verdict(rec.Status)
	}
	return nil
}

var statusOf = map[state.Status]mcpdriftv1.Status{
	state.Unknown: mcpdriftv1.Status_STATUS_UNKNOWN, state.Verified: mcpdriftv1.Status_STATUS_VERIFIED,
	state.Changed: mcpdriftv1.Status_STATUS_CHANGED, state.Pending: mcpdriftv1.Status_STATUS_PENDING,
	state.Quarantined: mcpdriftv1.Status_STATUS_QUARANTINED,
}

// Verdict is the bus form of a record.
func Verdict(rec *state.Record, prev state.Status) *mcpdriftv1.Verdict {
	return &mcpdriftv1.Verdict{
		Tenant: rec.Tenant, Server: rec.Server, Variant: rec.Variant,
		Status: statusOf[rec.Status], PreviousStatus: statusOf[prev], Serve: rec.Serve(),
		Posture: rec.Policy.Posture, OnDrift: rec.Policy.OnDrift,
		BaselineVersion: rec.BaselineVersion, BaselineHash: rec.BaselineHash, LiveHash: rec.LiveHash,
		Severity: rec.Severity, Benign: rec.Benign, ReasonCode: rec.Reason, Reason: rec.ReasonText,
		Actor: rec.Actor, AtUnixMs: rec.UpdatedAtMs,
	}
}

// surfaceOf loads and parses a stored manifest.
func (s *Service) surfaceOf(ctx context.Context, hash string) (*surface.Surface, error) {
	if v, ok := s.surf.Load(hash); ok {
		return v.(*surface.Surface), nil
	}
	r, err := s.h.Manifests.Get(ctx, bus.ManifestName(hash))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", hash, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", hash, err)
	}
	sf, err := surface.Parse(raw, surface.Options{})
	if err != nil {
		return nil, fmt.Errorf("parsing manifest %s: %w", hash, err)
	}
	if sf.Hash.String() != hash {
		return nil, fmt.Errorf("manifest stored as %s hashes to %s", hash, sf.Hash)
	}
	s.surf.Store(hash, sf)
	return sf, nil
}

func (s *Service) diffHashes(ctx context.Context, base, live string) (*surface.Report, error) {
	b, err := s.surfaceOf(ctx, base)
	if err != nil {
		return nil, err
	}
	l, err := s.surfaceOf(ctx, live)
	if err != nil {
		return nil, err
	}
	return surface.Diff(b, l), nil
}

// ErrNoBaseline: a diff was asked of a server without a baseline.
var ErrNoBaseline = errors.New("no_baseline")

// Get returns a server's record.
func (s *Service) Get(ctx context.Context, tenant, server, variant string) (*state.Record, error) {
	rec, _, err := s.get(ctx, bus.StatusKey(tenant, server, variant))
	if err == nil && rec == nil {
		err = fmt.Errorf("%w: no status for %s/%s variant %s", state.ErrNotFound, tenant, server, variant)
	}
	return rec, err
}

// List returns every record, ordered by tenant, server and variant.
func (s *Service) List(ctx context.Context) ([]state.Record, error) {
	lister, err := s.h.Status.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing status keys: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]state.Record, 0, len(keys))
	for _, k := range keys {
		rec, _, err := s.get(ctx, k)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			out = append(out, *rec)
		}
	}
	return out, nil
}

// History returns every baseline version of a server, oldest first.
func (s *Service) History(ctx context.Context, tenant, server, variant string) ([]state.Baseline, error) {
	rec, err := s.Get(ctx, tenant, server, variant)
	if err != nil {
		return nil, err
	}
	var out []state.Baseline
	for v := int64(1); v <= rec.BaselineVersion; v++ {
		e, err := s.h.Baselines.Get(ctx, bus.BaselineKey(tenant, server, variant, v))
		if err != nil {
			return nil, fmt.Errorf("reading baseline v%d: %w", v, err)
		}
		var b state.Baseline
		if err := json.Unmarshal(e.Value(), &b); err != nil {
			return nil, fmt.Errorf("decoding baseline v%d: %w", v, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// Diff classifies the live manifest against the baseline.
func (s *Service) Diff(ctx context.Context, tenant, server, variant string) (*surface.Report, error) {
	rec, err := s.Get(ctx, tenant, server, variant)
	if err != nil {
		return nil, err
	}
	if rec.BaselineHash == "" {
		return nil, fmt.Errorf("%w: %s/%s has never been approved", ErrNoBaseline, tenant, server)
	}
	if rec.LiveError != "" {
		return nil, fmt.Errorf("%w: the live manifest could not be fingerprinted (%s)", state.ErrUnfingerprinted, rec.LiveError)
	}
	return s.diffHashes(ctx, rec.BaselineHash, rec.LiveHash)
}

// Approve re-baselines a server to its live manifest, which must be hash.
func (s *Service) Approve(ctx context.Context, tenant, server, variant, hash, actor string) (*state.Record, error) {
	return s.transact(ctx, bus.StatusKey(tenant, server, variant), "", func(rec *state.Record) (state.Outcome, error) {
		return state.Approve(rec, hash, actor, s.now())
	})
}

// Quarantine holds a server until an explicit approve.
func (s *Service) Quarantine(ctx context.Context, tenant, server, variant, actor, reason string) (*state.Record, error) {
	return s.transact(ctx, bus.StatusKey(tenant, server, variant), "", func(rec *state.Record) (state.Outcome, error) {
		return state.Quarantine(rec, tenant, server, variant, s.cfg.Policy, actor, reason, s.now()), nil
	})
}

// Code returns the stable code of an error from this package or package
// state, or "internal".
func Code(err error) string {
	for _, known := range []error{state.ErrNotFound, state.ErrStaleHash, state.ErrUnfingerprinted, state.ErrNothingToApprove, ErrNoBaseline, bus.ErrInvalidID} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	if c := surface.CodeOf(err); c != "" {
		return string(c)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return "not_found"
	}
	return "internal"
}
