package driftsvc

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// TestFirstSightRisk: a first manifest's risk lands on the server record,
// rated once. Under discovery the claim of the server's first sight carries
// it (one write of the server record); under strict, no claim is made and
// the risk is written on its own. Either way the band is the one
// surface.Rate gives the manifest and the surface is counted as rated.
func TestFirstSightRisk(t *testing.T) {
	raw, err := os.ReadFile(fixA)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{Form: surface.FormLatest})
	if err != nil {
		t.Fatal(err)
	}
	wantBand, _ := surface.Rate(sf)
	for _, tc := range []struct {
		name         string
		posture      string
		serverWrites int64 // writes of the server record
	}{
		{"discovery", state.Discovery, 1},
		{"strict", state.Strict, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.manifest(fixA)
			svc, _ := e.start(Config{Policy: state.Policy{Posture: tc.posture, OnDrift: state.Block}})
			e.publish("s1", "o1", a, "", time.Now(), "")
			poll.Eventually(t, wait, e.consumerDone)
			srv, _, err := svc.getServer(context.Background(), "acme", "s1")
			if err != nil {
				t.Fatal(err)
			}
			if srv == nil || srv.Risk == nil {
				t.Fatalf("server record %+v: want its risk", srv)
			}
			if srv.Risk.Band != wantBand.String() || !slices.Contains(srv.Risk.Surfaces, a) {
				t.Fatalf("risk %+v: want band %s with surface %s rated", srv.Risk, wantBand, a)
			}
			if tc.posture == state.Discovery && srv.FirstVariant != "v0" {
				t.Fatalf("server record %+v: want the claim of v0", srv)
			}
			hist, err := e.h.Status.History(context.Background(), "acme.s1")
			if err != nil || int64(len(hist)) != tc.serverWrites {
				t.Fatalf("server record written %d times (%v), want %d", len(hist), err, tc.serverWrites)
			}
		})
	}
}

// TestFirstSightRiskFromFingerprint: a fingerprint that carries its
// surface's risk (the fingerprint service rates it from its own parse) puts
// that risk on the claim as it is; one with a band that is not one gets the
// manifest rated here instead.
func TestFirstSightRiskFromFingerprint(t *testing.T) {
	raw, err := os.ReadFile(fixA)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{Form: surface.FormLatest})
	if err != nil {
		t.Fatal(err)
	}
	rated, _ := surface.Rate(sf)
	for _, tc := range []struct {
		name, band, want string
	}{
		{"carried", "critical", "critical"},
		{"not_a_band", "dire", rated.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.manifest(fixA)
			svc, _ := e.start(Config{})
			fp := &mcpdriftv1.Fingerprint{CanonicalForm: surface.FormLatest.String(), EventId: "o1", Tenant: "acme", Server: "s1", Variant: "v0", Proxy: "p1",
				ObservedAtUnixMs: time.Now().UnixMilli(), SurfaceHash: a, Items: e.itemsOf(a),
				Risk: &mcpdriftv1.SurfaceRisk{Band: tc.band, Reasons: []string{"carried by the fingerprint"}}}
			data, err := proto.Marshal(fp)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bus.Publish(context.Background(), e.js, bus.FingerprintSubject("acme", "s1"), data, fp.EventId); err != nil {
				t.Fatal(err)
			}
			poll.Eventually(t, wait, e.consumerDone)
			srv, _, err := svc.getServer(context.Background(), "acme", "s1")
			if err != nil {
				t.Fatal(err)
			}
			if srv == nil || srv.Risk == nil || srv.Risk.Band != tc.want || !slices.Contains(srv.Risk.Surfaces, a) {
				t.Fatalf("server record %+v: want band %s with %s rated", srv, tc.want, a)
			}
		})
	}
}
