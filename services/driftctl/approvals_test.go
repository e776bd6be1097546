package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestPendingAndResolve: a held call asked for as a proxy asks is listed
// by driftctl pending, approved by driftctl resolve, and cannot be
// resolved twice.
func TestPendingAndResolve(t *testing.T) {
	r := startCLIRig(t)
	req := r.askHeld(t, "write_note", "hold-writes", `{"text":"hi"}`)
	out, errOut, code := r.cli("pending")
	if code != 0 || !strings.Contains(out, req.GetId()) || !strings.Contains(out, "write_note") || !strings.Contains(out, "hold-writes") {
		t.Fatalf("pending: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := r.cli("resolve", "--reason", "fine", req.GetId(), "approve"); code != 0 || !strings.Contains(out, `"state": "approved"`) {
		t.Fatalf("resolve: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := r.cli("resolve", req.GetId(), "deny"); code != 2 || !strings.Contains(errOut, "approval_resolved") {
		t.Fatalf("resolving twice: %d %s", code, errOut)
	}
	if out, _, _ := r.cli("pending"); strings.Contains(out, req.GetId()) {
		t.Errorf("pending still lists the approved call:\n%s", out)
	}
	if out, _, code := r.cli("pending", "--all", "--json"); code != 0 || !strings.Contains(out, `"actor": "`) || !strings.Contains(out, req.GetId()) {
		t.Errorf("pending --all --json: %s", out)
	}
	if _, errOut, code := r.cli("resolve", "nope", "approve"); code != 2 || !strings.Contains(errOut, "usage") {
		t.Errorf("a malformed id: %d %s", code, errOut)
	}
}

// askHeld asks for approval of a call of tool on acme/notes, held by rule
// with args, as a proxy asks (once the drift command answers), and returns
// the request.
func (r *cliRig) askHeld(t *testing.T, tool, rule, args string) *mcpdriftv1.ApprovalRequest {
	t.Helper()
	nc, _ := r.srv.Connect(t)
	now := time.Now()
	req := &mcpdriftv1.ApprovalRequest{Id: approval.NewID(), Tenant: "acme", Server: "notes", Proxy: "node-1", Tool: tool,
		Rule: rule, Arguments: []byte(args), RequestedAtUnixMs: now.UnixMilli(), ExpiresAtUnixMs: now.Add(time.Hour).UnixMilli()}
	data, err := approval.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error { // the drift command subscribes once it runs
		msg, err := nc.Request(approval.RequestSubject("acme", "notes"), data, time.Second)
		if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
			return fmt.Errorf("asking: %v", err)
		}
		return nil
	})
	return req
}
