package notifysvc

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Kinds of events, the kind field of every format and of filters.
const (
	KindVerdict      = "verdict"       // a variant's status changed (drift, first baseline, ...)
	KindQuarantine   = "quarantine"    // a verdict whose status is quarantined
	KindApproval     = "approval"      // a verdict of a surface approved (by an admin, or guard's auto-approval)
	KindHeldCall     = "held_call"     // a tools/call held for approval
	KindCallResolved = "call_resolved" // an admin approved or denied a held call
)

// Kinds are every kind, in the order docs/services/notify.md lists them.
var Kinds = []string{KindVerdict, KindQuarantine, KindApproval, KindHeldCall, KindCallResolved}

// Statuses are every status an event can carry: a verdict's (without the
// STATUS_ prefix, lowercase), held for a held call, approved or denied for
// a resolved one.
var Statuses = []string{"unknown", "verified", "changed", "pending", "quarantined", "held", approval.Approved, approval.Denied}

// Severities are a verdict's severities from the least to the most severe
// (the diff's); a verdict without one has none.
var Severities = []string{"none", "info", "low", "medium", "high", "critical"}

// StatusHeld is the status of a held call.
const StatusHeld = "held"

// Event is one notification, whatever it came from: what filters look at
// and what every format renders.
type Event struct {
	// ID is stable for the event: the same on every delivery, to every
	// destination (the Idempotency-Key header).
	ID       string
	Kind     string
	Tenant   string
	Server   string
	Variant  string // verdicts only
	Status   string
	Severity string // verdicts only; "none" without one
	Time     time.Time
	// Subject is the bus subject the event came on.
	Subject string
	// Summary is one line for people.
	Summary string
	// Data is the event itself as JSON: a verdict as the bus carries it,
	// a held call as the admin API shows it, without its arguments.
	Data json.RawMessage
}

// decode reads the event a consumed message carries; skip is true for a
// message that carries none (a key deleted from the approvals bucket). A
// message that is not the event its subject says is poison.
func decode(msg jetstream.Msg, now time.Time) (ev *Event, skip bool, err error) {
	subject := msg.Subject()
	switch {
	case strings.HasPrefix(subject, bus.Prefix+".drift."):
		ev, err = decodeVerdict(subject, msg.Data())
		return ev, false, err
	case strings.HasPrefix(subject, approvalsPrefix):
		if op := msg.Headers().Get(kvOperationHeader); op != "" && op != "PUT" {
			return nil, true, nil // a deletion or purge of a key
		}
		ev, err = decodeApproval(subject, msg.Data(), now)
		return ev, false, err
	}
	return nil, false, bus.Poisonf(bus.CodeUnknownSubject, "subject %q carries no event notify knows", subject)
}

// approvalsPrefix starts the subjects of the approvals bucket's entries.
const approvalsPrefix = "$KV." + bus.BucketApprovals + "."

// kvOperationHeader says what a KV message is: absent or PUT for a value,
// DEL or PURGE for a deletion.
const kvOperationHeader = "KV-Operation"

func decodeVerdict(subject string, data []byte) (*Event, error) {
	var v mcpdriftv1.Verdict
	if err := bus.UnmarshalJSON(data, &v); err != nil {
		return nil, bus.Poisonf(bus.CodeMalformedEvent, "verdict: %v", err)
	}
	if v.GetEventId() == "" {
		return nil, bus.Poisonf(bus.CodeMalformedEvent, "verdict without event_id")
	}
	if err := bus.ValidID("tenant", v.GetTenant()); err != nil {
		return nil, bus.Poison(err)
	}
	if err := bus.ValidID("server", v.GetServer()); err != nil {
		return nil, bus.Poison(err)
	}
	if subject != bus.VerdictSubject(v.GetTenant(), v.GetServer()) {
		return nil, bus.Poisonf(bus.CodeSubjectMismatch, "verdict of tenant %q server %q on subject %q", v.GetTenant(), v.GetServer(), subject)
	}
	st := statusName(v.GetStatus())
	kind := KindVerdict
	switch {
	case v.GetStatus() == mcpdriftv1.Status_STATUS_QUARANTINED:
		kind = KindQuarantine
	case v.GetReasonCode() == "approved" || v.GetReasonCode() == "auto_approved" || v.GetReasonCode() == "approved_items":
		// approved_items: an admin approved some items; the status says
		// whether the variant is whole again (verified) or still changed.
		kind = KindApproval
	}
	sev := v.GetSeverity()
	if sev == "" {
		sev = "none"
	}
	summary := fmt.Sprintf("%s/%s (variant %s) is %s", v.GetTenant(), v.GetServer(), v.GetVariant(), st)
	if prev := statusName(v.GetPreviousStatus()); prev != "unspecified" && prev != st {
		summary += " (was " + prev + ")"
	}
	if sev != "none" {
		summary += ", severity " + sev
	}
	if r := v.GetReason(); r != "" {
		summary += ": " + r
	}
	if !v.GetServe() {
		summary += "; proxies withhold it"
	}
	return &Event{
		ID: v.GetEventId(), Kind: kind, Tenant: v.GetTenant(), Server: v.GetServer(), Variant: v.GetVariant(),
		Status: st, Severity: sev, Time: time.UnixMilli(v.GetAtUnixMs()).UTC(), Subject: subject,
		Summary: summary, Data: json.RawMessage(data),
	}, nil
}

// statusName is a verdict status as filters and formats name it.
func statusName(s mcpdriftv1.Status) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATUS_"))
}

func decodeApproval(subject string, data []byte, now time.Time) (*Event, error) {
	a, err := approval.Decode(data)
	if err != nil {
		return nil, bus.Poisonf(bus.CodeMalformedEvent, "%v", err)
	}
	r := a.GetRequest()
	if err := bus.ValidID("tenant", r.GetTenant()); err != nil {
		return nil, bus.Poison(err)
	}
	if err := bus.ValidID("server", r.GetServer()); err != nil {
		return nil, bus.Poison(err)
	}
	if err := approval.ValidID(r.GetId()); err != nil {
		return nil, bus.Poisonf(bus.CodeInvalidID, "%v", err)
	}
	if subject != approvalsPrefix+approval.Key(r.GetTenant(), r.GetId()) {
		return nil, bus.Poisonf(bus.CodeSubjectMismatch, "approval of tenant %q id %q under %q", r.GetTenant(), r.GetId(), subject)
	}
	show := approval.ShowOf(a, now)
	// The arguments stay in the approvals bucket: they may hold what the
	// agent passed to the tool (paths, queries, credentials). The digest
	// identifies them.
	show.Arguments = nil
	body, err := json.Marshal(show)
	if err != nil {
		return nil, fmt.Errorf("encoding approval %s: %w", r.GetId(), err)
	}
	ev := &Event{Tenant: r.GetTenant(), Server: r.GetServer(), Subject: subject, Severity: "none", Data: body}
	who := r.GetAgent()
	if who == "" {
		who = "an agent"
	}
	if res := a.GetResolution(); res != nil {
		ev.ID = "call-" + res.GetOutcome() + "-" + r.GetTenant() + "-" + r.GetId()
		ev.Kind, ev.Status = KindCallResolved, res.GetOutcome()
		ev.Time = time.UnixMilli(res.GetResolvedAtUnixMs()).UTC()
		ev.Summary = fmt.Sprintf("%s/%s: call of tool %s by %s %s by %s", r.GetTenant(), r.GetServer(), r.GetTool(), who, res.GetOutcome(), res.GetActor())
		if res.GetReason() != "" {
			ev.Summary += ": " + res.GetReason()
		}
		return ev, nil
	}
	ev.ID = "call-held-" + r.GetTenant() + "-" + r.GetId()
	ev.Kind, ev.Status = KindHeldCall, StatusHeld
	ev.Time = time.UnixMilli(r.GetRequestedAtUnixMs()).UTC()
	ev.Summary = fmt.Sprintf("%s/%s: call of tool %s by %s held for approval (id %s)", r.GetTenant(), r.GetServer(), r.GetTool(), who, r.GetId())
	if r.GetReason() != "" {
		ev.Summary += ": " + r.GetReason()
	}
	return ev, nil
}
