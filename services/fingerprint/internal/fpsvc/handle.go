package fpsvc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Stable codes of dead letters and of the errors behind them.
const (
	// CodeMalformedEvent: the message is not a ListObservation, or lacks a
	// required field (event_id).
	CodeMalformedEvent = "malformed_event"
	// CodeInvalidID: a tenant, server, variant or event id that cannot be a
	// subject token, key part or message id.
	CodeInvalidID = "invalid_id"
	// CodeSubjectMismatch: the tenant and server in the event are not the
	// ones of the subject it was published on. NATS permissions are granted
	// on subjects, so the body must not claim another tenant's server.
	CodeSubjectMismatch = "subject_mismatch"
	// CodeRetriesExhausted: a transient failure outlasted MaxDeliver.
	CodeRetriesExhausted = "retries_exhausted"
	// CodeUnfingerprintable is the Fingerprint error_code when the engine
	// failed without a code of its own (it panicked): fail closed.
	CodeUnfingerprintable = "unfingerprintable"
)

// maxEventID bounds an event id: it becomes a Nats-Msg-Id header.
const maxEventID = 200

// maxErrorMessage bounds error_message in events.
const maxErrorMessage = 1024

// poisonError is why a message can never be processed.
type poisonError struct {
	code string
	msg  string
}

func (e *poisonError) Error() string { return e.code + ": " + e.msg }

func poison(code, format string, args ...any) *poisonError {
	return &poisonError{code: code, msg: fmt.Sprintf(format, args...)}
}

// decode reads and checks an observation from a message on subject.
func decode(subject string, data []byte) (*mcpdriftv1.ListObservation, *poisonError) {
	obs := new(mcpdriftv1.ListObservation)
	if err := unmarshalObservation(data, obs); err != nil {
		return nil, poison(CodeMalformedEvent, "not a ListObservation (%d bytes): %v", len(data), err)
	}
	if obs.EventId == "" {
		return nil, poison(CodeMalformedEvent, "event_id is empty")
	}
	if !validEventID(obs.EventId) {
		return nil, poison(CodeInvalidID, "event_id %q must be 1 to %d printable ASCII characters without spaces", clip(obs.EventId, 70), maxEventID)
	}
	if obs.Variant == "" {
		obs.Variant = bus.DefaultVariant
	}
	for _, f := range []struct{ kind, id string }{{"tenant", obs.Tenant}, {"server", obs.Server}, {"variant", obs.Variant}} {
		if err := bus.ValidID(f.kind, f.id); err != nil {
			return nil, poison(CodeInvalidID, "%s", strings.TrimPrefix(err.Error(), bus.ErrInvalidID.Error()+": "))
		}
	}
	if want := bus.ListObservationSubject(obs.Tenant, obs.Server); subject != want {
		return nil, poison(CodeSubjectMismatch, "event for tenant %q server %q arrived on %q, want %q", obs.Tenant, obs.Server, clip(subject, 140), want)
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
	e, ok := s.memo.get(obs)
	if !ok {
		var err error
		if e, err = compute(obs.Capture); err != nil {
			return nil, nil, err
		}
		s.memo.put(obs, e)
	}
	// The identity fields (1 to 7) encoded, then the result (8 to 11)
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

// compute runs the engine on a capture and encodes the result fields.
func compute(capture []byte) (*memoEntry, error) {
	e := &memoEntry{capture: capture}
	res := new(mcpdriftv1.Fingerprint)
	surf, err := parse(capture)
	if err != nil {
		code := string(surface.CodeOf(err))
		if code == "" {
			code = CodeUnfingerprintable
		}
		res.ErrorCode = code
		res.ErrorMessage = clip(strings.TrimPrefix(err.Error(), code+": "), maxErrorMessage)
	} else {
		res.SurfaceHash = surf.Hash.String()
		res.Items = make([]*mcpdriftv1.ItemHash, len(surf.Items))
		for i, it := range surf.Items {
			res.Items[i] = &mcpdriftv1.ItemHash{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
		}
	}
	e.surfaceHash, e.errorCode = res.SurfaceHash, res.ErrorCode
	if e.result, err = proto.Marshal(res); err != nil {
		return nil, err
	}
	return e, nil
}

// parse is surface.Parse that turns a panic on hostile bytes into an error,
// so that one capture cannot crash every instance in turn.
func parse(capture []byte) (s *surface.Surface, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("the fingerprint engine panicked: %v", r)
		}
	}()
	b := builders.Get().(*surface.Builder)
	defer builders.Put(b)
	return b.Parse(capture)
}

// builders keeps the engine's buffers between captures (one per worker at a time).
var builders = sync.Pool{New: func() any { return surface.NewBuilder(surface.Options{}) }}

// inflight is a message whose Fingerprint was published asynchronously:
// it is acked when the publish is acknowledged.
type inflight struct {
	msg      jetstream.Msg
	md       *jetstream.MsgMetadata
	ref      ref
	ack      jetstream.PubAckFuture
	deadline time.Time
	rejected bool
}

// ref names an observation in logs.
type ref struct{ tenant, server, eventID string }

// handle processes one message. It settles it, or hands it to the settler
// with its publish in flight: every message is settled exactly once.
func (s *Service) handle(workCtx context.Context, msg jetstream.Msg, settler chan<- inflight) {
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to redeliver or settle.
		s.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without jetstream metadata")
		return
	}
	ctx, cancel := context.WithTimeout(workCtx, s.cfg.OpTimeout)
	defer cancel()

	obs, perr := decode(msg.Subject(), msg.Data())
	if perr != nil {
		s.deadLetter(ctx, msg, md, perr.code, perr.msg)
		return
	}
	r := ref{obs.Tenant, obs.Server, obs.EventId}
	start := time.Now()
	data, res, err := s.fingerprint(obs)
	s.m.fingerprinted(time.Since(start))
	if err != nil { // cannot happen for a valid message; retrying will not help
		s.deadLetter(ctx, msg, md, CodeMalformedEvent, "encoding the fingerprint: "+err.Error())
		return
	}
	if res.errorCode == "" {
		if err := s.storeManifest(ctx, res.surfaceHash, obs.Capture); err != nil {
			s.retry(workCtx, msg, md, r, fmt.Errorf("storing manifest %s: %w", res.surfaceHash, err))
			return
		}
	}
	// Asynchronous, so that a worker's next message does not wait for this
	// one's round trip; the message id makes a retried publish a no-op.
	subj := bus.FingerprintSubject(obs.Tenant, obs.Server)
	f, err := s.js.PublishAsync(subj, data, jetstream.WithMsgID("fp-"+obs.EventId))
	if err != nil {
		s.retry(workCtx, msg, md, r, fmt.Errorf("publishing %s: %w", subj, err))
		return
	}
	in := inflight{msg: msg, md: md, ref: r, ack: f, deadline: time.Now().Add(s.cfg.OpTimeout), rejected: res.errorCode != ""}
	select {
	case settler <- in:
	case <-workCtx.Done():
		s.retry(workCtx, msg, md, r, fmt.Errorf("publishing %s: %w", subj, workCtx.Err()))
		return
	}
	if in.rejected {
		s.log.Debug().Str("tenant", obs.Tenant).Str("server", obs.Server).Str("event_id", obs.EventId).
			Str("error_code", res.errorCode).Msg("surface rejected")
	}
}

// settle waits for the publishes in flight, in order, and acks each
// message once its Fingerprint is stored, or retries it.
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
			s.retry(workCtx, p.msg, p.md, p.ref, fmt.Errorf("publishing %s: %w", p.ack.Msg().Subject, err))
			continue
		}
		s.settled(p.msg, p.md, p.msg.Ack(), "ack")
		s.stats.processed.Add(1)
		if p.rejected {
			s.stats.rejected.Add(1)
		}
		s.m.settled(p.rejected)
	}
}

// retry naks with a delay growing with the delivery count, or dead-letters
// the message when this was its last delivery. The dead letter gets a
// fresh timeout that a shutdown does not cancel: the failure may have been
// the operation's own timeout or the shutdown, and the server will not
// deliver the message again, so the dead letter is its only record.
func (s *Service) retry(workCtx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, r ref, cause error) {
	if s.cfg.MaxDeliver > 0 && md.NumDelivered >= uint64(s.cfg.MaxDeliver) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), s.cfg.OpTimeout)
		defer cancel()
		s.stats.exhausted.Add(1)
		s.deadLetter(ctx, msg, md, CodeRetriesExhausted,
			fmt.Sprintf("gave up after %d deliveries: %v", md.NumDelivered, cause))
		return
	}
	delay := s.cfg.retryDelay(md.NumDelivered)
	s.stats.retries.Add(1)
	s.m.retry()
	s.log.Warn().Err(cause).Str("tenant", r.tenant).Str("server", r.server).Str("event_id", r.eventID).
		Uint64("stream_seq", md.Sequence.Stream).Uint64("delivered", md.NumDelivered).Dur("retry_in", delay).
		Msg("fingerprint not published; will retry")
	s.settled(msg, md, msg.NakWithDelay(delay), "nak")
}

// deadLetter publishes a DeadLetter and terminates the message. When the
// dead letter cannot be published the message is naked instead, so that
// the record is not lost, unless it was the last delivery.
func (s *Service) deadLetter(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, code, text string) {
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	dl := &mcpdriftv1.DeadLetter{
		EventId:        "dead-" + ServiceName + "-" + seq,
		Service:        ServiceName,
		Subject:        msg.Subject(),
		StreamSequence: seq,
		ErrorCode:      code,
		ErrorMessage:   clip(text, maxErrorMessage),
		AtUnixMs:       s.now().UnixMilli(),
	}
	data, err := bus.MarshalJSON(dl)
	if err == nil {
		_, err = bus.Publish(ctx, s.js, bus.DeadLetterSubject(ServiceName), data, dl.EventId)
	}
	last := s.cfg.MaxDeliver > 0 && md.NumDelivered >= uint64(s.cfg.MaxDeliver)
	if err != nil && !last {
		delay := s.cfg.retryDelay(md.NumDelivered)
		s.stats.retries.Add(1)
		s.m.retry()
		s.log.Warn().Err(err).Str("subject", msg.Subject()).Uint64("stream_seq", md.Sequence.Stream).
			Str("error_code", code).Dur("retry_in", delay).Msg("dead letter not published; will retry")
		s.settled(msg, md, msg.NakWithDelay(delay), "nak")
		return
	}
	ev := s.log.Warn()
	if err != nil {
		ev = s.log.Error().AnErr("publish_err", err)
	}
	ev.Str("subject", msg.Subject()).Uint64("stream_seq", md.Sequence.Stream).Uint64("delivered", md.NumDelivered).
		Str("error_code", code).Str("reason", dl.ErrorMessage).Bool("dead_letter", err == nil).Msg("observation terminated")
	s.stats.poison.Add(1)
	s.m.deadLetter(code)
	s.settled(msg, md, msg.TermWithReason(code), "term")
}

// settled logs a failed ack, nak or term: the server redelivers the message
// after AckWait, and processing it again is idempotent.
func (s *Service) settled(msg jetstream.Msg, md *jetstream.MsgMetadata, err error, what string) {
	if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		s.log.Warn().Err(err).Str("subject", msg.Subject()).Uint64("stream_seq", md.Sequence.Stream).
			Str("settle", what).Msg("settling message; it will be redelivered")
	}
}
