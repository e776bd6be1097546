package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// MaxEventIDLen bounds an event id.
const MaxEventIDLen = 512

// maxTimeMs is 2100-01-01: DateTime ends in 2106.
const maxTimeMs = 4102444800000

// batch holds decoded rows per table, column by column, and the messages
// they came from (acked once every table's insert succeeded).
type batch struct {
	lists   listRows
	calls   callRows
	verdict verdictRows
	admin   adminRows
	dead    deadRows
	msgs    []*bus.Delivery
	first   time.Time // when the oldest message was added
}

func (b *batch) tables() []table {
	return []table{&b.lists, &b.calls, &b.verdict, &b.admin, &b.dead}
}

func (b *batch) rows() int {
	n := 0
	for _, t := range b.tables() {
		n += t.len()
	}
	return n
}

func (b *batch) reset() {
	for _, t := range b.tables() {
		t.reset()
	}
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	b.first = time.Time{}
}

// table is one ClickHouse table's buffered rows.
type table interface {
	name() string
	columns() string
	len() int
	// appendTo adds every buffered row to an insert, column by column.
	appendTo(b driver.Batch) error
	reset()
}

// common are the columns every event table has.
type common struct {
	eventID []string
	at      []time.Time
	atMs    []int64
	seq     []uint64
}

func (c *common) add(id string, atMs int64, seq uint64) {
	c.eventID = append(c.eventID, id)
	c.at = append(c.at, time.UnixMilli(atMs).UTC())
	c.atMs = append(c.atMs, atMs)
	c.seq = append(c.seq, seq)
}

func (c *common) resetCommon() {
	c.eventID, c.at, c.atMs, c.seq = c.eventID[:0], c.at[:0], c.atMs[:0], c.seq[:0]
}

const commonColumns = "event_id, at, at_ms, stream_seq"

// appendColumns appends each slice to the column of the same index.
func appendColumns(b driver.Batch, cols ...any) error {
	for i, c := range cols {
		if err := b.Column(i).Append(c); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return nil
}

// listRows are rows of list_observations: one per listing a proxy
// observed, whole (ListObservation) or compact (ListingSeen, see
// listings.go).
type listRows struct {
	common
	tenant, server, variant, proxy, captureSHA, agent []string
	session, surfaceHash                              []string
	captureBytes                                      []uint32
	compact                                           []uint8
}

func (r *listRows) name() string { return "list_observations" }
func (r *listRows) columns() string {
	return commonColumns + ", tenant, server, variant, proxy, capture_bytes, capture_sha256, agent, session, surface_hash, compact"
}
func (r *listRows) len() int { return len(r.eventID) }
func (r *listRows) appendTo(b driver.Batch) error {
	return appendColumns(b, r.eventID, r.at, r.atMs, r.seq, r.tenant, r.server, r.variant, r.proxy, r.captureBytes, r.captureSHA, r.agent,
		r.session, r.surfaceHash, r.compact)
}
func (r *listRows) reset() {
	r.resetCommon()
	r.tenant, r.server, r.variant, r.proxy, r.captureSHA = r.tenant[:0], r.server[:0], r.variant[:0], r.proxy[:0], r.captureSHA[:0]
	r.agent, r.session, r.surfaceHash = r.agent[:0], r.session[:0], r.surfaceHash[:0]
	r.captureBytes, r.compact = r.captureBytes[:0], r.compact[:0]
}

type callRows struct {
	common
	tenant, server, proxy, tool, outcome, refusal, alert, digest, args []string
	latency                                                            []int64
	// the per-call policy's columns, in policyColumns order
	policy [len(policyColumns)][]string
}

// policyColumns are the call columns of the per-call policy (schema
// version 3), in the order of policyValues.
var policyColumns = [...]string{"agent", "policy_rule", "policy_action", "policy_reason", "risk_mode",
	"shadow_rule", "shadow_action", "approval_id", "approval_outcome", "approval_actor"}

// policyValues are a call's values of policyColumns.
func policyValues(ev *mcpdriftv1.CallObservation) [len(policyColumns)]string {
	return [...]string{ev.Agent, ev.PolicyRule, ev.PolicyAction, ev.PolicyReason, ev.RiskMode,
		ev.ShadowRule, ev.ShadowAction, ev.ApprovalId, ev.ApprovalOutcome, ev.ApprovalActor}
}

func (r *callRows) name() string { return "call_observations" }
func (r *callRows) columns() string {
	return commonColumns + ", tenant, server, proxy, tool, outcome, refusal_code, alert_code, latency_us, arguments_digest, arguments, " +
		strings.Join(policyColumns[:], ", ")
}
func (r *callRows) len() int { return len(r.eventID) }
func (r *callRows) appendTo(b driver.Batch) error {
	cols := []any{r.eventID, r.at, r.atMs, r.seq, r.tenant, r.server, r.proxy, r.tool, r.outcome, r.refusal, r.alert, r.latency, r.digest, r.args}
	for i := range r.policy {
		cols = append(cols, r.policy[i])
	}
	return appendColumns(b, cols...)
}
func (r *callRows) reset() {
	r.resetCommon()
	r.tenant, r.server, r.proxy, r.tool, r.outcome = r.tenant[:0], r.server[:0], r.proxy[:0], r.tool[:0], r.outcome[:0]
	r.refusal, r.alert, r.digest, r.args, r.latency = r.refusal[:0], r.alert[:0], r.digest[:0], r.args[:0], r.latency[:0]
	for i := range r.policy {
		r.policy[i] = r.policy[i][:0]
	}
}

type verdictRows struct {
	common
	tenant, server, variant, status, previous, posture, onDrift, baselineHash, liveHash, severity, reasonCode, reason, actor []string
	serve, benign                                                                                                            []uint8
	baselineVersion                                                                                                          []int64
}

func (r *verdictRows) name() string { return "verdicts" }
func (r *verdictRows) columns() string {
	return commonColumns + ", tenant, server, variant, status, previous_status, serve, posture, on_drift, baseline_version, baseline_hash, live_hash, severity, benign, reason_code, reason, actor"
}
func (r *verdictRows) len() int { return len(r.eventID) }
func (r *verdictRows) appendTo(b driver.Batch) error {
	return appendColumns(b, r.eventID, r.at, r.atMs, r.seq, r.tenant, r.server, r.variant, r.status, r.previous, r.serve,
		r.posture, r.onDrift, r.baselineVersion, r.baselineHash, r.liveHash, r.severity, r.benign, r.reasonCode, r.reason, r.actor)
}
func (r *verdictRows) reset() {
	r.resetCommon()
	for _, s := range []*[]string{&r.tenant, &r.server, &r.variant, &r.status, &r.previous, &r.posture, &r.onDrift,
		&r.baselineHash, &r.liveHash, &r.severity, &r.reasonCode, &r.reason, &r.actor} {
		*s = (*s)[:0]
	}
	r.serve, r.benign, r.baselineVersion = r.serve[:0], r.benign[:0], r.baselineVersion[:0]
}

type adminRows struct {
	common
	tenant, server, variant, action, actor, role, hash, errorCode, errorMessage []string
	ok                                                                          []uint8
}

func (r *adminRows) name() string { return "admin_actions" }
func (r *adminRows) columns() string {
	return commonColumns + ", tenant, server, variant, action, actor, role, hash, ok, error_code, error_message"
}
func (r *adminRows) len() int { return len(r.eventID) }
func (r *adminRows) appendTo(b driver.Batch) error {
	return appendColumns(b, r.eventID, r.at, r.atMs, r.seq, r.tenant, r.server, r.variant, r.action, r.actor, r.role, r.hash, r.ok, r.errorCode, r.errorMessage)
}
func (r *adminRows) reset() {
	r.resetCommon()
	for _, s := range []*[]string{&r.tenant, &r.server, &r.variant, &r.action, &r.actor, &r.role, &r.hash, &r.errorCode, &r.errorMessage} {
		*s = (*s)[:0]
	}
	r.ok = r.ok[:0]
}

type deadRows struct {
	common
	service, subject, streamSequence, errorCode, errorMessage []string
}

func (r *deadRows) name() string { return "dead_letters" }
func (r *deadRows) columns() string {
	return commonColumns + ", service, subject, stream_sequence, error_code, error_message"
}
func (r *deadRows) len() int { return len(r.eventID) }
func (r *deadRows) appendTo(b driver.Batch) error {
	return appendColumns(b, r.eventID, r.at, r.atMs, r.seq, r.service, r.subject, r.streamSequence, r.errorCode, r.errorMessage)
}
func (r *deadRows) reset() {
	r.resetCommon()
	for _, s := range []*[]string{&r.service, &r.subject, &r.streamSequence, &r.errorCode, &r.errorMessage} {
		*s = (*s)[:0]
	}
}

// insert writes one table's rows in one INSERT that names its columns.
func insert(ctx context.Context, conn driver.Conn, db string, t table) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+"."+t.name()+" ("+t.columns()+")")
	if err != nil {
		return err
	}
	if err := t.appendTo(b); err != nil {
		_ = b.Abort()
		return err
	}
	return b.Send()
}

// envelope is what decoding needs of a message besides its data.
type envelope struct {
	subject string
	msgID   func() string // the Nats-Msg-Id header, parsed only when needed
	seq     uint64        // stream sequence
	stamp   time.Time
}

// decode appends the message's rows to the batch (one, or one per call of a
// CallObservations), or says why it never can; then it adds none.
func (s *Service) decode(env envelope, data []byte, b *batch) error {
	// An observation as published: NATS appends a partition token on
	// storing it when the stream is partitioned (bus.SplitPartition).
	subject, _ := bus.SplitPartition(env.subject)
	tok := strings.Split(subject, ".")
	if len(tok) < 3 || tok[0] != bus.Prefix {
		return bus.Poisonf(bus.CodeUnknownSubject, "subject %s is not an mcpdrift subject", clip(env.subject, 200))
	}
	kind := tok[1]
	if kind == "obs" && len(tok) == 5 {
		kind += "." + tok[2]
		tok = tok[1:]
	}
	// tok[2], tok[3] are tenant and server where the subject has them.
	switch {
	case kind == "obs.list" && len(tok) == 4:
		ev := new(mcpdriftv1.ListObservation)
		if err := proto.Unmarshal(data, ev); err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "decoding ListObservation: %w", err)
		}
		if p := matchSubject(tok[2], tok[3], ev.Tenant, ev.Server); p != nil {
			return p
		}
		id, atMs, p := s.identity(env, data, ev.EventId, ev.ObservedAtUnixMs)
		if p != nil {
			return p
		}
		sum := sha256.Sum256(ev.Capture)
		b.lists.addListing(id, atMs, env.seq, tok[2], tok[3], listing{variant: ev.Variant, proxy: ev.Proxy, agent: ev.Agent,
			session: ev.Session, hash: ev.SurfaceHash, captureBytes: uint32(min(len(ev.Capture), 1<<32-1)),
			captureSHA: "sha256:" + hex.EncodeToString(sum[:])})
	case kind == "obs.seen" && len(tok) == 4:
		return s.decodeSeen(env, data, tok[2], tok[3], &b.lists)
	case kind == "obs.call" && len(tok) == 4:
		// The single form, which proxies before the batch form publish.
		ev := new(mcpdriftv1.CallObservation)
		if err := proto.Unmarshal(data, ev); err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "decoding CallObservation: %w", err)
		}
		if p := matchSubject(tok[2], tok[3], ev.Tenant, ev.Server); p != nil {
			return p
		}
		id, atMs, p := s.identity(env, data, ev.EventId, ev.ObservedAtUnixMs)
		if p != nil {
			return p
		}
		s.addCall(&b.calls, tok[2], tok[3], id, atMs, env.seq, ev)
	case kind == "obs.calls" && len(tok) == 4:
		return s.decodeCalls(env, data, tok[2], tok[3], &b.calls)
	case kind == "drift" && len(tok) == 4:
		ev := new(mcpdriftv1.Verdict)
		if err := bus.UnmarshalJSON(data, ev); err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "decoding Verdict: %w", err)
		}
		if p := matchSubject(tok[2], tok[3], ev.Tenant, ev.Server); p != nil {
			return p
		}
		id, atMs, p := s.identity(env, data, ev.EventId, ev.AtUnixMs)
		if p != nil {
			return p
		}
		r := &b.verdict
		r.add(id, atMs, env.seq)
		r.tenant, r.server, r.variant = append(r.tenant, tok[2]), append(r.server, tok[3]), append(r.variant, ev.Variant)
		r.status, r.previous = append(r.status, StatusName(ev.Status)), append(r.previous, StatusName(ev.PreviousStatus))
		r.serve, r.benign = append(r.serve, b2u(ev.Serve)), append(r.benign, b2u(ev.Benign))
		r.posture, r.onDrift = append(r.posture, ev.Posture), append(r.onDrift, ev.OnDrift)
		r.baselineVersion, r.baselineHash = append(r.baselineVersion, ev.BaselineVersion), append(r.baselineHash, ev.BaselineHash)
		r.liveHash, r.severity = append(r.liveHash, ev.LiveHash), append(r.severity, ev.Severity)
		r.reasonCode, r.reason, r.actor = append(r.reasonCode, ev.ReasonCode), append(r.reason, ev.Reason), append(r.actor, ev.Actor)
	case kind == "admin" && len(tok) == 4:
		ev := new(mcpdriftv1.AdminAction)
		if err := bus.UnmarshalJSON(data, ev); err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "decoding AdminAction: %w", err)
		}
		tenant, server := unblank(tok[2]), unblank(tok[3])
		if p := matchSubject(tenant, server, ev.Tenant, ev.Server); p != nil {
			return p
		}
		id, atMs, p := s.identity(env, data, ev.EventId, ev.AtUnixMs)
		if p != nil {
			return p
		}
		r := &b.admin
		r.add(id, atMs, env.seq)
		r.tenant, r.server, r.variant = append(r.tenant, tenant), append(r.server, server), append(r.variant, ev.Variant)
		r.action, r.actor, r.role = append(r.action, ev.Action), append(r.actor, ev.Actor), append(r.role, ev.Role)
		r.hash, r.ok = append(r.hash, ev.Hash), append(r.ok, b2u(ev.Ok))
		r.errorCode, r.errorMessage = append(r.errorCode, ev.ErrorCode), append(r.errorMessage, ev.ErrorMessage)
	case kind == "dead" && len(tok) == 3:
		ev := new(mcpdriftv1.DeadLetter)
		if err := bus.UnmarshalJSON(data, ev); err != nil {
			return bus.Poisonf(bus.CodeMalformedEvent, "decoding DeadLetter: %w", err)
		}
		if ev.Service != "" && ev.Service != tok[2] {
			return bus.Poisonf(bus.CodeSubjectMismatch, "dead letter of service %q on the subject of %q", clip(ev.Service, 64), tok[2])
		}
		id, atMs, p := s.identity(env, data, ev.EventId, ev.AtUnixMs)
		if p != nil {
			return p
		}
		r := &b.dead
		r.add(id, atMs, env.seq)
		r.service, r.subject, r.streamSequence = append(r.service, tok[2]), append(r.subject, ev.Subject), append(r.streamSequence, ev.StreamSequence)
		r.errorCode, r.errorMessage = append(r.errorCode, ev.ErrorCode), append(r.errorMessage, ev.ErrorMessage)
	default:
		return bus.Poisonf(bus.CodeUnknownSubject, "subject %s carries no event the audit knows", clip(env.subject, 200))
	}
	return nil
}

// decodeCalls adds a CallObservations batch to r: one row per call, or
// none. Every call is checked before the first is added, so a batch with one
// bad call is dead-lettered whole and leaves r as it was; a batch of no calls
// adds nothing and is acked. Each call's id is its own event_id; a call
// without one takes the message's fallback id (see fallbackID) followed by
// "#<index in the batch>", so that a redelivery gets the same ids.
func (s *Service) decodeCalls(env envelope, data []byte, tenant, server string, r *callRows) error {
	ev := new(mcpdriftv1.CallObservations)
	if err := proto.Unmarshal(data, ev); err != nil {
		return bus.Poisonf(bus.CodeMalformedEvent, "decoding CallObservations: %w", err)
	}
	rows, err := checkBatch(env, data, tenant, server, len(ev.Calls), "call", func(i int) batchItem {
		c := ev.Calls[i]
		return batchItem{c.Tenant, c.Server, c.EventId, c.ObservedAtUnixMs}
	})
	if err != nil {
		return err
	}
	for i, c := range ev.Calls {
		s.addCall(r, tenant, server, rows[i].id, rows[i].atMs, env.seq, c)
	}
	return nil
}

// batchItem is what checkBatch reads of one event of a batch.
type batchItem struct {
	tenant, server, eventID string
	observedAtMs            int64
}

// checkedItem is one event of a batch, checked: its id and time.
type checkedItem struct {
	id   string
	atMs int64
}

// checkBatch checks every one of a batch's n events (item reads the i-th)
// before any is added: each must name the subject's tenant and server and
// have a sound id and time. An event without an id takes the message's
// fallback id followed by "#<index>" (computed once, and only when
// needed). A poison names which event of the batch it is about, as what
// ("call", "compact listing").
func checkBatch(env envelope, data []byte, tenant, server string, n int, what string, item func(i int) batchItem) ([]checkedItem, error) {
	in := func(p error, i int) error {
		return bus.Poisonf(coded.CodeOf(p), "%s %d of %d: %s", what, i, n, coded.MessageOf(p))
	}
	rows := make([]checkedItem, n)
	base := ""
	for i := range n {
		it := item(i)
		if p := matchSubject(tenant, server, it.tenant, it.server); p != nil {
			return nil, in(p, i)
		}
		id := it.eventID
		if id == "" {
			if base == "" {
				base = fallbackID(env, data)
			}
			id = base + "#" + strconv.Itoa(i)
		}
		atMs, p := checkIdentity(env, id, it.observedAtMs)
		if p != nil {
			return nil, in(p, i)
		}
		rows[i] = checkedItem{id, atMs}
	}
	return rows, nil
}

// addCall appends one call's row.
func (s *Service) addCall(r *callRows, tenant, server, id string, atMs int64, seq uint64, ev *mcpdriftv1.CallObservation) {
	r.add(id, atMs, seq)
	r.tenant, r.server, r.proxy = append(r.tenant, tenant), append(r.server, server), append(r.proxy, ev.Proxy)
	r.tool, r.outcome = append(r.tool, ev.Tool), append(r.outcome, outcomeName(ev.Outcome))
	r.refusal, r.latency = append(r.refusal, ev.RefusalCode), append(r.latency, ev.LatencyUs)
	r.alert = append(r.alert, ev.AlertCode)
	for i, v := range policyValues(ev) {
		r.policy[i] = append(r.policy[i], v)
	}
	r.digest = append(r.digest, ev.ArgumentsDigest)
	args := ""
	if s.cfg.Arguments == ArgumentsFull && len(ev.Arguments) > 0 {
		args = Redact(ev.Arguments)
	}
	r.args = append(r.args, args)
}

// identity is the row's event id and time. The id is the event's own (also
// its Nats-Msg-Id); an event without one takes the message's fallback id.
// A missing time is the time JetStream stored the message.
func (s *Service) identity(env envelope, data []byte, eventID string, atMs int64) (string, int64, error) {
	id := eventID
	if id == "" {
		id = fallbackID(env, data)
	}
	atMs, p := checkIdentity(env, id, atMs)
	if p != nil {
		return "", 0, p
	}
	return id, atMs, nil
}

// fallbackID is the id of an event that has none: the message id, and
// failing that a digest of subject and data, so that a redelivery gets the
// same id.
func fallbackID(env envelope, data []byte) string {
	if env.msgID != nil {
		if id := env.msgID(); id != "" {
			return id
		}
	}
	h := sha256.New()
	subject, _ := bus.SplitPartition(env.subject) // the same id however many partitions
	h.Write([]byte(subject))
	h.Write([]byte{0})
	h.Write(data)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// checkIdentity checks an event id's length and returns the event's time,
// the time JetStream stored the message when the event has none.
func checkIdentity(env envelope, id string, atMs int64) (int64, error) {
	if len(id) > MaxEventIDLen {
		return 0, bus.Poisonf(bus.CodeInvalidEventID, "event id of %d bytes; at most %d", len(id), MaxEventIDLen)
	}
	if atMs == 0 {
		atMs = env.stamp.UnixMilli()
	}
	if atMs <= 0 || atMs >= maxTimeMs {
		return 0, bus.Poisonf(bus.CodeInvalidTime, "event time %d ms is outside 1970 to 2100", atMs)
	}
	return atMs, nil
}

// matchSubject checks that an event names the tenant and server of its
// subject (or none): publish permissions are per subject, so the subject is
// what a publisher was allowed to say.
func matchSubject(tenant, server, evTenant, evServer string) error {
	if (evTenant != "" && evTenant != tenant) || (evServer != "" && evServer != server) {
		return bus.Poisonf(bus.CodeSubjectMismatch, "event names %q/%q on the subject of %q/%q",
			clip(evTenant, 64), clip(evServer, 64), tenant, server)
	}
	return nil
}

// unblank turns the admin subject's "_" (no tenant or server) into "".
func unblank(tok string) string {
	if tok == "_" {
		return ""
	}
	return tok
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// StatusName is the lower-case status name stored in ClickHouse
// ("changed" for STATUS_CHANGED), as in the status records.
func StatusName(s mcpdriftv1.Status) string {
	if s == mcpdriftv1.Status_STATUS_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

// outcomeName is the lower-case outcome name stored in ClickHouse
// ("forwarded" for CALL_OUTCOME_FORWARDED). The known ones are named once:
// a batch of calls names one per call.
func outcomeName(o mcpdriftv1.CallOutcome) string {
	if int(o) >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return strings.ToLower(strings.TrimPrefix(o.String(), "CALL_OUTCOME_"))
}

var outcomeNames = func() []string {
	names := make([]string, len(mcpdriftv1.CallOutcome_name))
	for i := range names {
		names[i] = strings.ToLower(strings.TrimPrefix(mcpdriftv1.CallOutcome(i).String(), "CALL_OUTCOME_"))
	}
	return names
}()

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
