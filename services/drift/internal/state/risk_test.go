package state

import (
	"errors"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// TestRatchet: a re-scan only tightens band and mode; a surface already
// rated changes nothing (so an admin's setting stands); an admin relaxes.
func TestRatchet(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	srv, write := Ratchet(nil, "acme", "fs", "sha256:a", policy.BandHigh, policy.ModeQuarantine, []string{"high: tool rm"}, now)
	if !write || srv.Risk.Band != "high" || srv.Risk.Mode != "quarantine" || srv.Risk.SetBy != ActorRisk {
		t.Fatalf("first rating: %v %+v", write, srv.Risk)
	}
	next, write := Ratchet(&srv, "acme", "fs", "sha256:b", policy.BandLow, policy.ModeAllow, []string{"low"}, now)
	if !write || next.Risk.Band != "high" || next.Risk.Mode != "quarantine" || next.Risk.Reasons[0] != "high: tool rm" || len(next.Risk.Surfaces) != 2 {
		t.Fatalf("a safer surface relaxed: %+v", next.Risk)
	}
	next2, write := Ratchet(&next, "acme", "fs", "sha256:c", policy.BandMedium, policy.ModeBlock, nil, now)
	if !write || next2.Risk.Band != "high" || next2.Risk.Mode != "block" {
		t.Fatalf("mode not tightened on its own: %+v", next2.Risk)
	}
	relaxed, err := SetRisk(&next2, "acme", "fs", policy.BandLow, policy.ModeAllow, "alice", "reviewed", now)
	if err != nil || relaxed.Risk.Band != "low" || relaxed.Risk.Mode != "allow" || relaxed.Risk.SetBy != "alice" || len(relaxed.Risk.Surfaces) != 3 {
		t.Fatalf("admin relax: %v %+v", err, relaxed.Risk)
	}
	if _, write := Ratchet(&relaxed, "acme", "fs", "sha256:a", policy.BandHigh, policy.ModeQuarantine, nil, now); write {
		t.Fatal("a re-scan of a surface already rated undid the admin's relax")
	}
	if _, err := SetRisk(&relaxed, "acme", "fs", "severe", policy.ModeAllow, "alice", "", now); !errors.Is(err, ErrInvalidRisk) {
		t.Fatalf("an unknown band: %v", err)
	}
	// A band or mode this build does not know ranks above every other: a
	// re-scan never lowers it.
	odd := relaxed
	odd.Risk = &status.Risk{Band: "extreme", Mode: "lockdown"}
	if got, _ := Ratchet(&odd, "acme", "fs", "sha256:z", policy.BandCritical, policy.ModeBlock, nil, now); got.Risk.Band != "extreme" || got.Risk.Mode != "lockdown" {
		t.Fatalf("an unknown band was lowered: %+v", got.Risk)
	}
}

// TestPolicyAtNextObservation: posture, on_drift and guard the policy
// resolves apply to an existing record with its next observation (also on
// the hot path, where nothing else changes); hashing settings do not: the
// record names them in PolicyWants, and only Rebaseline applies them.
func TestPolicyAtNextObservation(t *testing.T) {
	r, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	alert := Policy{Posture: Discovery, OnDrift: Alert}
	o := obs("2", "sha256:a", 2)
	o.Policy = &alert
	r2, out := apply(t, r, o, discover)
	if !out.Write || r2.Policy.OnDrift != Alert || r2.PolicyWants != nil {
		t.Fatalf("on_drift alert not applied: %v %+v", out.Write, r2.Policy)
	}
	// The same again writes nothing.
	o = obs("3", "sha256:a", 3)
	o.Policy = &alert
	if _, out := apply(t, r2, o, discover); out.Write {
		t.Fatal("an unchanged policy wrote the record")
	}
	// A hashing change waits.
	wants := alert.WithHashing(Hashing{Hash: "sha512", Annotations: true})
	o = obs("4", "sha256:a", 4)
	o.Policy, o.WantsLiveHash = &wants, "sha512:a"
	r3, out := apply(t, r2, o, discover)
	if !out.Write || r3.Policy.Hashing() != (Hashing{Hash: "sha256", Annotations: true}) || r3.PolicyWants == nil ||
		r3.PolicyWants.Hash != "sha512" || r3.PolicyWantsLiveHash != "sha512:a" || r3.Status != Verified {
		t.Fatalf("hashing change: %+v", r3)
	}
	// Rebaseline: the named hash must be the wanted live hash.
	if _, err := Rebaseline(r3, "sha512:b", "alice", &Items{Surface: "sha512:b"}, t0); !errors.Is(err, ErrStaleHash) {
		t.Fatalf("a stale rebaseline: %v", err)
	}
	rb, err := Rebaseline(r3, "sha512:a", "alice", &Items{Surface: "sha512:a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if g := rb.Record; g.Policy.Hashing().Hash != "sha512" || g.PolicyWants != nil || g.BaselineHash != "sha512:a" || g.LiveHash != "sha512:a" ||
		g.BaselineVersion != 2 || rb.NewBaseline == nil || rb.NewBaseline.Reason != ReasonRebaselined || !g.Serve() {
		t.Fatalf("rebaselined: %+v", g)
	}
	if _, err := Rebaseline(&rb.Record, "sha512:a", "alice", nil, t0); !errors.Is(err, ErrNothingToRebaseline) {
		t.Fatalf("nothing to rebaseline: %v", err)
	}
	// A drifted variant is not re-baselined.
	o = obs("5", "sha256:b", 5)
	o.Policy, o.WantsLiveHash = &wants, "sha512:b"
	r4, _ := apply(t, r3, o, discover)
	if _, err := Rebaseline(r4, "sha512:b", "alice", &Items{Surface: "sha512:b"}, t0); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("a changed variant re-baselined: %v (%s)", err, r4.Status)
	}
}

// TestTighten: a policy mapping the server's band to a stricter mode
// tightens it; a looser or equal one, or a server never rated, changes
// nothing.
func TestTighten(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	srv, _ := Ratchet(nil, "acme", "fs", "sha256:a", policy.BandHigh, policy.ModeAllow, []string{"high: tool rm"}, now)
	for _, m := range []policy.Mode{policy.ModeAllow} {
		if _, write := Tighten(&srv, m, now); write {
			t.Fatalf("mode %s (not stricter than allow) wrote", m)
		}
	}
	tight, write := Tighten(&srv, policy.ModeQuarantine, now.Add(time.Second))
	if !write || tight.Risk.Mode != "quarantine" || tight.Risk.Band != "high" || tight.Risk.SetBy != ActorPolicy ||
		len(tight.Risk.Surfaces) != 1 || tight.Risk.Reasons[len(tight.Risk.Reasons)-1] != "the policy maps band high to quarantine" {
		t.Fatalf("tighten to quarantine: %v %+v", write, tight.Risk)
	}
	if srv.Risk.Mode != "allow" || len(srv.Risk.Reasons) != 1 {
		t.Fatalf("Tighten changed its argument: %+v", srv.Risk)
	}
	if _, write := Tighten(&tight, policy.ModeAllow, now); write {
		t.Fatal("a looser mode relaxed the server")
	}
	if _, write := Tighten(&Server{Tenant: "acme", Server: "fs"}, policy.ModeBlock, now); write {
		t.Fatal("a server never rated was given a mode")
	}
	if _, write := Tighten(nil, policy.ModeBlock, now); write {
		t.Fatal("no server record: wrote one")
	}
	// An admin's setting stands.
	relaxed, err := SetRisk(&tight, "acme", "fs", policy.BandHigh, policy.ModeAllow, "alice", "reviewed", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, write := Tighten(&relaxed, policy.ModeBlock, now); write {
		t.Fatal("a policy sweep undid an admin's risk set")
	}
	// Tightened by the policy once, tightened by it again.
	if again, write := Tighten(&tight, policy.ModeBlock, now); !write || again.Risk.Mode != "block" {
		t.Fatalf("a second tightening: %v %+v", write, again.Risk)
	}
}
