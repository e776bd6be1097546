package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// TestPipelineGuardInvisible: through the real fingerprint and drift
// commands with the guard posture on, a new optional parameter is accepted
// on its own for a tool with plain text, and is drift for a tool whose
// description carries a zero-width space that its first (trusted) manifest
// already had.
func TestPipelineGuardInvisible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service commands")
	}
	p := startPipeline(t, "MCPDRIFT_GUARD=true")
	capture := func(desc string, opt bool) []byte {
		props := `"a":{"type":"number"}`
		if opt {
			props += `,"b":{"type":"number"}`
		}
		return fmt.Appendf(nil, `{"tools":{"pages":[{"tools":[{"name":"add","description":%q,"inputSchema":{"type":"object","properties":{%s},"required":["a"]}}]}]}}`, desc, props)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		server, desc, want, reason string
	}{
		{"plain", "Adds numbers.", "STATUS_VERIFIED", "auto_approved"},
		{"hidden", "Adds numbers.\u200b", "STATUS_CHANGED", ""},
	} {
		sub, err := p.nc.SubscribeSync(bus.VerdictSubject("acme", tc.server))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.nc.Flush(); err != nil { // the server has the subscription before anything is published
			t.Fatal(err)
		}
		for i, opt := range []bool{false, true} {
			id := fmt.Sprint(tc.server, "-", i)
			if _, err := bus.Publish(ctx, p.js, bus.ListObservationSubject("acme", tc.server), observation(t, "acme", tc.server, id, capture(tc.desc, opt)), id); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.NextMsg(20 * time.Second)
			if err != nil {
				t.Fatalf("%s: no verdict for observation %d: %v", tc.server, i, err)
			}
			var v map[string]any
			if err := json.Unmarshal(msg.Data, &v); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if v["status"] != "STATUS_VERIFIED" {
					t.Fatalf("%s: first sight under discovery: %v", tc.server, v)
				}
				continue
			}
			if v["status"] != tc.want || (tc.reason != "" && v["reason_code"] != tc.reason) || (tc.want == "STATUS_CHANGED" && v["benign"] == true) {
				t.Fatalf("%s: a new optional parameter under guard: %v, want %s %s", tc.server, v, tc.want, tc.reason)
			}
		}
	}
}
