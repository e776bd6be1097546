package session

import (
	"context"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// approver resolves every held call with one outcome, and keeps the
// requests.
type approver struct {
	outcome string
	asked   []ApprovalRequest
}

func (a *approver) Await(_ context.Context, req ApprovalRequest) Approval {
	a.asked = append(a.asked, req)
	return Approval{ID: "0123", Outcome: a.outcome, Actor: "alice"}
}

// policyRig is a rig whose session enforces doc (tenant "default"), with
// the server's risk mode risk.
func policyRig(t *testing.T, doc string, risk string, ap Approvals) *rig {
	t.Helper()
	set := compileDefault(t, doc)
	r := newRig(t)
	r.newSession(Config{Server: "fs", Policy: sessiontest.Policy[Code]{Set: set}, Approvals: ap}, r.gate)
	r.gate.v, r.gate.ok = baseline(readTool, writeTool), true
	r.gate.v.RiskMode = risk
	return r
}

// compileDefault parses and compiles doc as tenant "default"'s policy.
func compileDefault(t *testing.T, doc string) *policy.Set {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile("default", d)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

const holdDoc = `rules:
  - {id: hold, tenant: default, tool: write, action: pending_approval, reason: writes need a human}
  - {id: clause, tenant: default, tool: read, args: [{path: $.path, op: contains, value: x}], action: allow}
`

// TestPolicyCodes: what the engine decides itself carries its own code
// (a risk mode, arguments no clause can read); a held call is forwarded
// once approved and refused with the approval's code otherwise; a held
// call inside a batch is refused.
func TestPolicyCodes(t *testing.T) {
	ctx := context.Background()
	call := func(r *rig, id, tool, args string) Decision {
		return clientOf(ctx, r.s, []byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"`+tool+`","arguments":`+args+`}}`))
	}
	refusedWith := func(t *testing.T, o Decision, code Code) {
		t.Helper()
		if o.ToServer != nil || !strings.Contains(string(o.ToClient), `"mcpdrift/code":"`+string(code)+`"`) || !strings.Contains(string(o.ToClient), `"text":"policy deny: `) {
			t.Errorf("want a refusal %s, got forward %s reply %s", code, o.ToServer, o.ToClient)
		}
	}
	t.Run("risk_block", func(t *testing.T) {
		r := policyRig(t, holdDoc, string(policy.ModeBlock), nil)
		refusedWith(t, call(r, "1", "read", `{"path":"/a"}`), PolicyRiskBlock)
	})
	t.Run("unreadable_arguments", func(t *testing.T) {
		r := policyRig(t, holdDoc, "", nil)
		refusedWith(t, call(r, "1", "read", `"not an object"`), PolicyUnreadableArguments)
	})
	t.Run("risk_quarantine_approved", func(t *testing.T) {
		ap := &approver{outcome: ApprovalApproved}
		r := policyRig(t, holdDoc, string(policy.ModeQuarantine), ap)
		o := call(r, "7", "read", `{"path":"/a"}`)
		if !o.Waits() {
			t.Fatalf("not held: %+v", o)
		}
		got := o.Wait(ctx)
		if !strings.Contains(string(got.ToServer), `"id":7`) || got.ToClient != nil || len(ap.asked) != 1 || ap.asked[0].RiskMode != "quarantine" {
			t.Fatalf("approved: %+v, asked %+v", got, ap.asked)
		}
		// The answer reaches the client, and the call's observation says how.
		r.server(`{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`)
		r.obs.mu.Lock()
		defer r.obs.mu.Unlock()
		if n := len(r.obs.calls); n != 1 || r.obs.calls[0].Policy.ApprovalOutcome != ApprovalApproved || r.obs.calls[0].Policy.Who != "alice" {
			t.Errorf("observed %+v", r.obs.calls)
		}
	})
	for _, c := range []struct {
		outcome string
		code    Code
	}{{ApprovalDenied, PolicyApprovalDenied}, {ApprovalTimeout, PolicyApprovalTimeout}, {ApprovalUnavailable, PolicyApprovalUnavailable}} {
		t.Run("held_"+c.outcome, func(t *testing.T) {
			r := policyRig(t, holdDoc, "", &approver{outcome: c.outcome})
			o := call(r, "8", "write", `{}`)
			if !o.Waits() {
				t.Fatalf("not held: %+v", o)
			}
			refusedWith(t, o.Wait(ctx), c.code)
		})
	}
	t.Run("held_in_batch", func(t *testing.T) {
		r := policyRig(t, holdDoc, "", &approver{outcome: ApprovalApproved})
		raw := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{}}},` +
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{"path":"/a"}}}]`
		o := clientOf(ctx, r.s, []byte(raw))
		if o.Waits() || !strings.Contains(string(o.ToClient), string(PolicyApprovalInBatch)) || !strings.Contains(string(o.ToServer), `"id":2`) || strings.Contains(string(o.ToServer), `"id":1`) {
			t.Errorf("batch: %+v", o)
		}
	})
	t.Run("quarantined_sanitize_stays_sanitized", func(t *testing.T) {
		ap := &approver{outcome: ApprovalApproved}
		r := policyRig(t, `rules:
  - {id: redact, tenant: default, tool: read, action: sanitize, redact: [$.token]}
`, string(policy.ModeQuarantine), ap)
		o := call(r, "9", "read", `{"path":"/a","token":"hunter2"}`)
		if !o.Waits() {
			t.Fatalf("not held: %+v", o)
		}
		got := o.Wait(ctx)
		if strings.Contains(string(got.ToServer), "hunter2") || !strings.Contains(string(got.ToServer), `"token":"`+policy.Redacted+`"`) ||
			len(ap.asked) != 1 || strings.Contains(string(ap.asked[0].Arguments), "hunter2") {
			t.Errorf("approved: forward %s, asked %s", got.ToServer, ap.asked[0].Arguments)
		}
	})
	t.Run("approved_after_quarantine", func(t *testing.T) {
		r := policyRig(t, holdDoc, "", &approver{outcome: ApprovalApproved})
		o := call(r, "10", "write", `{}`)
		if !o.Waits() {
			t.Fatalf("not held: %+v", o)
		}
		// An admin quarantines the server while the call waits for its
		// approval: the approval does not carry it there.
		r.gate.v.Status, r.gate.v.Serve = "quarantined", false
		got := o.Wait(ctx)
		if got.ToServer != nil || !strings.Contains(string(got.ToClient), `"mcpdrift/code":"`+string(RefuseServer("quarantined"))+`"`) {
			t.Errorf("approved after a quarantine: forward %s reply %s", got.ToServer, got.ToClient)
		}
	})
	t.Run("no_approvals", func(t *testing.T) {
		r := policyRig(t, holdDoc, "", nil)
		refusedWith(t, call(r, "1", "write", `{}`).Wait(ctx), PolicyApprovalUnavailable)
	})
}
