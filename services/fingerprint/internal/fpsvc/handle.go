package fpsvc

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// CodeUnfingerprintable is the Fingerprint error_code when the engine
// failed without a code of its own (it panicked): fail closed. The codes of
// dead letters are package bus's (bus.DeadLetterCodes).
const CodeUnfingerprintable = "unfingerprintable"

// maxEventID bounds an event id: it becomes a Nats-Msg-Id header.
const maxEventID = 200

// maxErrorMessage bounds error_message in events.
const maxErrorMessage = 1024

// decode reads and checks an observation from a message on subject; its
// error is a bus.Poison with the dead-letter code.
func decode(subject string, data []byte) (*mcpdriftv1.ListObservation, error) {
	obs := new(mcpdriftv1.ListObservation)
	if err := unmarshalObservation(data, obs); err != nil {
		return nil, bus.Poisonf(bus.CodeMalformedEvent, "not a ListObservation (%d bytes): %v", len(data), err)
	}
	if obs.EventId == "" {
		return nil, bus.Poisonf(bus.CodeMalformedEvent, "event_id is empty")
	}
	if !validEventID(obs.EventId) {
		return nil, bus.Poisonf(bus.CodeInvalidID, "event_id %q must be 1 to %d printable ASCII characters without spaces", clip(obs.EventId, 70), maxEventID)
	}
	if obs.Variant == "" {
		obs.Variant = bus.DefaultVariant
	}
	for _, f := range []struct{ kind, id string }{{"tenant", obs.Tenant}, {"server", obs.Server}, {"variant", obs.Variant}} {
		if err := bus.ValidID(f.kind, f.id); err != nil {
			return nil, bus.Poison(err)
		}
	}
	// The subject as published: NATS appends a partition token on storing
	// it when the stream is partitioned (bus.SplitPartition).
	if got, _ := bus.SplitPartition(subject); got != bus.ListObservationSubject(obs.Tenant, obs.Server) {
		want := bus.ListObservationSubject(obs.Tenant, obs.Server)
		return nil, bus.Poisonf(bus.CodeSubjectMismatch, "event for tenant %q server %q arrived on %q, want %q", obs.Tenant, obs.Server, clip(subject, 140), want)
	}
	return obs, nil
}

func validEventID(id string) bool {
	if len(id) == 0 || len(id) > maxEventID {
		return false
	}
	for i := range len(id) {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// fingerprint returns the encoded Fingerprint of obs and the engine's
// result for its capture. A rejected surface is a result, not an error: the
// Fingerprint carries the code.
func (s *Service) fingerprint(obs *mcpdriftv1.ListObservation) ([]byte, *memoEntry, error) {
	h := s.hashing(obs)
	e, ok := s.memo.get(obs, h)
	if !ok {
		var err error
		if e, err = compute(obs.Capture, h, s.markers); err != nil {
			return nil, nil, err
		}
		s.memo.put(obs, e)
	}
	// The identity fields (1 to 7) encoded, then the result (8 to 13)
	// encoded once per capture: protobuf defines the concatenation of two
	// encodings as their merge, and with the fields in number order the
	// bytes are exactly proto.Marshal's (TestEncodingIsMarshal).
	data, err := proto.MarshalOptions{}.MarshalAppend(nil, &mcpdriftv1.Fingerprint{
		EventId:          "fp-" + obs.EventId,
		ObservationId:    obs.EventId,
		Tenant:           obs.Tenant,
		Server:           obs.Server,
		Proxy:            obs.Proxy,
		Variant:          obs.Variant,
		ObservedAtUnixMs: obs.ObservedAtUnixMs,
	})
	if err != nil {
		return nil, nil, err
	}
	return append(data, e.result...), e, nil
}

// CodeUnknownHashing is the Fingerprint error_code when the server's
// settings name a hash algorithm (or canonical form) this service does not know: nothing is
// hashed by a setting it does not understand (fail closed).
const CodeUnknownHashing = "unknown_hashing"

// hashing returns the hashing settings of the observation's server: its
// tenant's policy resolved for it (package settings), the defaults without
// one. The drift service compares a fingerprint only with a record made
// with the same settings (docs/policy-drift-settings.md).
func (s *Service) hashing(obs *mcpdriftv1.ListObservation) status.Hashing {
	if s.pol == nil {
		return status.DefaultHashing
	}
	return s.pol.Drift(obs.Tenant, obs.Server, status.Policy{}).Hashing()
}

// compute runs the engine on a capture, hashing with h and rating the
// surface with markers, and encodes the result fields.
func compute(capture []byte, h status.Hashing, markers *surface.MarkerMemo) (*memoEntry, error) {
	e := &memoEntry{capture: capture, hashing: h}
	res := &mcpdriftv1.Fingerprint{AnnotationsExcluded: !h.Annotations, CanonicalForm: h.Form}
	opt, err := h.Options()
	var surf *surface.Surface
	if err == nil {
		surf, err = parse(capture, opt)
	}
	switch {
	case err != nil:
		code := string(surface.CodeOf(err))
		if code == "" {
			code = CodeUnfingerprintable
		}
		if _, ok := surface.AlgNamed(h.Hash); !ok {
			code = CodeUnknownHashing
		}
		if _, ok := status.FormOf(h.Form); !ok {
			code = CodeUnknownHashing
		}
		res.ErrorCode = code
		res.ErrorMessage = clip(coded.MessageOf(err), maxErrorMessage)
	default:
		res.SurfaceHash = surf.Hash.String()
		res.Items = make([]*mcpdriftv1.ItemHash, len(surf.Items))
		for i, it := range surf.Items {
			res.Items[i] = &mcpdriftv1.ItemHash{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
		}
		band, reasons := markers.Rate(surf)
		res.Risk = &mcpdriftv1.SurfaceRisk{Band: band.String(), Reasons: reasons}
	}
	e.surfaceHash, e.errorCode = res.SurfaceHash, res.ErrorCode
	if e.result, err = proto.Marshal(res); err != nil {
		return nil, err
	}
	return e, nil
}

// parse is surface.Parse that turns a panic on hostile bytes into an error,
// so that one capture cannot crash every instance in turn.
func parse(capture []byte, opt surface.Options) (s *surface.Surface, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("the fingerprint engine panicked: %v", r)
		}
	}()
	pool := &builders[opt.Hash][boolIndex(opt.ExcludeAnnotations)][opt.Form]
	b, _ := pool.Get().(*surface.Builder)
	if b == nil {
		b = surface.NewBuilder(opt)
	}
	defer pool.Put(b)
	return b.Parse(capture)
}

// builders keeps the engine's buffers between captures (one per worker at
// a time), by hash algorithm, annotations switch and canonical form.
var builders [surface.SHA512 + 1][2][surface.FormV2 + 1]sync.Pool

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inflight is a message whose Fingerprint was published asynchronously:
// it is acked when the publish is acknowledged.
type inflight struct {
	d        *bus.Delivery
	eventID  string
	ack      jetstream.PubAckFuture
	deadline time.Time
	rejected bool
}

// handle processes one delivery. It settles it, or hands it to the settle
// goroutine with its publish in flight: every delivery is settled exactly
// once.
func (s *Service) handle(workCtx context.Context, d *bus.Delivery, settler chan<- inflight) {
	ctx, cancel := context.WithTimeout(workCtx, s.cfg.OpTimeout)
	defer cancel()

	msg := d.Msg
	obs, err := decode(msg.Subject(), msg.Data())
	if err != nil {
		d.Settle(ctx, err)
		return
	}
	start := time.Now()
	data, res, err := s.fingerprint(obs)
	s.m.fingerprinted(time.Since(start))
	if err != nil { // cannot happen for a valid message; retrying will not help
		d.Settle(ctx, bus.Poisonf(bus.CodeMalformedEvent, "encoding the fingerprint: %w", err))
		return
	}
	if res.errorCode == "" {
		if err := s.storeManifest(ctx, res.surfaceHash, obs.Capture); err != nil {
			d.Settle(workCtx, fmt.Errorf("observation %s: storing manifest %s: %w", obs.EventId, res.surfaceHash, err))
			return
		}
	}
	// Asynchronous, so that a worker's next message does not wait for this
	// one's round trip; the message id makes a retried publish a no-op.
	subj := bus.FingerprintSubject(obs.Tenant, obs.Server)
	f, err := s.js.PublishAsync(subj, data, jetstream.WithMsgID("fp-"+obs.EventId))
	if err != nil {
		d.Settle(workCtx, fmt.Errorf("observation %s: publishing %s: %w", obs.EventId, subj, err))
		return
	}
	in := inflight{d: d, eventID: obs.EventId, ack: f, deadline: time.Now().Add(s.cfg.OpTimeout), rejected: res.errorCode != ""}
	select {
	case settler <- in:
	case <-workCtx.Done():
		d.Settle(workCtx, fmt.Errorf("observation %s: publishing %s: %w", obs.EventId, subj, workCtx.Err()))
		return
	}
	if in.rejected {
		s.log.Debug().Str("tenant", obs.Tenant).Str("server", obs.Server).Str("event_id", obs.EventId).
			Str("error_code", res.errorCode).Msg("surface rejected")
	}
}

// settle waits for the publishes in flight, in order, and settles each
// message once its publish is answered: acked once its Fingerprint is
// stored, else retried.
func (s *Service) settle(workCtx context.Context, in <-chan inflight) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for p := range in {
		timer.Reset(time.Until(p.deadline))
		var err error
		select {
		case <-p.ack.Ok():
		case err = <-p.ack.Err():
		case <-timer.C:
			err = fmt.Errorf("no acknowledgement within %v", s.cfg.OpTimeout)
		case <-workCtx.Done():
			err = workCtx.Err()
		}
		if err != nil {
			p.d.Settle(workCtx, fmt.Errorf("observation %s: publishing %s: %w", p.eventID, p.ack.Msg().Subject, err))
			continue
		}
		p.d.Settle(workCtx, nil)
		s.stats.processed.Add(1)
		if p.rejected {
			s.stats.rejected.Add(1)
		}
		s.m.settled(p.rejected)
	}
}

// count is told of every settlement by the Settler.
func (s *Service) count(o bus.Outcome, code string) {
	switch o {
	case bus.Retried:
		s.stats.retries.Add(1)
		s.m.retry()
	case bus.DeadLettered:
		s.stats.poison.Add(1)
		if code == bus.CodeRetriesExhausted {
			s.stats.exhausted.Add(1)
		}
		s.m.deadLetter(code)
	}
}
