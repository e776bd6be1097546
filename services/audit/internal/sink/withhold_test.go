package sink

import (
	"time"

	"testing"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestStoresWithholdChanged: a verdict under on_drift withhold_changed
// (changed, and served: its unchanged items) is stored with its action on
// drift as it came.
func TestStoresWithholdChanged(t *testing.T) {
	e := newEnv(t, chtest.Shared(t), Config{BatchAge: 20 * time.Millisecond})
	v, err := bus.MarshalJSON(&mcpdriftv1.Verdict{EventId: "vw1", Tenant: "acme", Server: "fs", Variant: "default",
		Status: mcpdriftv1.Status_STATUS_CHANGED, PreviousStatus: mcpdriftv1.Status_STATUS_VERIFIED, Serve: true,
		Posture: "discovery", OnDrift: "withhold_changed", BaselineVersion: 1, Severity: "high", ReasonCode: "drift",
		Actor: "system", AtUnixMs: 1_760_000_001_000})
	if err != nil {
		t.Fatal(err)
	}
	e.publish(bus.VerdictSubject("acme", "fs"), v, "vw1")
	poll.Eventually(t, wait, e.allSettled)
	q := "SELECT count() FROM DB.verdicts FINAL WHERE event_id = 'vw1' AND status = 'changed' AND serve = 1 AND on_drift = 'withhold_changed'"
	if got := e.count(q); got != 1 {
		t.Fatalf("%s = %d, want 1", q, got)
	}
}
