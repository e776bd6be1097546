package state

import (
	"errors"
	"testing"
	"time"
)

var (
	t0       = time.UnixMilli(1_700_000_000_000)
	discover = Policy{Posture: Discovery, OnDrift: Block}
	strict   = Policy{Posture: Strict, OnDrift: Block}
)

func obs(id, hash string, at int) Observation {
	return Observation{EventID: id, Hash: hash, ObservedAt: t0.Add(time.Duration(at) * time.Second),
		Assess: func(base, live string) (string, bool) {
			if live == "sha256:benign" {
				return "low", true
			}
			return "high", false
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
	if _, err := Approve(rec, "sha256:a", "alice", t0); !errors.Is(err, ErrStaleHash) {
		t.Fatalf("approving a hash that is not live: %v, want stale_hash", err)
	}
	out, err := Approve(rec, "sha256:b", "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Record
	if r.Status != Verified || r.BaselineVersion != 2 || r.BaselineHash != "sha256:b" || r.ApprovedBy != "alice" || out.NewBaseline == nil || out.Previous != Changed {
		t.Fatalf("after approve: %+v", r)
	}
	// Approving what is already the baseline changes nothing.
	if again, err := Approve(&r, "sha256:b", "bob", t0); err != nil || again.Write {
		t.Fatalf("approve of the current baseline: %v write=%v", err, again.Write)
	}
	if _, err := Approve(nil, "sha256:b", "alice", t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("approve of an unknown server: %v", err)
	}
	broken := &Record{Status: Changed, LiveError: "duplicate_item"}
	if _, err := Approve(broken, "", "alice", t0); !errors.Is(err, ErrUnfingerprinted) {
		t.Fatalf("approve of an unfingerprintable manifest: %v", err)
	}
}

func TestQuarantineOnlyApproveLifts(t *testing.T) {
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	out := Quarantine(rec, "acme", "fs", "v0", discover, "alice", "incident 42", t0)
	q := out.Record
	if q.Status != Quarantined || q.Serve() || !out.Announce {
		t.Fatalf("quarantine: %+v", q)
	}
	// The same manifest observed again does not lift it.
	r2, _ := apply(t, &q, obs("2", "sha256:a", 2), discover)
	if r2.Status != Quarantined {
		t.Fatalf("an observation lifted a quarantine: %s", r2.Status)
	}
	ap, err := Approve(r2, "sha256:a", "bob", t0)
	if err != nil || ap.Record.Status != Verified || ap.Record.BaselineVersion != 2 {
		t.Fatalf("approve after quarantine: %v %+v", err, ap.Record)
	}
	// A server never seen can be quarantined ahead of time.
	pre := Quarantine(nil, "acme", "new", "v0", strict, "alice", "", t0)
	if pre.Record.Status != Quarantined || pre.Previous != Unknown {
		t.Fatalf("pre-emptive quarantine: %+v", pre)
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
