package state

import (
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// imported is a lockfile's baseline of hash, approved at second at.
func imported(hash string, at int) Imported {
	return Imported{Hash: hash, Items: &Items{Surface: hash}, Hashing: discover.Hashing(), // the records' hashing (form v1: the policies here name none)
		CapturedAtMs: t0.UnixMilli(), ApprovedAtMs: t0.Add(time.Duration(at) * time.Second).UnixMilli(),
		ApprovedBy: "alice", Version: 7, KeyID: "34750f98bd59fcfc946da45aaabe933be154a4b5094e1c4abf42866505f3c97e"}
}

func importInto(t *testing.T, rec *Record, imp Imported, pol Policy, held bool) (*Record, Outcome, error) {
	t.Helper()
	out, err := Import(rec, "acme", "fs", "v0", imp, pol, held, "deploy", func(base, live string) Assessment {
		return Assessment{Severity: "high"}
	}, t0.Add(time.Hour))
	if err != nil || !out.Write {
		return rec, out, err
	}
	r := out.Record
	return &r, out, nil
}

// TestImportThenObserve: a baseline imported for a variant never seen is
// served before its first sight; the first sight that matches it keeps it
// verified (and records the live manifest, with no verdict: nothing a
// subscriber needs changed), and one that does not is pending under the
// strict posture and changed under discovery, with the diff's severity.
func TestImportThenObserve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pol       Policy
		live      string
		held      bool
		want      Status
		serve     bool
		reason    string
		announced bool // the first sight's verdict
	}{
		{"strict_match_serves", strict, "sha256:a", false, Verified, true, ReasonImported, false},
		{"strict_mismatch_pending", strict, "sha256:b", false, Pending, false, ReasonPendingApproval, true},
		{"strict_benign_mismatch_pending_even_with_guard", Policy{Posture: Strict, OnDrift: Block, Guard: true}, "sha256:benign", false, Pending, false, ReasonPendingApproval, true},
		{"discovery_match_serves", discover, "sha256:a", false, Verified, true, ReasonImported, false},
		{"discovery_mismatch_changed", discover, "sha256:b", false, Changed, false, ReasonDrift, true},
		{"held_server_quarantined", strict, "sha256:a", true, Quarantined, false, ReasonQuarantined, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, out, err := importInto(t, nil, imported("sha256:a", 1), tc.pol, tc.held)
			if err != nil {
				t.Fatal(err)
			}
			if !out.Write || !out.Announce || out.NewBaseline == nil || out.NewBaseline.Version != 1 || out.NewBaseline.ApprovedBy != "alice" || out.NewBaseline.Reason != ReasonImported {
				t.Fatalf("import outcome %+v", out)
			}
			if tc.held != (rec.Status == Quarantined) || (!tc.held && !rec.Serve()) || rec.LiveHash != "" || rec.Actor != "deploy" {
				t.Fatalf("imported record: status %s serve %v live %q actor %s", rec.Status, rec.Serve(), rec.LiveHash, rec.Actor)
			}
			rec, out = apply(t, rec, obs("1", tc.live, 1), tc.pol)
			if rec.Status != tc.want || rec.Serve() != tc.serve || rec.Reason != tc.reason || out.Announce != tc.announced || rec.LiveHash != tc.live {
				t.Fatalf("after first sight: status %s serve %v reason %s announced %v live %s; want %s %v %s %v %s",
					rec.Status, rec.Serve(), rec.Reason, out.Announce, rec.LiveHash, tc.want, tc.serve, tc.reason, tc.announced, tc.live)
			}
			if !out.Write {
				t.Fatal("the first sight was not written: the record keeps no live manifest")
			}
			if rec.Status == Pending && (rec.BaselineHash != "sha256:a" || rec.Severity != obs("", tc.live, 0).Assess("sha256:a", tc.live).Severity) {
				t.Fatalf("pending without the diff against the imported baseline: baseline %s severity %s", rec.BaselineHash, rec.Severity)
			}
			// The next listing of the same surface writes nothing.
			if _, again := apply(t, rec, obs("2", tc.live, 2), tc.pol); again.Write {
				t.Fatalf("a re-listing wrote %+v", again.Record)
			}
		})
	}
}

// TestImportOverRecord: an import over a record already there is the next
// baseline version; the same baseline again changes nothing; an older one
// or one hashed otherwise is refused.
func TestImportOverRecord(t *testing.T) {
	tofu := func(live string) *Record { // discovery's first sight of live at second 1
		r, _ := apply(t, nil, obs("1", live, 1), discover)
		return r
	}
	for _, tc := range []struct {
		name    string
		rec     func() *Record
		imp     Imported
		code    string
		write   bool
		status  Status
		version int64
	}{
		{"live_matches_verified", func() *Record { r := tofu("sha256:a"); r, _ = apply(t, r, obs("2", "sha256:b", 2), discover); return r }, imported("sha256:b", 7200), "", true, Verified, 2},
		{"live_differs_changed", func() *Record { return tofu("sha256:a") }, imported("sha256:c", 7200), "", true, Changed, 2},
		{"pending_stays_pending", func() *Record { r, _ := apply(t, nil, obs("1", "sha256:a", 1), strict); return r }, imported("sha256:c", 7200), "", true, Pending, 1},
		{"quarantined_stays", func() *Record { r := tofu("sha256:a"); q := Quarantine(r, "bob", "", t0); return &q.Record }, imported("sha256:a2", 7200), "", true, Quarantined, 2},
		{"same_baseline_no_op", func() *Record { return tofu("sha256:a") }, imported("sha256:a", 7200), "", false, Verified, 1},
		{"older_refused", func() *Record { return tofu("sha256:a") }, imported("sha256:b", 1), ErrDowngrade.Code, false, Verified, 1},
		{"hashing_refused", func() *Record { return tofu("sha256:a") }, func() Imported {
			i := imported("sha512:b", 7200)
			i.Hashing = Hashing{Hash: "sha512", Annotations: true}
			return i
		}(), ErrHashingMismatch.Code, false, Verified, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.rec()
			rec, out, err := importInto(t, before, tc.imp, discover, false)
			if coded.CodeOf(err) != tc.code {
				t.Fatalf("err %v, want code %q", err, tc.code)
			}
			if out.Write != tc.write || rec.Status != tc.status || rec.BaselineVersion != tc.version {
				t.Fatalf("write %v status %s version %d; want %v %s %d", out.Write, rec.Status, rec.BaselineVersion, tc.write, tc.status, tc.version)
			}
			if tc.write && (out.NewBaseline == nil || out.NewBaseline.Version != tc.version || rec.BaselineHash != tc.imp.Hash || rec.ApprovedBy != "alice") {
				t.Fatalf("new baseline %+v, record baseline %s by %s", out.NewBaseline, rec.BaselineHash, rec.ApprovedBy)
			}
		})
	}
}
