package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Dead-letter codes: why a service gave up on a message. They are the one
// list for every service (docs/bus.md#dead-letters); a DeadLetter's
// error_code and the code label of the services' dead-letter metrics are
// one of them.
const (
	// CodeMalformedEvent: not the event (or encoding) its subject carries,
	// or without a field it needs.
	CodeMalformedEvent = "malformed_event"
	// CodeInvalidID: a tenant, server or variant that is not a subject
	// token and key part (ValidID), or an event id that cannot be a
	// message id.
	CodeInvalidID = "invalid_id"
	// CodeInvalidEventID: an event id too long to be stored.
	CodeInvalidEventID = "invalid_event_id"
	// CodeInvalidTime: an event time before 1970 or after 2100.
	CodeInvalidTime = "invalid_time"
	// CodeSubjectMismatch: the event names another tenant, server or
	// service than its subject. NATS permissions are granted on subjects,
	// so a body must not speak for another.
	CodeSubjectMismatch = "subject_mismatch"
	// CodeUnknownSubject: a subject in a consumed stream that carries no
	// event the service knows.
	CodeUnknownSubject = "unknown_subject"
	// CodeRetriesExhausted: a transient failure outlasted the consumer's
	// MaxDeliver.
	CodeRetriesExhausted = "retries_exhausted"
)

// DeadLetterCodes are every dead-letter code, in the order docs/bus.md
// lists them.
var DeadLetterCodes = []string{CodeMalformedEvent, CodeInvalidID, CodeInvalidEventID, CodeInvalidTime,
	CodeSubjectMismatch, CodeUnknownSubject, CodeRetriesExhausted}

// maxDeadLetterMessage bounds a dead letter's error_message.
const maxDeadLetterMessage = 1024

// poisonError says that a message can never be processed, and why.
type poisonError struct{ e *coded.Error }

func (p *poisonError) Error() string        { return p.e.Error() }
func (p *poisonError) ErrorCode() string    { return p.e.Code }
func (p *poisonError) ErrorMessage() string { return p.e.Msg }
func (p *poisonError) Unwrap() error        { return p.e }

// Poison marks err as the reason a message can never be processed: the
// Settler dead-letters the message with err's code (CodeMalformedEvent
// when err carries none) and message, and terminates it.
func Poison(err error) error {
	code := coded.CodeOf(err)
	if code == "" {
		code = CodeMalformedEvent
	}
	return &poisonError{&coded.Error{Code: code, Msg: coded.MessageOf(err), Err: err}}
}

// Poisonf returns the reason a message can never be processed, with a
// dead-letter code and the message format makes (%w wraps a cause).
func Poisonf(code, format string, args ...any) error {
	return &poisonError{coded.Errorf(code, format, args...)}
}

// IsPoison reports whether err (or one it wraps) was made by Poison or
// Poisonf.
func IsPoison(err error) bool {
	var p *poisonError
	return errors.As(err, &p)
}

// Outcome is how a Settler settled a message.
type Outcome uint8

// Outcomes of a settlement.
const (
	// Acked: the handler succeeded (Ack).
	Acked Outcome = iota + 1
	// Retried: a transient failure, or a dead letter that could not be
	// published, before the last delivery (NakWithDelay).
	Retried
	// DeadLettered: poison, or a transient failure on the last delivery:
	// terminated (TermWithReason with the code) after its dead letter was
	// published; on the last delivery also when it could not be (logged at
	// error: the message is lost to the service).
	DeadLettered
	// HandedBack: given back unprocessed at shutdown (Nak), to be
	// delivered again at once, to any instance.
	HandedBack
	// Unsettled: a message without JetStream metadata; nothing to settle.
	Unsettled
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Retried:
		return "retried"
	case DeadLettered:
		return "dead_lettered"
	case HandedBack:
		return "handed_back"
	case Unsettled:
		return "unsettled"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// SettleConfig configures a Settler.
type SettleConfig struct {
	// Service names the service in its dead letters, which go to
	// DeadLetterSubject(Service).
	Service string
	// MaxDeliver is the consumer's MaxDeliver: a transient failure on that
	// delivery is dead-lettered with CodeRetriesExhausted. 0 or -1: no limit.
	MaxDeliver int
	// Backoff is the NakWithDelay delay after the given delivery (1-based)
	// failed.
	Backoff func(delivered uint64) time.Duration
	// Timeout bounds publishing one dead letter.
	Timeout time.Duration
}

// SettleDeps are what a Settler uses.
type SettleDeps struct {
	JS  jetstream.JetStream
	Log zerolog.Logger
	Now func() time.Time // time.Now when nil
	// Metrics is told of every settlement: its outcome and, for
	// DeadLettered, the code. Nil tells nothing.
	Metrics func(o Outcome, code string)
}

// Backoff returns a Backoff that waits first after the first delivery and
// doubles with each further one, up to most.
func Backoff(first, most time.Duration) func(delivered uint64) time.Duration {
	return func(delivered uint64) time.Duration {
		d := first
		for i := uint64(1); i < delivered && d < most; i++ {
			d *= 2
		}
		return min(d, most)
	}
}

// Settler is the one way a service settles a JetStream message, once per
// delivery, by what its handler returned: nil acks; a Poison error
// publishes a DeadLetter and terminates; any other error naks with a delay
// growing with the delivery count, and on the last delivery dead-letters
// with CodeRetriesExhausted. A dead letter that cannot be published is not
// lost: the message is naked to come back, unless it was the last delivery.
// A Settler is safe for concurrent use.
type Settler struct {
	cfg     SettleConfig
	js      jetstream.JetStream
	log     zerolog.Logger
	now     func() time.Time
	metrics func(Outcome, string)
	subject string
}

// NewSettler checks the configuration and dependencies.
func NewSettler(cfg SettleConfig, d SettleDeps) (*Settler, error) {
	var errs []error
	if err := ValidID("service", cfg.Service); err != nil {
		errs = append(errs, err)
	}
	if cfg.Backoff == nil {
		errs = append(errs, errors.New("settler: Backoff is nil"))
	}
	if cfg.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("settler: timeout %v: want a positive duration", cfg.Timeout))
	}
	if d.JS == nil {
		errs = append(errs, errors.New("settler: JS is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Settler{cfg: cfg, js: d.JS, log: d.Log, now: d.Now, metrics: d.Metrics,
		subject: DeadLetterSubject(cfg.Service)}, nil
}

// Settle settles msg by the outcome of its handler, err, and returns how.
// ctx is the handler's: the dead letter is published with a context of its
// own, bounded by Timeout, that ctx's cancellation (a shutdown) does not
// end. The failure may have been the shutdown itself, and the dead letter
// may be the message's only record.
func (s *Settler) Settle(ctx context.Context, msg jetstream.Msg, err error) Outcome {
	if err == nil {
		s.settled(msg, nil, msg.Ack(), "ack")
		return s.count(Acked, "")
	}
	md, merr := msg.Metadata()
	if merr != nil {
		s.log.Error().Err(err).AnErr("metadata_err", merr).Str("subject", msg.Subject()).
			Msg("message without jetstream metadata; not settled")
		return s.count(Unsettled, "")
	}
	var p *poisonError
	switch {
	case errors.As(err, &p):
		return s.deadLetter(ctx, msg, md, p.e.Code, p.e.Msg)
	case s.last(md):
		return s.deadLetter(ctx, msg, md, CodeRetriesExhausted,
			fmt.Sprintf("gave up after %d deliveries: %v", md.NumDelivered, err))
	}
	delay := s.cfg.Backoff(md.NumDelivered)
	s.log.Warn().Err(err).Str("subject", msg.Subject()).Str("stream", md.Stream).Uint64("stream_seq", md.Sequence.Stream).
		Uint64("delivered", md.NumDelivered).Dur("retry_in", delay).Msg("message not processed; will retry")
	s.settled(msg, md, msg.NakWithDelay(delay), "nak")
	return s.count(Retried, "")
}

// HandBack gives msg back unprocessed (Nak), for another delivery at once:
// what a service does with the messages it holds when it stops.
func (s *Settler) HandBack(msg jetstream.Msg) Outcome {
	s.settled(msg, nil, msg.Nak(), "nak")
	return s.count(HandedBack, "")
}

// InProgress tells the server that msg is still being worked on, so that it
// is not delivered again after AckWait: for a message held while its work
// is retried (the audit's batch while ClickHouse is down). It does not
// settle msg.
func (s *Settler) InProgress(msg jetstream.Msg) {
	s.settled(msg, nil, msg.InProgress(), "in_progress")
}

func (s *Settler) last(md *jetstream.MsgMetadata) bool {
	return s.cfg.MaxDeliver > 0 && md.NumDelivered >= uint64(s.cfg.MaxDeliver)
}

// DeadLetterID is the event id (and message id) of the dead letter of the
// message with the given stream sequence in stream: unique across streams
// and services, and the same for every delivery of the message.
func DeadLetterID(service, stream string, seq uint64) string {
	return "dead-" + service + "-" + stream + "-" + strconv.FormatUint(seq, 10)
}

// deadLetter publishes the DeadLetter of msg and terminates it, or naks it
// when the dead letter cannot be published and this is not its last
// delivery.
func (s *Settler) deadLetter(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, code, text string) Outcome {
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	dl := &mcpdriftv1.DeadLetter{
		EventId:        DeadLetterID(s.cfg.Service, md.Stream, md.Sequence.Stream),
		Service:        s.cfg.Service,
		Subject:        msg.Subject(),
		StreamSequence: seq,
		ErrorCode:      code,
		ErrorMessage:   clipUTF8(text, maxDeadLetterMessage),
		AtUnixMs:       s.now().UnixMilli(),
	}
	data, err := MarshalJSON(dl)
	if err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		_, err = Publish(pctx, s.js, s.subject, data, dl.EventId)
		cancel()
	}
	if err != nil && !s.last(md) {
		delay := s.cfg.Backoff(md.NumDelivered)
		s.log.Warn().Err(err).Str("subject", msg.Subject()).Str("stream", md.Stream).Uint64("stream_seq", md.Sequence.Stream).
			Str("error_code", code).Dur("retry_in", delay).Msg("dead letter not published; will retry")
		s.settled(msg, md, msg.NakWithDelay(delay), "nak")
		return s.count(Retried, "")
	}
	ev := s.log.Warn()
	if err != nil {
		ev = s.log.Error().AnErr("publish_err", err)
	}
	ev.Str("subject", msg.Subject()).Str("stream", md.Stream).Uint64("stream_seq", md.Sequence.Stream).
		Uint64("delivered", md.NumDelivered).Str("error_code", code).Str("reason", dl.ErrorMessage).
		Bool("dead_letter", err == nil).Msg("message terminated")
	s.settled(msg, md, msg.TermWithReason(code), "term")
	return s.count(DeadLettered, code)
}

func (s *Settler) count(o Outcome, code string) Outcome {
	if s.metrics != nil {
		s.metrics(o, code)
	}
	return o
}

// settled logs a failed ack, nak, term or in-progress: the server delivers
// the message again after AckWait, and handling it again is idempotent.
func (s *Settler) settled(msg jetstream.Msg, md *jetstream.MsgMetadata, err error, what string) {
	if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		return
	}
	ev := s.log.Warn().Err(err).Str("subject", msg.Subject()).Str("settle", what)
	if md != nil {
		ev = ev.Uint64("stream_seq", md.Sequence.Stream)
	}
	ev.Msg("settling message; it will be redelivered")
}

// clipUTF8 cuts s to at most n bytes at a character boundary, marking the
// cut with "...".
func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
