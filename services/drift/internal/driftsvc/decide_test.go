package driftsvc

import (
	"errors"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
)

// TestDecide runs the decision on one fingerprint over gathered inputs,
// without a bus: every branch of a first sight and of a known record that
// the service's gather and commit steps surround.
func TestDecide(t *testing.T) {
	const (
		base = "sha256:base"
		live = "sha256:live"
	)
	now := time.UnixMilli(1_750_000_100_000)
	discovery := state.Policy{Posture: state.Discovery, OnDrift: state.Block}
	strict := state.Policy{Posture: state.Strict, OnDrift: state.Block}
	guarded := state.Policy{Posture: state.Discovery, OnDrift: state.Block, Guard: true}
	fp := func(id, hash, errCode string) *mcpdriftv1.Fingerprint {
		return &mcpdriftv1.Fingerprint{EventId: id, Tenant: "acme", Server: "mem", Variant: "v1",
			SurfaceHash: hash, ErrorCode: errCode, ObservedAtUnixMs: now.UnixMilli() - 1000}
	}
	verified := func(pol state.Policy, applied ...string) *state.Record {
		return &state.Record{Tenant: "acme", Server: "mem", Variant: "v1", Status: state.Verified, Policy: pol,
			BaselineVersion: 1, BaselineHash: base, LiveHash: base, LiveObservedMs: now.UnixMilli() - 5000, Applied: applied}
	}
	changed := &state.Record{Tenant: "acme", Server: "mem", Variant: "v1", Status: state.Changed, Policy: discovery,
		BaselineVersion: 1, BaselineHash: base, LiveHash: live, LiveObservedMs: now.UnixMilli() - 5000, Reason: state.ReasonDrift}
	claimedBy := func(variant string, at time.Time) *state.Server {
		return &state.Server{Tenant: "acme", Server: "mem", FirstVariant: variant, FirstAtMs: at.UnixMilli()}
	}
	approvedElsewhere := state.Comparison{Approved: true, ReferenceVariant: "v0", ReferenceHash: base, Severity: "none"}

	type want struct {
		write     bool
		status    state.Status
		reason    string
		baseline  int64 // the new baseline version kept; 0 for none
		claim     bool  // the server record is written first (create when claimCreate)
		create    bool
		redeliver bool
		needs     string // the assessment decide asks for
		err       error
	}
	for _, tc := range []struct {
		name string
		in   inputs
		want want
	}{
		{
			name: "first_sight_discovery_trusts_and_claims",
			in:   inputs{fp: fp("e1", live, ""), want: discovery, first: &firstSight{}},
			want: want{write: true, status: state.Verified, reason: state.ReasonFirstBaseline, baseline: 1, claim: true, create: true},
		},
		{
			name: "first_sight_claimed_already_by_this_variant",
			in:   inputs{fp: fp("e1", live, ""), want: discovery, first: &firstSight{srv: claimedBy("v1", now), srvRev: 7}},
			want: want{write: true, status: state.Verified, reason: state.ReasonFirstBaseline, baseline: 1},
		},
		{
			name: "first_sight_strict_is_pending_without_a_claim",
			in:   inputs{fp: fp("e1", live, ""), want: strict, first: &firstSight{}},
			want: want{write: true, status: state.Pending, reason: state.ReasonPendingApproval},
		},
		{
			name: "first_sight_of_a_held_server_is_quarantined",
			in:   inputs{fp: fp("e1", live, ""), want: discovery, first: &firstSight{srv: &state.Server{Held: true}}},
			want: want{write: true, status: state.Quarantined, reason: state.ReasonQuarantined},
		},
		{
			name: "first_sight_unfingerprintable_is_pending",
			in:   inputs{fp: fp("e1", "", "duplicate_tool"), want: discovery, first: &firstSight{}},
			want: want{write: true, status: state.Pending, reason: state.ReasonUnfingerprintable},
		},
		{
			name: "first_sight_matching_an_approved_variant_is_verified",
			in:   inputs{fp: fp("e1", live, ""), want: discovery, first: &firstSight{cmp: approvedElsewhere}},
			want: want{write: true, status: state.Verified, reason: state.ReasonVariantMatched, baseline: 1},
		},
		{
			name: "first_sight_unmatched_is_changed",
			in: inputs{fp: fp("e1", live, ""), want: discovery, first: &firstSight{cmp: state.Comparison{
				Approved: true, Unmatched: []string{"tool write"}, ReferenceVariant: "v0", ReferenceHash: base, Severity: "high"}}},
			want: want{write: true, status: state.Changed, reason: state.ReasonVariantUnmatched},
		},
		{
			name: "first_sight_waits_for_the_variant_that_claimed_the_server",
			in: inputs{fp: fp("e1", live, ""), want: discovery,
				first: &firstSight{srv: claimedBy("v0", now.Add(-time.Second)), srvRev: 3}},
			want: want{err: errClaimPending},
		},
		{
			name: "first_sight_withheld_once_the_claim_is_stale",
			in: inputs{fp: fp("e1", live, ""), want: discovery,
				first: &firstSight{srv: claimedBy("v0", now.Add(-claimPatience-time.Second)), srvRev: 3}},
			want: want{write: true, status: state.Changed, reason: state.ReasonVariantUnmatched},
		},
		{
			name: "first_sight_withheld_when_the_claimant_is_recorded_but_unapproved",
			in: inputs{fp: fp("e1", live, ""), want: discovery,
				first: &firstSight{srv: claimedBy("v0", now.Add(-time.Second)), srvRev: 3, claimedRecorded: true}},
			want: want{write: true, status: state.Changed, reason: state.ReasonVariantUnmatched},
		},
		{
			name: "first_sight_without_its_inputs_fails",
			in:   inputs{fp: fp("e1", live, ""), want: discovery},
			want: want{err: errors.New("any")},
		},
		{
			name: "verified_relisting_writes_nothing",
			in:   inputs{fp: fp("e2", base, ""), rec: verified(discovery), rev: 4, want: discovery},
			want: want{},
		},
		{
			name: "verified_drift_asks_for_its_assessment",
			in:   inputs{fp: fp("e2", live, ""), rec: verified(discovery), rev: 4, want: discovery},
			want: want{needs: base},
		},
		{
			name: "verified_drift_is_changed",
			in: inputs{fp: fp("e2", live, ""), rec: verified(discovery), rev: 4, want: discovery,
				assessed: map[string]state.Assessment{base: {Severity: "high"}}},
			want: want{write: true, status: state.Changed, reason: state.ReasonDrift},
		},
		{
			name: "verified_benign_drift_without_guard_is_changed",
			in: inputs{fp: fp("e2", live, ""), rec: verified(discovery), rev: 4, want: discovery,
				assessed: map[string]state.Assessment{base: {Severity: "low", Benign: true}}},
			want: want{write: true, status: state.Changed, reason: state.ReasonDrift},
		},
		{
			name: "verified_benign_drift_under_guard_is_a_new_baseline",
			in: inputs{fp: fp("e2", live, ""), rec: verified(guarded), rev: 4, want: guarded,
				assessed: map[string]state.Assessment{base: {Severity: "low", Benign: true}}},
			want: want{write: true, status: state.Verified, reason: state.ReasonAutoApproved, baseline: 2},
		},
		{
			name: "verified_unfingerprintable_is_changed_without_an_assessment",
			in:   inputs{fp: fp("e2", "", "too_deep"), rec: verified(discovery), rev: 4, want: discovery},
			want: want{write: true, status: state.Changed, reason: state.ReasonUnfingerprintable},
		},
		{
			name: "redelivery_is_announced_again",
			in:   inputs{fp: fp("e2", live, ""), rec: verified(discovery, "e2"), rev: 4, want: discovery},
			want: want{redeliver: true},
		},
		{
			name: "changed_relisting_of_the_same_drift_writes_nothing",
			in:   inputs{fp: fp("e3", live, ""), rec: changed, rev: 9, want: discovery},
			want: want{},
		},
		{
			name: "changed_reverting_to_the_baseline_stays_changed",
			in:   inputs{fp: fp("e3", base, ""), rec: changed, rev: 9, want: discovery},
			want: want{write: true, status: state.Changed, reason: state.ReasonDrift},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.now = now
			if in.live.hash == "" {
				in.live.hash = in.fp.SurfaceHash
			}
			got, err := decide(&in)
			var need *needAssessment
			switch {
			case tc.want.needs != "":
				if !errors.As(err, &need) || need.base != tc.want.needs {
					t.Fatalf("decide: %v, want it to ask for the assessment against %s", err, tc.want.needs)
				}
				return
			case tc.want.err != nil:
				if err == nil || (errors.Is(tc.want.err, errClaimPending) && !errors.Is(err, errClaimPending)) {
					t.Fatalf("decide: %v, want %v", err, tc.want.err)
				}
				return
			case err != nil:
				t.Fatalf("decide: %v", err)
			}
			if got.out.Write != tc.want.write {
				t.Fatalf("write %v, want %v (outcome %+v)", got.out.Write, tc.want.write, got.out)
			}
			if got.redelivered != tc.want.redeliver {
				t.Errorf("redelivered %v, want %v", got.redelivered, tc.want.redeliver)
			}
			if (got.claim != nil) != tc.want.claim || got.claimCreate != tc.want.create {
				t.Errorf("claim %+v (create %v), want claim %v create %v", got.claim, got.claimCreate, tc.want.claim, tc.want.create)
			}
			if got.claim != nil && (got.claim.FirstVariant != "v1" || got.claimRev != tc.in.first.srvRev) {
				t.Errorf("claim %+v at rev %d, want variant v1 at rev %d", got.claim, got.claimRev, tc.in.first.srvRev)
			}
			if !tc.want.write {
				return
			}
			r := got.out.Record
			if r.Status != tc.want.status || r.Reason != tc.want.reason {
				t.Errorf("record %s (%s), want %s (%s): %s", r.Status, r.Reason, tc.want.status, tc.want.reason, r.ReasonText)
			}
			switch nb := got.out.NewBaseline; {
			case tc.want.baseline == 0 && nb != nil:
				t.Errorf("new baseline v%d, want none", nb.Version)
			case tc.want.baseline != 0 && (nb == nil || nb.Version != tc.want.baseline || nb.Hash != in.live.hash):
				t.Errorf("new baseline %+v, want v%d of %s", nb, tc.want.baseline, in.live.hash)
			}
			if r.UpdatedAtMs != now.UnixMilli() {
				t.Errorf("updated at %d, want the decision's now %d", r.UpdatedAtMs, now.UnixMilli())
			}
		})
	}
}

// TestDecideIsPure: deciding twice on the same inputs gives the same
// transition and leaves the inputs as they were.
func TestDecideIsPure(t *testing.T) {
	now := time.UnixMilli(1_750_000_100_000)
	pol := state.Policy{Posture: state.Discovery, OnDrift: state.Block, Guard: true}
	rec := &state.Record{Tenant: "acme", Server: "mem", Variant: "v1", Status: state.Verified, Policy: pol,
		BaselineVersion: 1, BaselineHash: "sha256:base", LiveHash: "sha256:base", Applied: []string{"e0"}}
	in := inputs{
		fp: &mcpdriftv1.Fingerprint{EventId: "e1", Tenant: "acme", Server: "mem", Variant: "v1",
			SurfaceHash: "sha256:live", ObservedAtUnixMs: now.UnixMilli()},
		rec: rec, rev: 2, want: pol, live: underRecord{hash: "sha256:live"}, now: now,
		assessed: map[string]state.Assessment{"sha256:base": {Severity: "low", Benign: true}},
	}
	a, err := decide(&in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := decide(&in)
	if err != nil {
		t.Fatal(err)
	}
	if a.out.Record.BaselineVersion != 2 || b.out.Record.BaselineVersion != 2 || a.out.Record.Status != b.out.Record.Status {
		t.Errorf("two decisions differ: %+v and %+v", a.out.Record, b.out.Record)
	}
	if rec.BaselineVersion != 1 || rec.LiveHash != "sha256:base" || len(rec.Applied) != 1 {
		t.Errorf("decide changed the record it was given: %+v", rec)
	}
}
