package session

import (
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// alerting is v under the alert posture.
func alerting(v View, status string) View {
	v.Status, v.Alert = status, true
	v.Serve = status == "verified" || status == "changed"
	return v
}

// Under the alert posture a served server is served whole: a drifted
// listing passes unfiltered, and calls are forwarded with the code they
// would have been refused with under block.
func TestAlertServesDrift(t *testing.T) {
	for _, status := range []string{"verified", "changed"} {
		t.Run(status, func(t *testing.T) {
			r := newRig(t)
			r.gate.v, r.gate.ok = alerting(baseline(readTool), status), true
			r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			resp := `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + evilRead + `,` + writeTool + `]}}`
			r.server(resp)
			if r.lastClient() != resp {
				t.Fatalf("a drifted listing under alert was rewritten:\n%s", r.lastClient())
			}
			r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read"}}`)
			r.client(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"write"}}`)
			if len(r.toServer) != 3 {
				t.Fatalf("calls under alert were not forwarded: %v (client got %v)", r.toServer, r.toClient)
			}
			r.server(`{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
			r.server(`{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`)
			if len(r.obs.calls) != 2 {
				t.Fatalf("calls observed: %+v", r.obs.calls)
			}
			for _, c := range r.obs.calls {
				if c.Refused || c.AlertCode != "server_changed" {
					t.Fatalf("call %+v: want forwarded with alert code server_changed", c)
				}
			}
		})
	}
}

// A tool outside the baseline of a server whose listing matches it (a
// call before any listing, here) is forwarded under alert, reported as
// tool_not_approved; an approved tool carries no alert code.
func TestAlertToolNotApproved(t *testing.T) {
	r := newRig(t)
	r.gate.v, r.gate.ok = alerting(baseline(readTool), "verified"), true
	r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write"}}`)
	r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read"}}`)
	r.server(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	r.server(`{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
	if len(r.toServer) != 2 || len(r.obs.calls) != 2 {
		t.Fatalf("forwarded %v, observed %+v", r.toServer, r.obs.calls)
	}
	if c := r.obs.calls[0]; c.Tool != "write" || c.AlertCode != "tool_not_approved" {
		t.Fatalf("unapproved tool: %+v", c)
	}
	if c := r.obs.calls[1]; c.Tool != "read" || c.AlertCode != "" {
		t.Fatalf("approved tool: %+v", c)
	}
}

// Under block the same drift is withheld and refused (as before), and no
// call carries an alert code.
func TestBlockUnchanged(t *testing.T) {
	r := newRig(t)
	r.gate.v, r.gate.ok = baseline(readTool), true
	r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.server(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + evilRead + `,` + writeTool + `]}}`)
	if got := names(t, r.lastClient()); len(got) != 0 {
		t.Fatalf("served %v under block", got)
	}
	r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read"}}`)
	if !strings.Contains(r.lastClient(), "server_changed") || len(r.toServer) != 1 {
		t.Fatalf("refusal: %s (forwarded %v)", r.lastClient(), r.toServer)
	}
	if len(r.obs.calls) != 1 || !r.obs.calls[0].Refused || r.obs.calls[0].AlertCode != "" {
		t.Fatalf("calls: %+v", r.obs.calls)
	}
}

// The alert posture serves nothing that its status does not: pending,
// quarantined and unknown servers stay withheld.
func TestAlertWithholdsUnservedStatus(t *testing.T) {
	for _, status := range []string{"pending", "quarantined", "unknown"} {
		t.Run(status, func(t *testing.T) {
			r := newRig(t)
			r.gate.v, r.gate.ok = alerting(baseline(readTool), status), true
			r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			r.server(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]}}`)
			if got := names(t, r.lastClient()); len(got) != 0 {
				t.Fatalf("served %v", got)
			}
			r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read"}}`)
			if !strings.Contains(r.lastClient(), "server_"+status) || len(r.toServer) != 1 {
				t.Fatalf("refusal: %s (forwarded %v)", r.lastClient(), r.toServer)
			}
		})
	}
}

// A listing that cannot be assembled stays fail-closed under alert: a page
// naming a tool twice serves nothing, and an endless listing makes calls
// listing_invalid.
func TestAlertInvalidListingFailsClosed(t *testing.T) {
	t.Run("duplicates", func(t *testing.T) {
		r := newRig(t)
		r.gate.v, r.gate.ok = alerting(baseline(readTool), "changed"), true
		r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		r.server(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `,` + readTool + `]}}`)
		if got := names(t, r.lastClient()); len(got) != 0 {
			t.Fatalf("a page with duplicate tools served %v", got)
		}
	})
	t.Run("endless", func(t *testing.T) {
		r := newRig(t)
		r.s.cfg.MaxPages = 3
		r.gate.v, r.gate.ok = alerting(baseline(readTool), "changed"), true
		for n := 1; n <= 3; n++ {
			id := string(rune('0' + n))
			cursor := ""
			if n > 1 {
				cursor = `,"params":{"cursor":"c` + id + `"}`
			}
			r.client(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"` + cursor + `}`)
			r.server(`{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[{"name":"t` + id + `","inputSchema":{"type":"object"}}],"nextCursor":"c` + string(rune('1'+n)) + `"}}`)
		}
		if got := names(t, r.lastClient()); len(got) != 0 {
			t.Fatalf("the page past the limit served %v", got)
		}
		r.client(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t1"}}`)
		if !strings.Contains(r.lastClient(), "listing_invalid") {
			t.Fatalf("a call after an endless listing: %s", r.lastClient())
		}
	})
}

// Unapproved instructions pass under alert on a served server.
func TestAlertServesInstructions(t *testing.T) {
	r := newRig(t)
	r.gate.v, r.gate.ok = alerting(baseline(readTool), "changed"), true
	r.client(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`)
	resp := `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"x","version":"1"},"instructions":"new words"}}`
	r.server(resp)
	if r.lastClient() != resp {
		t.Fatalf("instructions under alert: %s", r.lastClient())
	}
}

// TestAlertWithdrawnByLivePolicy: a record under alert whose tenant's live
// policy now says block (the drift service has not rewritten the record
// yet) is judged as under block: its drifted listing is withheld and no
// call goes through on the alert posture. A policy that names no action
// on drift, or alert, leaves the record's posture.
func TestAlertWithdrawnByLivePolicy(t *testing.T) {
	for _, tt := range []struct {
		name, status, doc string
		served            bool
	}{
		{"changed_block", "changed", "drift: [{tenant: default, on_drift: block}]", false},
		{"verified_block", "verified", "drift: [{tenant: default, server: fs, on_drift: block}]", false},
		{"changed_other_server_block", "changed", "drift: [{tenant: default, server: other, on_drift: block}]", true},
		{"changed_alert", "changed", "drift: [{tenant: default, on_drift: alert}]", true},
		{"changed_no_setting", "changed", "rules: []", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.newSession(Config{Server: "fs", Policy: sessiontest.Policy[Code]{Set: compileDefault(t, tt.doc)}}, r.gate)
			r.gate.v, r.gate.ok = alerting(baseline(readTool), tt.status), true
			r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
			resp := `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + evilRead + `,` + writeTool + `]}}`
			r.server(resp)
			if got := r.lastClient() == resp; got != tt.served {
				t.Fatalf("drifted listing passed whole: %v, want %v\n%s", got, tt.served, r.lastClient())
			}
			r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write"}}`)
			if forwarded := len(r.toServer) == 2; forwarded != tt.served {
				t.Fatalf("a call to a tool outside the baseline forwarded: %v, want %v (client got %v)", forwarded, tt.served, r.toClient)
			}
		})
	}
}
