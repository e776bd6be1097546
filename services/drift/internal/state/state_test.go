package state

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	t0       = time.UnixMilli(1_700_000_000_000)
	discover = Policy{Posture: Discovery, OnDrift: Block}
	strict   = Policy{Posture: Strict, OnDrift: Block}
)

func obs(id, hash string, at int) Observation {
	return Observation{EventID: id, Hash: hash, ObservedAt: t0.Add(time.Duration(at) * time.Second), Items: &Items{Surface: hash},
		Assess: func(base, live string) Assessment {
			if live == "sha256:benign" {
				return Assessment{Severity: "low", Benign: true}
			}
			return Assessment{Severity: "high"}
		}}
}

func apply(t *testing.T, rec *Record, o Observation, pol Policy) (*Record, Outcome) {
	t.Helper()
	out := Observe(rec, "acme", "fs", "v0", o, pol, t0.Add(time.Hour))
	if out.Write {
		r := out.Record
		return &r, out
	}
	return rec, out
}

func TestObserveTransitions(t *testing.T) {
	tests := []struct {
		name      string
		pol       Policy
		steps     []Observation
		want      Status
		serve     bool
		version   int64
		reason    string
		announced int // verdicts over all steps
	}{
		{"unknown_discovery_first_baseline", discover, []Observation{obs("1", "sha256:a", 1)}, Verified, true, 1, ReasonFirstBaseline, 1},
		{"unknown_strict_pending", strict, []Observation{obs("1", "sha256:a", 1)}, Pending, false, 0, ReasonPendingApproval, 1},
		{"unknown_unfingerprintable", discover, []Observation{{EventID: "1", ErrorCode: "duplicate_item", ObservedAt: t0}}, Pending, false, 0, ReasonUnfingerprintable, 1},
		{"verified_same_is_silent", discover, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:a", 2)}, Verified, true, 1, ReasonFirstBaseline, 1},
		{"verified_to_changed", discover, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2)}, Changed, false, 1, ReasonDrift, 2},
		{"changed_alert_serves", Policy{Posture: Discovery, OnDrift: Alert}, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2)}, Changed, true, 1, ReasonDrift, 2},
		{"revert_stays_changed", discover, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2), obs("3", "sha256:a", 3)}, Changed, false, 1, ReasonDrift, 3},
		{"verified_to_unfingerprintable", discover, []Observation{obs("1", "sha256:a", 1), {EventID: "2", ErrorCode: "invalid_utf8", ObservedAt: t0.Add(2 * time.Second)}}, Changed, false, 1, ReasonUnfingerprintable, 2},
		{"guard_accepts_benign", Policy{Posture: Discovery, OnDrift: Block, Guard: true}, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:benign", 2)}, Verified, true, 2, ReasonAutoApproved, 2},
		{"guard_blocks_risky", Policy{Posture: Discovery, OnDrift: Block, Guard: true}, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2)}, Changed, false, 1, ReasonDrift, 2},
		{"no_guard_blocks_benign", discover, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:benign", 2)}, Changed, false, 1, ReasonDrift, 2},
		{"redelivery_is_no_op", discover, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2), obs("2", "sha256:b", 2)}, Changed, false, 1, ReasonDrift, 2},
		{"late_old_observation_ignored", discover, []Observation{obs("1", "sha256:a", 1), obs("3", "sha256:b", 3), obs("2", "sha256:c", 2)}, Changed, false, 1, ReasonDrift, 2},
		{"unfingerprintable_then_valid_is_pending_approval", discover, []Observation{{EventID: "1", ErrorCode: "duplicate_item", ObservedAt: t0}, obs("2", "sha256:a", 2)}, Pending, false, 0, ReasonPendingApproval, 2},
		{"pending_follows_live", strict, []Observation{obs("1", "sha256:a", 1), obs("2", "sha256:b", 2)}, Pending, false, 0, ReasonPendingApproval, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec *Record
			announced := 0
			for _, o := range tt.steps {
				var out Outcome
				rec, out = apply(t, rec, o, tt.pol)
				if out.Announce {
					announced++
				}
			}
			if rec.Status != tt.want || rec.Serve() != tt.serve || rec.BaselineVersion != tt.version || rec.Reason != tt.reason || announced != tt.announced {
				t.Fatalf("status %s serve %v version %d reason %s verdicts %d; want %s %v %d %s %d",
					rec.Status, rec.Serve(), rec.BaselineVersion, rec.Reason, announced, tt.want, tt.serve, tt.version, tt.reason, tt.announced)
			}
		})
	}
}

func TestApprove(t *testing.T) {
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	rec, _ = apply(t, rec, obs("2", "sha256:b", 2), discover)
	if _, err := Approve(rec, "sha256:a", "alice", nil, t0); !errors.Is(err, ErrStaleHash) {
		t.Fatalf("approving a hash that is not live: %v, want stale_hash", err)
	}
	out, err := Approve(rec, "sha256:b", "alice", nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Record
	if r.Status != Verified || r.BaselineVersion != 2 || r.BaselineHash != "sha256:b" || r.ApprovedBy != "alice" || out.NewBaseline == nil || out.Previous != Changed {
		t.Fatalf("after approve: %+v", r)
	}
	// Approving what is already the baseline changes nothing.
	if again, err := Approve(&r, "sha256:b", "bob", nil, t0); err != nil || again.Write {
		t.Fatalf("approve of the current baseline: %v write=%v", err, again.Write)
	}
	if _, err := Approve(nil, "sha256:b", "alice", nil, t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("approve of an unknown server: %v", err)
	}
	broken := &Record{Status: Changed, LiveError: "duplicate_item"}
	if _, err := Approve(broken, "", "alice", nil, t0); !errors.Is(err, ErrUnfingerprinted) {
		t.Fatalf("approve of an unfingerprintable manifest: %v", err)
	}
}

func TestQuarantineOnlyApproveLifts(t *testing.T) {
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	out := Quarantine(rec, "alice", "incident 42", t0)
	q := out.Record
	if q.Status != Quarantined || q.Serve() || !out.Announce {
		t.Fatalf("quarantine: %+v", q)
	}
	// The same manifest observed again does not lift it.
	r2, _ := apply(t, &q, obs("2", "sha256:a", 2), discover)
	if r2.Status != Quarantined {
		t.Fatalf("an observation lifted a quarantine: %s", r2.Status)
	}
	ap, err := Approve(r2, "sha256:a", "bob", nil, t0)
	if err != nil || ap.Record.Status != Verified || ap.Record.BaselineVersion != 2 {
		t.Fatalf("approve after quarantine: %v %+v", err, ap.Record)
	}
	// A variant never seen has no record to quarantine: the server's hold
	// covers it (TestHold), so nothing is written for a made-up variant.
	if pre := Quarantine(nil, "alice", "", t0); pre.Write {
		t.Fatalf("quarantine of a variant never seen wrote %+v", pre.Record)
	}
}

func TestAppliedIsBounded(t *testing.T) {
	rec, _ := apply(t, nil, obs("0", "sha256:a", 0), strict)
	for i := 1; i < 200; i++ {
		rec, _ = apply(t, rec, obs(string(rune('a'+i%26))+time.Duration(i).String(), "sha256:x"+time.Duration(i).String(), i), strict)
	}
	if len(rec.Applied) > appliedKept {
		t.Fatalf("applied holds %d ids", len(rec.Applied))
	}
}

// TestGuardVerdictSaysBenign: the auto_approved record, and so its
// verdict, carries benign true and the diff's severity.
func TestGuardVerdictSaysBenign(t *testing.T) {
	guard := Policy{Posture: Discovery, OnDrift: Block, Guard: true}
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), guard)
	rec, out := apply(t, rec, obs("2", "sha256:benign", 2), guard)
	if rec.Reason != ReasonAutoApproved || !rec.Benign || rec.Severity != "low" || out.NewBaseline == nil || rec.Actor != ActorGuard {
		t.Fatalf("auto-approved record: %+v", rec)
	}
	// A change whose history makes it not benign is drift, and says why.
	o := obs("3", "sha256:c", 3)
	o.Assess = func(string, string) Assessment { return Assessment{Severity: "low", Note: "tool x comes back"} }
	rec, _ = apply(t, rec, o, guard)
	if rec.Status != Changed || rec.Benign || !strings.Contains(rec.ReasonText, "tool x comes back") {
		t.Fatalf("a returning tool under guard: %+v", rec)
	}
}

// TestNewVariant: a variant seen for the first time, on a server that has
// other variants, is compared with what they approved.
func TestNewVariant(t *testing.T) {
	matched := func(string) Comparison {
		return Comparison{Approved: true, ReferenceVariant: "v1", ReferenceHash: "sha256:ref"}
	}
	unmatched := func(string) Comparison {
		return Comparison{Approved: true, Unmatched: []string{"tool evil"}, ReferenceVariant: "v1", ReferenceHash: "sha256:ref", Severity: "high"}
	}
	none := func(string) Comparison { return Comparison{} }
	alert := Policy{Posture: Discovery, OnDrift: Alert}
	tests := []struct {
		name     string
		pol      Policy
		held     bool
		compare  func(string) Comparison
		errCode  string
		want     Status
		reason   string
		actor    string
		version  int64
		serve    bool
		severity string
	}{
		{"matched_discovery", discover, false, matched, "", Verified, ReasonVariantMatched, ActorVariant, 1, true, ""},
		{"matched_strict", strict, false, matched, "", Verified, ReasonVariantMatched, ActorVariant, 1, true, ""},
		{"unmatched_discovery", discover, false, unmatched, "", Changed, ReasonVariantUnmatched, "system", 0, false, "high"},
		{"unmatched_alert_not_served", alert, false, unmatched, "", Changed, ReasonVariantUnmatched, "system", 0, false, "high"},
		{"unmatched_strict", strict, false, unmatched, "", Pending, ReasonVariantUnmatched, "system", 0, false, "high"},
		{"held_matched", discover, true, matched, "", Quarantined, ReasonQuarantined, "system", 0, false, ""},
		{"held_first_sight", discover, true, nil, "", Quarantined, ReasonQuarantined, "system", 0, false, ""},
		{"no_other_approved_is_first_sight", discover, false, none, "", Verified, ReasonFirstBaseline, ActorTOFU, 1, true, ""},
		{"unfingerprintable", discover, false, matched, "invalid_utf8", Pending, ReasonUnfingerprintable, "system", 0, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := obs("1", "sha256:new", 1)
			if tt.errCode != "" {
				o.Hash, o.ErrorCode = "", tt.errCode
			}
			o.Held, o.Compare = tt.held, tt.compare
			out := Observe(nil, "acme", "fs", "v2", o, tt.pol, t0)
			r := out.Record
			if r.Status != tt.want || r.Reason != tt.reason || r.Actor != tt.actor || r.BaselineVersion != tt.version || r.Serve() != tt.serve || r.Severity != tt.severity {
				t.Fatalf("record %+v; want %s %s %s v%d serve %v severity %q", r, tt.want, tt.reason, tt.actor, tt.version, tt.serve, tt.severity)
			}
			if (out.NewBaseline != nil) != (tt.version == 1) {
				t.Fatalf("new baseline %+v", out.NewBaseline)
			}
			if tt.reason == ReasonVariantUnmatched && (r.ReferenceHash != "sha256:ref" || !strings.Contains(r.ReasonText, "tool evil")) {
				t.Fatalf("an unmatched variant does not name its reference and items: %+v", r)
			}
		})
	}
	// An unmatched variant stays withheld when its manifest moves, and an
	// approve gives it a baseline of its own.
	out := Observe(nil, "acme", "fs", "v2", func() Observation { o := obs("1", "sha256:new", 1); o.Compare = unmatched; return o }(), discover, t0)
	r := out.Record
	r2, _ := apply(t, &r, obs("2", "sha256:newer", 2), discover)
	if r2.Status != Changed || r2.Reason != ReasonVariantUnmatched || r2.Serve() || r2.Severity != "high" {
		t.Fatalf("an unmatched variant after its manifest moved: %+v", r2)
	}
	ap, err := Approve(r2, "sha256:newer", "alice", nil, t0)
	if err != nil || ap.Record.Status != Verified || ap.Record.BaselineVersion != 1 || ap.Record.ReferenceHash != "" {
		t.Fatalf("approve of an unmatched variant: %v %+v", err, ap.Record)
	}
}

func TestHold(t *testing.T) {
	s, write := Hold(nil, "acme", "fs", "alice", "incident", t0)
	if !write || !s.Held || s.HeldBy != "alice" || s.Tenant != "acme" || s.Server != "fs" {
		t.Fatalf("hold: %+v %v", s, write)
	}
	if _, again := Hold(&s, "acme", "fs", "bob", "", t0); again {
		t.Fatal("holding a held server wrote again")
	}
	r, write := Release(&s, "bob", t0)
	if !write || r.Held || r.ReleasedBy != "bob" || r.HeldBy != "alice" {
		t.Fatalf("release: %+v %v", r, write)
	}
	if _, again := Release(&r, "bob", t0); again {
		t.Fatal("releasing a server not held wrote")
	}
	if _, write := Release(nil, "bob", t0); write {
		t.Fatal("releasing no record wrote")
	}
}

func TestClaimFirst(t *testing.T) {
	s, write, ok := ClaimFirst(nil, "acme", "fs", "v1", t0)
	if !write || !ok || s.FirstVariant != "v1" {
		t.Fatalf("first claim: %+v %v %v", s, write, ok)
	}
	if _, write, ok := ClaimFirst(&s, "acme", "fs", "v1", t0); write || !ok {
		t.Fatalf("the same variant's claim again: write %v ok %v", write, ok)
	}
	if _, write, ok := ClaimFirst(&s, "acme", "fs", "v2", t0); write || ok {
		t.Fatalf("another variant's claim: write %v ok %v", write, ok)
	}
	held, _ := Hold(nil, "acme", "fs", "alice", "", t0)
	if c, write, ok := ClaimFirst(&held, "acme", "fs", "v1", t0); !write || !ok || !c.Held {
		t.Fatalf("a claim on a held server must keep the hold: %+v", c)
	}
}

func TestCompareVariant(t *testing.T) {
	a := Item{Kind: "tool", Name: "a", Hash: "h1"}
	b := Item{Kind: "tool", Name: "b", Hash: "h2"}
	c := Item{Kind: "tool", Name: "c", Hash: "h3"}
	ins := Item{Kind: "instructions", Name: "", Hash: "h4"}
	v1 := ApprovedVariant{Variant: "v1", Hash: "sha256:1", Items: []Item{a, b, ins}}
	v2 := ApprovedVariant{Variant: "v2", Hash: "sha256:2", Items: []Item{a, b, c}}
	tests := []struct {
		name      string
		live      []Item
		approved  []ApprovedVariant
		unmatched string
		reference string
		isApprove bool
	}{
		{"none_approved", []Item{a}, nil, "", "", false},
		{"subset", []Item{a}, []ApprovedVariant{v1, v2}, "", "v1", true},
		{"union_of_two", []Item{a, c, ins}, []ApprovedVariant{v1, v2}, "", "v1", true},
		{"closest_is_reference", []Item{a, b, c}, []ApprovedVariant{v1, v2}, "", "v2", true},
		{"new_tool", []Item{a, {Kind: "tool", Name: "evil", Hash: "h9"}}, []ApprovedVariant{v1}, "tool evil", "v1", true},
		{"same_name_other_definition", []Item{{Kind: "tool", Name: "a", Hash: "h9"}}, []ApprovedVariant{v1, v2}, "tool a", "v1", true},
		{"same_hash_other_kind", []Item{{Kind: "prompt", Name: "a", Hash: "h1"}}, []ApprovedVariant{v1}, "prompt a", "v1", true},
		{"other_instructions", []Item{{Kind: "instructions", Name: "", Hash: "h5"}}, []ApprovedVariant{v1}, "instructions", "v1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CompareVariant(tt.live, tt.approved)
			if got.Approved != tt.isApprove || strings.Join(got.Unmatched, ",") != tt.unmatched || got.ReferenceVariant != tt.reference {
				t.Fatalf("got %+v; want approved %v unmatched %q reference %q", got, tt.isApprove, tt.unmatched, tt.reference)
			}
		})
	}
}

func TestHistoryNote(t *testing.T) {
	cur := []Item{{Kind: "tool", Name: "a", Hash: "a2"}, {Kind: "tool", Name: "b", Hash: "b1"}}
	history := []Item{{Kind: "tool", Name: "a", Hash: "a1"}, {Kind: "tool", Name: "a", Hash: "a2"}, {Kind: "tool", Name: "b", Hash: "b1"}, {Kind: "tool", Name: "gone", Hash: "g1"}, {Kind: "tool", Name: "other", Hash: "o1"}}
	tests := []struct {
		name           string
		added, changed []Item
		want           string
	}{
		{"new_tool", []Item{{Kind: "tool", Name: "fresh", Hash: "f1"}}, nil, ""},
		{"removed_and_back", []Item{{Kind: "tool", Name: "gone", Hash: "g1"}}, nil, "tool gone was approved before, removed, and comes back"},
		{"removed_and_back_changed", []Item{{Kind: "tool", Name: "gone", Hash: "g2"}}, nil, "tool gone was approved before, removed, and comes back"},
		{"approved_in_another_variant", []Item{{Kind: "tool", Name: "other", Hash: "o2"}}, nil, "tool other was approved before, removed, and comes back"},
		{"first_change", nil, []Item{{Kind: "tool", Name: "b", Hash: "b2"}}, ""},
		{"had_another_definition", nil, []Item{{Kind: "tool", Name: "a", Hash: "a3"}}, "tool a had another approved definition before"},
		{"back_to_an_old_definition", nil, []Item{{Kind: "tool", Name: "a", Hash: "a1"}}, "tool a had another approved definition before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HistoryNote(tt.added, tt.changed, cur, history); got != tt.want {
				t.Fatalf("note %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBaselineItems: a baseline carries the item hashes of the manifest it
// was set from, from the fingerprint (first sight, guard) or from the
// caller's reading of the live manifest (approve), and its version holds
// them (the record names the version); the serve rule needs them. Live
// items are not kept.
func TestBaselineItems(t *testing.T) {
	guard := Policy{Posture: Discovery, OnDrift: Block, Guard: true}
	r, out := apply(t, nil, obs("1", "sha256:a", 1), discover)
	if !r.BaselineItems.Of("sha256:a") || r.LiveItems != nil || !r.Serve() {
		t.Fatalf("first baseline: items %+v live %+v serve %v", r.BaselineItems, r.LiveItems, r.Serve())
	}
	if !out.NewBaseline.Items.Of("sha256:a") || r.BaselineItemsVersion != out.NewBaseline.Version {
		t.Fatalf("first baseline: version %d holds items %+v, the record names version %d", out.NewBaseline.Version, out.NewBaseline.Items, r.BaselineItemsVersion)
	}
	r, _ = apply(t, r, obs("2", "sha256:b", 2), discover)
	if !r.BaselineItems.Of("sha256:a") || r.LiveItems != nil {
		t.Fatalf("drift: baseline items %+v live items %+v", r.BaselineItems, r.LiveItems)
	}
	ap, err := Approve(r, "sha256:b", "alice", &Items{Surface: "sha256:b"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if a := ap.Record; !a.BaselineItems.Of("sha256:b") || a.LiveItems != nil || !a.Serve() || !ap.NewBaseline.Items.Of("sha256:b") || a.BaselineItemsVersion != 2 {
		t.Fatalf("approved: baseline items %+v live items %+v serve %v, version items %+v", a.BaselineItems, a.LiveItems, a.Serve(), ap.NewBaseline.Items)
	}
	g, _ := apply(t, nil, obs("1", "sha256:a", 1), guard)
	g, _ = apply(t, g, obs("2", "sha256:benign", 2), guard)
	if !g.BaselineItems.Of("sha256:benign") || !g.Serve() {
		t.Fatalf("auto-approved: baseline items %+v serve %v", g.BaselineItems, g.Serve())
	}
	// A fingerprint without item hashes (they did not make up its hash):
	// verified, but not served.
	bare := obs("1", "sha256:a", 1)
	bare.Items = nil
	n, _ := apply(t, nil, bare, discover)
	if n.Status != Verified || n.BaselineItems != nil || n.Serve() {
		t.Fatalf("without items: status %s items %+v serve %v", n.Status, n.BaselineItems, n.Serve())
	}
}

// TestUpgradeFillsInItems: a record written before item hashes were kept
// is not served until a listing of its baseline fills them in (one write,
// announced, since it is served from then on); a record whose items did not
// fit is not written again for them on every listing.
func TestUpgradeFillsInItems(t *testing.T) {
	old := &Record{Tenant: "acme", Server: "fs", Variant: "v0", Status: Verified, Policy: discover,
		BaselineVersion: 1, BaselineHash: "sha256:a", LiveHash: "sha256:a", LiveObservedMs: t0.UnixMilli()}
	if old.Serve() {
		t.Fatal("a record without item hashes is served")
	}
	r, out := apply(t, old, obs("2", "sha256:a", 2), discover)
	if !out.Write || !out.Announce || !r.BaselineItems.Of("sha256:a") || !r.Serve() || r.Status != Verified {
		t.Fatalf("filled in: write %v announce %v items %+v serve %v", out.Write, out.Announce, r.BaselineItems, r.Serve())
	}
	if _, again := apply(t, r, obs("3", "sha256:a", 3), discover); again.Write {
		t.Fatal("the hot path wrote a record that has its items")
	}

	// Changed before the upgrade: live items are not kept (an approve
	// reads them from the manifest), so nothing is written.
	changed := &Record{Tenant: "acme", Server: "fs", Variant: "v0", Status: Changed, Policy: discover, Reason: ReasonDrift,
		BaselineVersion: 1, BaselineHash: "sha256:a", LiveHash: "sha256:b", LiveObservedMs: t0.UnixMilli()}
	c, out := apply(t, changed, obs("2", "sha256:b", 2), discover)
	if out.Write || c.LiveItems != nil || c.Status != Changed {
		t.Fatalf("a re-listing of the live manifest: write %v live items %+v status %s", out.Write, c.LiveItems, c.Status)
	}
	// An approve of a record without live items takes the caller's.
	ap, err := Approve(changed, "sha256:b", "alice", &Items{Surface: "sha256:b"}, t0)
	if err != nil || !ap.Record.BaselineItems.Of("sha256:b") || !ap.Record.Serve() {
		t.Fatalf("approve with the caller's items: %+v %v", ap.Record.BaselineItems, err)
	}
	// ... and without them is verified but not served.
	ap, err = Approve(changed, "sha256:b", "alice", nil, t0)
	if err != nil || ap.Record.Status != Verified || ap.Record.Serve() {
		t.Fatalf("approve without items: status %s serve %v %v", ap.Record.Status, ap.Record.Serve(), err)
	}
	// A verified record approved again fills in its items.
	ap, err = Approve(old, "sha256:a", "alice", &Items{Surface: "sha256:a"}, t0)
	if err != nil || !ap.Write || !ap.Record.Serve() || ap.Record.BaselineVersion != 1 {
		t.Fatalf("approve of the baseline to fill in: write %v serve %v version %d %v", ap.Write, ap.Record.Serve(), ap.Record.BaselineVersion, err)
	}

	omitted := *old
	omitted.ItemsOmitted = true
	if _, out := apply(t, &omitted, obs("2", "sha256:a", 2), discover); out.Write {
		t.Fatal("a record whose items did not fit is written again on a listing")
	}
}

// TestResettle: a policy change reaches a record without an observation:
// the action on drift decides at once whether a changed variant is served
// (and that is announced); guard and posture are recorded; a hashing
// change is only marked wanted; status, baseline and live manifest stay.
func TestResettle(t *testing.T) {
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	rec, _ = apply(t, rec, obs("2", "sha256:b", 2), discover)
	if rec.Status != Changed || rec.Serve() {
		t.Fatalf("setup: %s serve %v", rec.Status, rec.Serve())
	}
	now := t0.Add(2 * time.Hour)
	alert := Policy{Posture: Discovery, OnDrift: Alert}
	out := Resettle(rec, alert, now)
	if !out.Write || !out.Announce || !out.Record.Serve() || out.Record.Status != Changed || out.Record.Policy.OnDrift != Alert ||
		out.Record.LiveHash != "sha256:b" || out.Record.BaselineHash != "sha256:a" || out.Record.UpdatedAtMs != now.UnixMilli() {
		t.Fatalf("block to alert: %+v", out)
	}
	if again := Resettle(&out.Record, alert, now); again.Write || again.Announce {
		t.Fatalf("the same settings again: %+v", again)
	}
	back := Resettle(&out.Record, discover, now)
	if !back.Write || !back.Announce || back.Record.Serve() || back.Record.Policy.OnDrift != Block {
		t.Fatalf("alert to block: %+v", back)
	}
	if out.Record.Policy.OnDrift != Alert {
		t.Fatal("Resettle changed its argument")
	}

	verified, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	guard := Resettle(verified, Policy{Posture: Strict, OnDrift: Block, Guard: true}, now)
	if !guard.Write || guard.Announce || !guard.Record.Policy.Guard || guard.Record.Policy.Posture != Strict || !guard.Record.Serve() {
		t.Fatalf("guard and posture on a verified record: %+v", guard)
	}
	sha512 := discover
	sha512.Hash = "sha512"
	h := Resettle(verified, sha512, now)
	if !h.Write || h.Announce || h.Record.PolicyWants == nil || h.Record.PolicyWants.Hash != "sha512" || h.Record.Policy.Hashing().Hash != "sha256" ||
		!h.Record.Serve() || h.Record.BaselineHash != "sha256:a" {
		t.Fatalf("a hashing change: %+v", h)
	}
	if out := Resettle(nil, alert, now); out.Write || out.Announce {
		t.Fatalf("no record: %+v", out)
	}
}
