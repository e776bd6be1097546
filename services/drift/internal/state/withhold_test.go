package state

import (
	"testing"
	"time"
)

var withhold = Policy{Posture: Discovery, OnDrift: WithholdChanged}

// obsInstr is obs with an assessment that says whether the instructions
// stayed the same, counting its calls.
func obsInstr(id, hash string, at int, same bool, calls *int) Observation {
	o := obs(id, hash, at)
	o.Assess = func(base, live string) Assessment {
		*calls++
		return Assessment{Severity: "high", InstructionsSame: same}
	}
	return o
}

// TestWithholdChanged: under withhold_changed a drift is changed as under
// block (an admin must review it), and the record serves (its unchanged
// items) only while the drift service found the live instructions to be
// the baseline's, for this very baseline and live manifest.
func TestWithholdChanged(t *testing.T) {
	var calls int
	tests := []struct {
		name      string
		pol       Policy
		steps     []Observation
		want      Status
		serve     bool
		instrKept bool // the finding says the instructions are the baseline's
	}{
		{"instructions_kept_serves", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, true, &calls)}, Changed, true, true},
		{"instructions_changed_withholds_all", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, false, &calls)}, Changed, false, false},
		{"block_same_finding_serves_nothing", discover, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, true, &calls)}, Changed, false, true},
		{"next_live_changes_instructions", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, true, &calls), obsInstr("3", "sha256:c", 3, false, &calls)}, Changed, false, false},
		{"next_live_keeps_them_again", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, false, &calls), obsInstr("3", "sha256:c", 3, true, &calls)}, Changed, true, true},
		{"reverted_to_baseline_serves", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, false, &calls), obsInstr("3", "sha256:a", 3, false, &calls)}, Changed, true, false},
		{"unfingerprintable_withholds_all", withhold, []Observation{obs("1", "sha256:a", 1), obsInstr("2", "sha256:b", 2, true, &calls),
			{EventID: "3", ErrorCode: "invalid_utf8", ObservedAt: t0.Add(3 * time.Second)}}, Changed, false, false},
		{"strict_first_sight_pending", Policy{Posture: Strict, OnDrift: WithholdChanged}, []Observation{obsInstr("1", "sha256:a", 1, true, &calls)}, Pending, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec *Record
			for _, o := range tt.steps {
				rec, _ = apply(t, rec, o, tt.pol)
			}
			kept := rec.Instructions != nil && !rec.Instructions.Changed && rec.Instructions.Baseline == rec.BaselineHash && rec.Instructions.Live == rec.LiveHash
			if rec.Status != tt.want || rec.Serve() != tt.serve || kept != tt.instrKept {
				t.Fatalf("status %s serve %v instructions %+v; want %s serve %v kept %v", rec.Status, rec.Serve(), rec.Instructions, tt.want, tt.serve, tt.instrKept)
			}
		})
	}
}

// TestWithholdChangedComparesLate: a changed record whose instructions were
// never compared (its policy became withhold_changed afterwards) is
// withheld whole and asks for the whole manifest; the next observation of
// the same live manifest compares them and serves, announced. An approve
// makes it verified, the finding gone with the old baseline.
func TestWithholdChangedComparesLate(t *testing.T) {
	var calls int
	rec, _ := apply(t, nil, obs("1", "sha256:a", 1), discover)
	rec, _ = apply(t, rec, obs("2", "sha256:b", 2), discover)
	rec.Instructions = nil // written before findings were kept
	out := Resettle(rec, withhold, t0.Add(time.Hour))
	if !out.Write || out.Announce {
		t.Fatalf("Resettle: write %v announce %v; want a write, no verdict (nothing served before or after)", out.Write, out.Announce)
	}
	rec = &out.Record
	if rec.Serve() || rec.Confirms() != "" {
		t.Fatalf("resettled: serve %v confirms %q; want withheld, and a whole manifest asked for", rec.Serve(), rec.Confirms())
	}
	calls = 0
	rec, out = apply(t, rec, obsInstr("3", "sha256:b", 3, true, &calls), withhold)
	if calls != 1 || !out.Write || !out.Announce || !rec.Serve() || rec.Status != Changed || rec.Confirms() != "sha256:b" {
		t.Fatalf("same live again: %d assessments, write %v announce %v serve %v status %s confirms %q; want 1, a write, a verdict, served, changed, confirmed",
			calls, out.Write, out.Announce, rec.Serve(), rec.Status, rec.Confirms())
	}
	rec, out = apply(t, rec, obsInstr("4", "sha256:b", 4, true, &calls), withhold)
	if calls != 1 || out.Write {
		t.Fatalf("compared already: %d assessments, write %v; want no more of either", calls, out.Write)
	}
	ap, err := Approve(rec, "sha256:b", "alice", &Items{Surface: "sha256:b"}, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r := ap.Record; r.Status != Verified || r.Instructions != nil || !r.Serve() {
		t.Fatalf("approved: %s instructions %+v serve %v", r.Status, r.Instructions, r.Serve())
	}
}
