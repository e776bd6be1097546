package driftsvc

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// fleetGauges gathers the status counts: the variants by status, and
// "held" for the held servers. Nil when nothing is exported.
func fleetGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]float64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if got == nil {
				got = map[string]float64{}
			}
			switch f.GetName() {
			case "mcpdrift_drift_variants":
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			case "mcpdrift_drift_servers_held":
				got["held"] = m.GetGauge().GetValue()
			default:
				t.Fatalf("unexpected metric %s", f.GetName())
			}
		}
	}
	return got
}

// TestStatusCounts: the fleet gauges follow the status bucket, records
// written before the counts start and after, by any writer, deletes
// included; nothing is exported before every record is loaded.
func TestStatusCounts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	put := func(key, value string) {
		t.Helper()
		if _, err := e.h.Status.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(st string) string { return fmt.Sprintf(`{"tenant":"acme","status":%q}`, st) }
	put("acme.fs.default", rec("verified"))
	put("acme.web.default", rec("changed"))
	put("acme.web.v2", rec("quarantined"))
	put("acme.web", `{"held":true}`)
	put("acme.git", `{"held":false}`)
	put("acme.bad.default", `not json`)

	c, err := NewStatusCounts(e.h.Status, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if got := fleetGauges(t, reg); got != nil {
		t.Fatalf("exported before the watch loaded the bucket: %v", got)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wait := func(step string, want map[string]float64) {
		t.Helper()
		poll.Eventually(t, 10*time.Second, func() error {
			if got := fleetGauges(t, reg); !maps.Equal(got, want) {
				return fmt.Errorf("%s: gauges %v, want %v", step, got, want)
			}
			return nil
		})
	}
	wait("loaded", map[string]float64{"unknown": 1, "verified": 1, "changed": 1, "pending": 0, "quarantined": 1, "held": 1})

	put("acme.web.default", rec("verified"))
	if err := e.h.Status.Delete(ctx, "acme.web.v2"); err != nil {
		t.Fatal(err)
	}
	put("acme.web", `{"held":false,"released_by":"alice"}`)
	put("acme.new.default", rec("pending"))
	put("acme.git", `{"held":true}`)
	wait("updated", map[string]float64{"unknown": 1, "verified": 2, "changed": 0, "pending": 1, "quarantined": 0, "held": 1})
}
