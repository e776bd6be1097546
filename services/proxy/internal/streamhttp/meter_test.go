package streamhttp

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

type tallyMeter struct{ withheld, dropped int }

func (m *tallyMeter) Withheld(_ surface.Kind, n int) { m.withheld += n }
func (m *tallyMeter) Dropped(string)                 { m.dropped++ }

// TestMonitorMeterCountsDropsOnly: a monitor's session withholds nothing
// from a client (it has none), but what its server sends that the proxy
// cannot judge is counted.
func TestMonitorMeterCountsDropsOnly(t *testing.T) {
	next := &tallyMeter{}
	m := dropsOnly{next}
	m.Withheld(surface.KindTool, 3)
	m.Dropped("upstream_unreadable")
	if next.withheld != 0 || next.dropped != 1 {
		t.Fatalf("withheld %d, dropped %d; want 0 and 1", next.withheld, next.dropped)
	}
}
