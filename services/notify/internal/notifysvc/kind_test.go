package notifysvc

import (
	"encoding/json"
	"testing"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// TestVerdictKinds: which kind of event each verdict is, by its status and
// reason code (a per-item approve is an approval, whole or not).
func TestVerdictKinds(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		status       mcpdriftv1.Status
		want         string
	}{
		{"drift", "drift", mcpdriftv1.Status_STATUS_CHANGED, KindVerdict},
		{"approved", "approved", mcpdriftv1.Status_STATUS_VERIFIED, KindApproval},
		{"auto_approved", "auto_approved", mcpdriftv1.Status_STATUS_VERIFIED, KindApproval},
		{"approved_items_whole", "approved_items", mcpdriftv1.Status_STATUS_VERIFIED, KindApproval},
		{"approved_items_partial", "approved_items", mcpdriftv1.Status_STATUS_CHANGED, KindApproval},
		{"quarantined", "approved", mcpdriftv1.Status_STATUS_QUARANTINED, KindQuarantine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := verdict("acme", "files", 1, tc.status, "low")
			v.ReasonCode = tc.reason
			data, err := bus.MarshalJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := decodeVerdict(bus.VerdictSubject(v.Tenant, v.Server), data)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != tc.want {
				t.Errorf("kind %q, want %q", ev.Kind, tc.want)
			}
			if !json.Valid(ev.Data) {
				t.Error("event data is not JSON")
			}
		})
	}
}
