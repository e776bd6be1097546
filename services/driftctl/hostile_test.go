package main

import (
	"strings"
	"testing"
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
	hostile := "delete_all\r\x1b[2K\x1b[1Aread_note\u202e\u009b2J\x07"
	req := r.askHeld(t, hostile, "hold-all\x1b]0;pwned\x07", `{"path":"/"}`)
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
