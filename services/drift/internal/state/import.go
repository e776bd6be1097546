package state

import (
	"fmt"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// ReasonImported: a baseline was installed from a signed lockfile
// (driftctl baseline import).
const ReasonImported = "imported"

// Errors of Import.
var (
	// ErrDowngrade: the lockfile's baseline is not newer than the one
	// installed (approved before it, or at the same time).
	ErrDowngrade = coded.New("baseline_downgrade", "")
	// ErrHashingMismatch: the lockfile's baseline was hashed with other
	// settings than the installed record's.
	ErrHashingMismatch = coded.New("baseline_hashing_mismatch", "")
)

// ImportResult is what an import did: the server after, the variants
// given a new baseline version, those whose installed baseline was the
// lockfile's already, and the key that signed the lockfile.
type ImportResult struct {
	View      *View
	Imported  []string
	Unchanged []string
	KeyID     string
}

// Imported is an approved baseline of one variant from a lockfile whose
// signature and hashes were checked (package lockfile).
type Imported struct {
	Hash    string
	Items   *Items // its item hashes, which make up Hash
	Hashing Hashing
	// Who approved it where it was exported, and when; its version there.
	CapturedAtMs, ApprovedAtMs int64
	ApprovedBy                 string
	Version                    int64
	KeyID                      string // the key that signed the lockfile
}

// Import installs an imported baseline as the variant's next baseline
// version (v1 for a variant never seen), approved by the lockfile's
// approver at its time; actor is who imported it.
//
//   - A variant never seen gets a verified record with no live manifest
//     (quarantined when the server is held): a proxy that first lists it
//     serves it at once when its live items match, and its first
//     fingerprint is decided by Observe against the baseline.
//   - A variant whose live manifest is the imported baseline is verified.
//   - One whose live manifest differs is changed (pending stays pending),
//     with the severity of assess(baseline, live); a quarantined one stays
//     quarantined.
//
// It refuses a baseline hashed with other settings than the record's
// (ErrHashingMismatch) and one approved no later than the installed
// baseline (ErrDowngrade); the baseline already installed changes nothing.
func Import(rec *Record, tenant, server, variant string, imp Imported, pol Policy, held bool, actor string,
	assess func(base, live string) Assessment, now time.Time) (Outcome, error) {
	nowMs := now.UnixMilli()
	b := Baseline{Version: 1, Hash: imp.Hash, CapturedAtMs: imp.CapturedAtMs, ApprovedAtMs: imp.ApprovedAtMs,
		ApprovedBy: imp.ApprovedBy, Reason: ReasonImported}
	text := func(v int64) string {
		return fmt.Sprintf("baseline v%d imported by %s from a lockfile signed by key %.16s (v%d there, approved by %s)",
			v, actor, imp.KeyID, imp.Version, imp.ApprovedBy)
	}
	if rec == nil {
		r := Record{Tenant: tenant, Server: server, Variant: variant, Policy: pol.WithHashing(imp.Hashing),
			Status: Verified, Reason: ReasonImported, Actor: actor, UpdatedAtMs: nowMs}
		setBaseline(&r, &b, imp.Items)
		r.ReasonText = text(b.Version) + "; not observed yet"
		if held {
			r.Status, r.Reason = Quarantined, ReasonQuarantined
			r.ReasonText = text(b.Version) + "; the server is quarantined: only an explicit approve restores it"
		}
		return Outcome{Record: r, Write: true, Announce: true, Previous: Unknown, NewBaseline: &b}, nil
	}
	if h := rec.Policy.Hashing(); h != imp.Hashing {
		return Outcome{}, coded.Errorf(ErrHashingMismatch.Code, "variant %s is hashed with %s, the lockfile's baseline with %s: re-baseline the variant to the lockfile's settings first, or export the lockfile with the variant's", variant, h, imp.Hashing)
	}
	out := Outcome{Previous: rec.Status}
	if rec.BaselineHash == imp.Hash {
		return out, nil // installed already: importing the same lockfile again changes nothing
	}
	if rec.BaselineHash != "" && imp.ApprovedAtMs <= rec.ApprovedAtMs {
		return Outcome{}, coded.Errorf(ErrDowngrade.Code, "the lockfile's baseline of variant %s (v%d there, approved %s by %s) is not newer than the installed baseline v%d (approved %s by %s); nothing was changed",
			variant, imp.Version, time.UnixMilli(imp.ApprovedAtMs).UTC().Format(time.RFC3339), imp.ApprovedBy,
			rec.BaselineVersion, time.UnixMilli(rec.ApprovedAtMs).UTC().Format(time.RFC3339), rec.ApprovedBy)
	}
	r := cloneRecord(rec)
	b.Version = rec.BaselineVersion + 1
	setBaseline(&r, &b, imp.Items)
	r.Actor, r.UpdatedAtMs = actor, nowMs
	unseen := rec.LiveHash == "" && rec.LiveError == ""
	switch {
	case rec.Status == Quarantined:
		r.ReasonText = text(b.Version) + "; the variant stays quarantined until an explicit approve"
	case unseen || (rec.LiveError == "" && rec.LiveHash == imp.Hash):
		r.Status, r.Reason, r.ReasonText = Verified, ReasonImported, text(b.Version)
	default:
		a := Assessment{Severity: "critical"}
		if rec.LiveError == "" && assess != nil {
			a = assess(imp.Hash, rec.LiveHash)
		}
		r.Severity, r.Benign = a.Severity, a.Benign
		if rec.Status == Pending {
			r.Reason = ReasonPendingApproval
			r.ReasonText = text(b.Version) + "; the live manifest " + rec.LiveHash + " differs from it: an admin must approve it"
			break
		}
		r.Status, r.DriftAtMs = Changed, nowMs
		r.Reason, r.ReasonText = ReasonDrift, text(b.Version)+"; the live manifest "+rec.LiveHash+" differs from it ("+a.Severity+")"
		if rec.LiveError != "" {
			r.Reason = ReasonUnfingerprintable
			r.ReasonText = text(b.Version) + "; the live manifest could not be fingerprinted (" + rec.LiveError + ")"
		}
	}
	out.Record, out.Write, out.Announce, out.NewBaseline = r, true, true, &b
	return out, nil
}
