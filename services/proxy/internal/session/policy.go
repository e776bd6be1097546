package session

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// Policy is the tenant's per-call policy as the proxy holds it
// (fleet.Policy): every tools/call the status lets through is evaluated
// against it at dispatch, locally.
type Policy interface {
	// Evaluate decides on c. A code other than "" refuses the call: the
	// proxy does not know its tenant's policy (never loaded, or only
	// unreadable values), and fails closed.
	Evaluate(ctx context.Context, c *policy.Call) (policy.Decision, Code)
}

// DriftPolicy is a Policy that also tells the action on drift its live
// policy names for a server (fleet.Policy): status.Block there withdraws
// the alert and withhold_changed postures of the server's record at once,
// before the drift service has rewritten the record (View.Alert,
// View.Withhold), and status.WithholdChanged withdraws alert
// (narrowPosture). Any other answer leaves the record's posture: the proxy
// only ever narrows what a record serves.
type DriftPolicy interface {
	OnDrift(server string) string
}

// Approvals holds a call that a rule (or the server's quarantine risk
// mode) puts under pending_approval until an admin decides (fleet.Approvals).
type Approvals interface {
	// Await publishes the request and waits for its resolution, at most
	// its own bound; it never returns an outcome other than
	// ApprovalApproved for a call that must not be forwarded.
	Await(ctx context.Context, req ApprovalRequest) Approval
}

// ApprovalRequest is what an admin sees of a held call.
type ApprovalRequest struct {
	Server, Tool, Agent string
	Rule, Reason        string
	RiskMode            string
	ArgsDigest          string
	Arguments           []byte // as the client wrote them
}

// The outcomes of a held call (Approval.Outcome, and the approval_outcome
// of its call observation).
const (
	ApprovalApproved    = "approved"
	ApprovalDenied      = "denied"
	ApprovalTimeout     = "timeout"     // no resolution within the proxy's bound
	ApprovalUnavailable = "unavailable" // the request could not be delivered to the drift service
)

// Approval is how a held call ended.
type Approval struct {
	ID      string // the request's id ("" when none could be made)
	Outcome string // one of the Approval* outcomes
	Actor   string // who resolved it
	Reason  string // the resolver's reason, if any
	Wait    time.Duration
}

// Decided is what the policy decided on a call, for its observation.
type Decided struct {
	Rule, Action, Reason, RiskMode   string
	ShadowRule, ShadowAction         string
	ApprovalID, ApprovalOutcome, Who string
}

// verdict is what clientMessage decides on one message.
type verdict struct {
	refusal []byte                             // answer with this instead of forwarding
	drop    bool                               // neither forward nor answer
	forward []byte                             // forward these bytes in place of the message's (sanitize)
	held    func(ctx context.Context) Decision // wait for an approval first (Decision.Wait)
}

// enforce evaluates a tools/call that its server's status lets through
// against the per-call policy, and says what to do with it. p is the call's
// pending record, to which the decision is added; raw are the call's
// arguments (nil when it has none).
func (s *Session) enforce(ctx context.Context, m *jsonrpc.Message, raw []byte, risk string, p *pendingReq) verdict {
	call := &policy.Call{Server: s.cfg.Server, Tool: p.tool, Agent: s.cfg.Agent, Arguments: raw,
		Drifted: p.alert != "" || p.partial, Risk: policy.Mode(risk)}
	d, code := s.cfg.Policy.Evaluate(ctx, call)
	if code != "" {
		return s.policyRefusal(m, p, code, policyUnknownText(code))
	}
	p.policy = Decided{Rule: d.Rule, Action: string(d.Action), Reason: d.Reason, RiskMode: string(d.Mode),
		ShadowRule: d.ShadowRule, ShadowAction: string(d.ShadowAction)}
	switch d.Action {
	case policy.Allow, policy.Audit:
		return verdict{}
	case policy.Sanitize:
		return s.sanitize(m, raw, p, d)
	case policy.Deny:
		code := PolicyDeny
		if d.Code != "" {
			code = Code(d.Code) // the engine decided: a risk mode, unreadable arguments
		}
		return s.policyRefusal(m, p, code, "policy deny: "+denyReason(d))
	case policy.PendingApproval:
		// A sanitize rule held by the quarantine risk mode keeps its
		// paths: what is approved, and forwarded, is the redacted call.
		v := s.sanitize(m, raw, p, d)
		if v.refusal != nil {
			return v
		}
		return s.hold(m, v.forward, p, d)
	}
	return s.policyRefusal(m, p, PolicyInvalid, fmt.Sprintf("policy deny: rule %q has an action the proxy does not know (%q)", d.Rule, d.Action))
}

// sanitize redacts d's paths (none: nothing) of a call's arguments raw
// (nil: none) and returns the call to forward in place of m (nil: m as
// it is), or a refusal when they cannot be redacted.
func (s *Session) sanitize(m *jsonrpc.Message, raw []byte, p *pendingReq, d policy.Decision) verdict {
	if raw == nil || len(d.Redact) == 0 {
		return verdict{} // no arguments, or no paths: nothing to redact
	}
	redacted, err := policy.Redact(raw, d.Redact)
	var out []byte
	if err == nil {
		out, err = jsonrpc.ReplaceParamsMember(m, "arguments", redacted)
	}
	if err != nil {
		return s.policyRefusal(m, p, PolicySanitizeFailed, fmt.Sprintf("policy deny: the arguments could not be redacted as rule %q requires (%v), so the call is not forwarded", d.Rule, err))
	}
	p.rawArgs = redacted // what an approver sees is what the server gets
	if p.args != nil {
		p.args = redacted // and what audit keeps
	}
	return verdict{forward: out}
}

// denyReason is the reason a refused call's text gives.
func denyReason(d policy.Decision) string {
	switch {
	case d.Reason != "" && d.Mode != "":
		return d.Reason + " (server risk mode " + string(d.Mode) + ")"
	case d.Reason != "":
		return d.Reason
	case d.Mode != "":
		return "the server's risk mode is " + string(d.Mode)
	case d.Rule != "":
		return "rule " + d.Rule
	}
	return "refused by the tenant's policy"
}

func policyUnknownText(code Code) string {
	if code == PolicyInvalid {
		return "policy deny: the proxy holds no readable policy of its tenant (the stored one is invalid), so no call is forwarded until the drift service stores a valid one."
	}
	return "policy deny: the proxy does not know its tenant's policy yet (NATS unreachable and no policy copy on disk), so no call is forwarded. Retry shortly."
}

// policyRefusal refuses the call p with code and text, and records it.
func (s *Session) policyRefusal(m *jsonrpc.Message, p *pendingReq, code Code, text string) verdict {
	s.observe(Call{Tool: p.tool, Refused: true, RefusalCode: code, ArgsDigest: p.digest, Arguments: p.args, Policy: p.policy})
	return verdict{refusal: ToolError(m.ID, code, text)}
}

// hold makes the decision of a call under pending_approval: the message (or
// forward, its sanitized form, when not nil) and its pending record are
// kept (copied: the transport's buffer is reused), and the call is
// forwarded or refused once the approval ends.
func (s *Session) hold(m *jsonrpc.Message, forward []byte, p *pendingReq, d policy.Decision) verdict {
	raw, id := bytes.Clone(m.Raw), bytes.Clone(m.ID)
	if forward != nil {
		raw = forward // made afresh by sanitize, not the transport's
	}
	held := *p
	req := ApprovalRequest{Server: s.cfg.Server, Tool: p.tool, Agent: s.cfg.Agent, Rule: d.Rule, Reason: d.Reason,
		RiskMode: string(d.Mode), ArgsDigest: p.digest, Arguments: bytes.Clone(p.rawArgs)}
	held.rawArgs = nil
	return verdict{held: func(ctx context.Context) Decision {
		a := Approval{Outcome: ApprovalUnavailable}
		if s.cfg.Approvals != nil {
			a = s.cfg.Approvals.Await(ctx, req)
		}
		held.policy.ApprovalID, held.policy.ApprovalOutcome, held.policy.Who = a.ID, a.Outcome, a.Actor
		if a.Outcome == ApprovalApproved && ctx.Err() == nil {
			// The wait can be long: the server's status is judged again,
			// so that an approval never carries a call to a server that
			// drifted or was quarantined meanwhile.
			if code, text, _, _, _ := s.decide(ctx, surface.KindTool, held.tool); code != "" {
				s.observe(Call{Tool: held.tool, Refused: true, RefusalCode: code, ArgsDigest: held.digest, Arguments: held.args, Policy: held.policy})
				return Decision{ToClient: ToolError(id, code, text)}
			}
			held.start = time.Now()
			if !s.reqs.addClient(id, held) {
				// Another request took its id while it waited.
				m := &jsonrpc.Message{ID: id, Method: jsonrpc.MethodToolsCall}
				return Decision{ToClient: s.reusedID(m, Call{Tool: held.tool, ArgsDigest: held.digest, Arguments: held.args, Policy: held.policy}).refusal}
			}
			return Decision{ToServer: raw}
		}
		code, why := PolicyApprovalUnavailable, "the approval request could not be delivered to the drift service"
		switch a.Outcome {
		case ApprovalDenied:
			code, why = PolicyApprovalDenied, "an admin denied it"
			if a.Actor != "" {
				why = a.Actor + " denied it"
			}
			if a.Reason != "" {
				why += ": " + a.Reason
			}
		case ApprovalTimeout:
			code, why = PolicyApprovalTimeout, "no admin approved it in time"
		}
		reason := denyReason(d)
		m := &jsonrpc.Message{ID: id}
		return Decision{ToClient: s.policyRefusal(m, &held, code, fmt.Sprintf("policy deny: %s; the call needed an admin's approval and %s", reason, why)).refusal}
	}}
}
