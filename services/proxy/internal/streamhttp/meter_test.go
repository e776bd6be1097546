package streamhttp

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// TestMonitorMeterCountsDropsOnly: a monitor's session withholds nothing
// from a client (it has none), but what its server sends that the proxy
// cannot judge is counted.
func TestMonitorMeterCountsDropsOnly(t *testing.T) {
	next := &sessiontest.Meter[session.Code]{}
	m := dropsOnly{next}
	m.Withheld(surface.KindTool, 3)
	m.Dropped(session.DropUnreadable)
	if next.WithheldOf(0) != 0 || next.AllDrops() != 1 {
		t.Fatalf("withheld %d, dropped %d; want 0 and 1", next.WithheldOf(0), next.AllDrops())
	}
}
