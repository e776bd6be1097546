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

// TestPendingPrintsNoTerminalControls: the tool name of a held call is
// the agent's (a tools/call names any tool; a rule with tool "*" holds
// it), and an agent led by a hostile server can write terminal controls
// into it. driftctl pending prints it made visible: no escape sequence, no
// carriage return, no bidi control reaches the reviewer's terminal, where
// it could redraw the line as another, harmless-looking call whose id the
// reviewer then approves.
func TestPendingPrintsNoTerminalControls(t *testing.T) {
	r := startCLIRig(t)
	nc, _ := r.srv.Connect(t)
	now := time.Now()
	hostile := "delete_all\r\x1b[2K\x1b[1Aread_note\u202e\u009b2J\x07"
	req := &mcpdriftv1.ApprovalRequest{Id: approval.NewID(), Tenant: "acme", Server: "notes", Proxy: "node-1", Tool: hostile,
		Rule: "hold-all\x1b]0;pwned\x07", Arguments: []byte(`{"path":"/"}`), RequestedAtUnixMs: now.UnixMilli(), ExpiresAtUnixMs: now.Add(time.Hour).UnixMilli()}
	data, err := approval.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error {
		msg, err := nc.Request(approval.RequestSubject("acme", "notes"), data, time.Second)
		if err != nil || !strings.Contains(string(msg.Data), `"ok":true`) {
			return fmt.Errorf("asking: %v", err)
		}
		return nil
	})
	out, errOut, code := r.cli("pending")
	if code != 0 || !strings.Contains(out, req.GetId()) {
		t.Fatalf("pending: %d %s %s", code, out, errOut)
	}
	if strings.ContainsAny(out, "\x1b\r\x07\u202e\u009b") {
		t.Errorf("pending printed terminal controls: %q", out)
	}
	for _, want := range []string{"delete_all", "read_note"} {
		if !strings.Contains(out, want) {
			t.Errorf("pending does not show %q of the tool's name: %q", want, out)
		}
	}
}
