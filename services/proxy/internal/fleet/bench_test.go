package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// BenchmarkGateView is the decision of a verified server from memory, the
// hot path of every call: with a deadline made for each View (as the
// session once did) and with the deadline made only when View has to wait,
// in the same run.
func BenchmarkGateView(b *testing.B) {
	bs := natstest.StartBus(b)
	ctx := context.Background()
	_, sf := fixture(b, "memory/2025.9.25.json")
	if _, err := bs.Handles.Status.Put(ctx, bus.StatusKey(tenant, "bench", "default"), recordJSON("verified", "block", sf)); err != nil {
		b.Fatal(err)
	}
	g, w := watchedGate(b, bs.JS, tenant, "bench")
	runInBackground(b, w.Run)
	if v, ok := g.View(ctx, "default", true, 10*time.Second); !ok || !v.Serve {
		b.Fatalf("not served: %+v", v)
	}
	b.Run("deadline=every_view", func(b *testing.B) {
		for b.Loop() {
			vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if v, ok := g.View(vctx, "default", true, 0); !ok || !v.Serve {
				b.Fatal("not served")
			}
			cancel()
		}
	})
	b.Run("deadline=when_waiting", func(b *testing.B) {
		for b.Loop() {
			if v, ok := g.View(ctx, "default", true, 2*time.Second); !ok || !v.Serve {
				b.Fatal("not served")
			}
		}
	})
}
