package console

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

var tlsState tls.ConnectionState

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// syntheticFleet is n servers over 10 tenants, two variants each, in every
// status.
func syntheticFleet(n int) []status.View {
	sts := []status.Status{status.Verified, status.Verified, status.Verified, status.Changed, status.Pending, status.Quarantined, status.Unknown}
	out := make([]status.View, n)
	for i := range out {
		st := sts[i%len(sts)]
		v := status.View{Tenant: fmt.Sprintf("t%d", i%10), Server: fmt.Sprintf("server-%05d", i)}
		for _, name := range []string{"v0", "c1"} {
			rec := status.Record{Tenant: v.Tenant, Server: v.Server, Variant: name, Status: st, BaselineVersion: int64(1 + i%4),
				BaselineHash: "sha256:" + fmt.Sprintf("%064x", i), LiveHash: "sha256:" + fmt.Sprintf("%064x", i+1), UpdatedAtMs: 1_700_000_000_000}
			if st == status.Changed {
				rec.DriftAtMs, rec.Severity = 1_700_000_000_000+int64(i), "high"
			}
			v.Variants = append(v.Variants, rec)
		}
		out[i] = v
	}
	return out
}

// listBackend serves a fixed fleet; only List is used.
type listBackend struct {
	admin.Backend
	views []status.View
}

func (b listBackend) List(context.Context) ([]state.View, error) { return b.views, nil }

func fleetConsole(t testing.TB, n int) *Console {
	t.Helper()
	tokens, _ := admin.ParseTokens("reader:read:" + readSecret)
	c, err := New(Config{Tokens: tokens}, Deps{Backend: listBackend{views: syntheticFleet(n)}, API: http.NotFoundHandler(),
		Manifest: func(context.Context, string) (*surface.Surface, error) { return nil, fmt.Errorf("none") }, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fleetRequest(c *Console, query string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/"+query, nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec
}

// TestFleetTenThousand reports the time to answer the fleet page of 10,000
// servers (the console's work: summarise, count, filter, paginate, draw;
// the backend's List is in memory here), and fails above one second.
func TestFleetTenThousand(t *testing.T) {
	c := fleetConsole(t, 10000)
	for _, q := range []string{"", "?status=changed", "?tenant=t3&page=2"} {
		fleetRequest(c, q) // warm
		const runs = 5
		start := time.Now()
		var size int
		for range runs {
			rec := fleetRequest(c, q)
			if rec.Code != http.StatusOK {
				t.Fatalf("%d: %s", rec.Code, rec.Body)
			}
			size = rec.Body.Len()
		}
		per := time.Since(start) / runs
		t.Logf("fleet page of 10,000 servers%s: %v per page (%d bytes)", q, per.Round(time.Microsecond), size)
		if per > time.Second {
			t.Errorf("the fleet page of 10,000 servers took %v, want < 1s", per)
		}
	}
}

// BenchmarkFleetPage: the fleet page at 10,000 servers against the same
// page at 100 (the baseline, measured in the same run).
func BenchmarkFleetPage(b *testing.B) {
	for _, n := range []int{100, 10000} {
		c := fleetConsole(b, n)
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			for b.Loop() {
				if rec := fleetRequest(c, ""); rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
