// Package state is the schema-status state machine of the drift service,
// free of I/O: given a server's record and an event (a fingerprint, an
// approval, a quarantine), it returns the next record and what to announce.
// The service stores records in a JetStream key-value bucket with
// compare-and-set, so that this package is the only place transitions are
// decided.
package state

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// The record types are the status contract, defined once in package
// status (the drift service writes them, proxies, driftctl and stack read
// them); these names keep the state machine's vocabulary.
type (
	Status   = status.Status
	Policy   = status.Policy
	Record   = status.Record
	Server   = status.Server
	Baseline = status.Baseline
	Items    = status.Items
	Hashing  = status.Hashing
)

// The statuses of the design (status.Status).
const (
	Unknown     = status.Unknown
	Verified    = status.Verified
	Changed     = status.Changed
	Pending     = status.Pending
	Quarantined = status.Quarantined
)

// Posture and drift policies (status.Policy).
const (
	Discovery = status.Discovery
	Strict    = status.Strict
	Block     = status.Block
	Alert     = status.Alert
	// WithholdChanged: a changed variant serves its unchanged items
	// (status.WithholdChanged); it is changed all the same.
	WithholdChanged = status.WithholdChanged
)

// Reason codes carried by verdicts.
const (
	ReasonFirstBaseline     = "first_baseline"
	ReasonPendingApproval   = "pending_approval"
	ReasonDrift             = "drift"
	ReasonUnfingerprintable = "unfingerprintable"
	ReasonAutoApproved      = "auto_approved"
	ReasonApproved          = "approved"
	ReasonQuarantined       = "quarantined"
	// A new listing variant whose every item equals a definition approved
	// for another variant of the server: verified without an admin.
	ReasonVariantMatched = "variant_matched"
	// A new listing variant with an item no other variant of the server
	// has approved: changed (discovery) or pending (strict), withheld.
	ReasonVariantUnmatched = "variant_unmatched"
)

// Actors that are not people.
const (
	ActorTOFU    = "system:trust-on-first-use"
	ActorGuard   = "system:guard"
	ActorVariant = "system:variant"
)

// Hold quarantines the server: every variant, present and future. srv may
// be nil (no server record yet). It reports false when the server is
// already held (nothing to write).
func Hold(srv *Server, tenant, server, actor, reason string, now time.Time) (Server, bool) {
	var s Server
	if srv != nil {
		s = *srv
	}
	s.Tenant, s.Server = tenant, server
	if s.Held {
		return s, false
	}
	s.Held, s.HeldBy, s.HeldAtMs, s.HeldReason, s.UpdatedAtMs = true, actor, now.UnixMilli(), reason, now.UnixMilli()
	return s, true
}

// Release lifts the hold: an admin approved a variant. It reports false
// when the server is not held.
func Release(srv *Server, actor string, now time.Time) (Server, bool) {
	if srv == nil || !srv.Held {
		if srv == nil {
			return Server{}, false
		}
		return *srv, false
	}
	s := *srv
	s.Held, s.ReleasedBy, s.ReleasedAtMs, s.UpdatedAtMs = false, actor, now.UnixMilli(), now.UnixMilli()
	return s, true
}

// ClaimFirst claims the server's one trust-on-first-use for variant. It
// returns the record to write and write true when the claim must be
// stored, and ok false when another variant holds it.
func ClaimFirst(srv *Server, tenant, server, variant string, now time.Time) (s Server, write, ok bool) {
	if srv != nil {
		s = *srv
	}
	s.Tenant, s.Server = tenant, server
	switch s.FirstVariant {
	case variant:
		return s, false, true
	case "":
		s.FirstVariant, s.FirstAtMs, s.UpdatedAtMs = variant, now.UnixMilli(), now.UnixMilli()
		return s, true, true
	}
	return s, false, false
}

// Observation is a fingerprint result for the server.
type Observation struct {
	EventID    string
	Hash       string // "" when ErrorCode is set
	ErrorCode  string
	ObservedAt time.Time
	// Assess classifies the live surface against the baseline; called only
	// when the two differ.
	Assess func(baselineHash, liveHash string) Assessment
	// Held says the server is quarantined: a variant seen for the first
	// time comes up quarantined.
	Held bool
	// Compare compares a variant's first manifest with what the server's
	// other variants approved; called only for a variant never seen, with
	// a hash. Nil: the server has no other approved variant.
	Compare func(liveHash string) Comparison
	// Items are the manifest's item hashes as the fingerprint service
	// published them (checked against Hash: status.NewItems); nil when
	// unknown. A baseline set from the manifest carries them, so that
	// proxies compare live items with them.
	Items *Items
	// Policy is the server's drift settings as its tenant's policy
	// resolves them now; nil leaves the record's. Posture, on_drift and
	// guard apply to an existing record with this observation; hashing
	// settings (Hash, Annotations) that differ from the record's never
	// apply here: the record keeps its own and names the policy's in
	// PolicyWants until an admin re-baselines (Rebaseline). Hash and Items
	// are always made with the record's hashing.
	Policy *Policy
	// WantsLiveHash is the live manifest's hash with the hashing Policy
	// asks for, when that differs from the record's.
	WantsLiveHash string
}

// Assessment is the classified drift from a baseline.
type Assessment struct {
	Severity string
	// Benign: the diff's benign rule (docs/diff.md): only added items,
	// added optional parameters and the same meaning written differently,
	// descriptions byte-identical, no risk raised, no markers; and no item
	// that was removed and came back or ever had another approved definition.
	Benign bool
	// Note says why a change the diff alone calls benign is not (its
	// history), for the reason text; "" otherwise.
	Note string
	// InstructionsSame: the two manifests were compared and their
	// instructions are the same (both have none, or the same item hash).
	// False also when they could not be compared: the instructions count as
	// changed (status.Record.InstructionsChanged).
	InstructionsSame bool
}

// Comparison is how a variant's first manifest compares with the items
// approved for the server's other variants (their current baselines).
type Comparison struct {
	// Approved: some other variant of the server has an approved baseline.
	// When false the variant is treated as the server's first sight.
	Approved bool
	// Unmatched lists the manifest's items that equal no approved
	// definition of the same kind and name ("tool read_file"); empty: every
	// item matched.
	Unmatched []string
	// The approved baseline closest to the manifest, and the severity of
	// the diff from it to the manifest.
	ReferenceVariant, ReferenceHash string
	Severity                        string
}

// Outcome is what an event does.
type Outcome struct {
	Record      Record    // the record to store (when Write)
	Write       bool      // the record changed and must be stored
	Announce    bool      // a verdict must be broadcast
	Previous    Status    // the status before
	NewBaseline *Baseline // a baseline version to keep in history
}

const appliedKept = 64

func applied(r *Record, id string) bool { return id != "" && slices.Contains(r.Applied, id) }

func remember(r *Record, id string) {
	if id == "" {
		return
	}
	r.Applied = append(r.Applied, id)
	if len(r.Applied) > appliedKept {
		r.Applied = slices.Clone(r.Applied[len(r.Applied)-appliedKept:])
	}
}

// Observe applies a fingerprint to rec (nil for a server never seen).
func Observe(rec *Record, tenant, server, variant string, obs Observation, pol Policy, now time.Time) Outcome {
	nowMs := now.UnixMilli()
	obsMs := obs.ObservedAt.UnixMilli()
	if rec == nil {
		r := Record{Tenant: tenant, Server: server, Variant: variant, Policy: pol, LiveHash: obs.Hash,
			LiveError: obs.ErrorCode, LiveObservedMs: obsMs, UpdatedAtMs: nowMs, Actor: "system"}
		if obs.ErrorCode == "" && obs.Items.Of(obs.Hash) {
			r.LiveItems = obs.Items
		}
		remember(&r, obs.EventID)
		out := Outcome{Write: true, Announce: true, Previous: Unknown}
		var cmp Comparison
		if obs.ErrorCode == "" && !obs.Held && obs.Compare != nil {
			cmp = obs.Compare(obs.Hash)
		}
		switch {
		case obs.ErrorCode != "":
			r.Status, r.Reason = Pending, ReasonUnfingerprintable
			r.ReasonText = "the first manifest could not be fingerprinted (" + obs.ErrorCode + "); nothing can be trusted"
		case obs.Held:
			r.Status, r.Reason = Quarantined, ReasonQuarantined
			r.ReasonText = "a new listing variant of a quarantined server is held with it; only an explicit approve restores it"
		case cmp.Approved && len(cmp.Unmatched) == 0:
			b := Baseline{Version: 1, Hash: obs.Hash, CapturedAtMs: obsMs, ApprovedAtMs: nowMs, ApprovedBy: ActorVariant, Reason: ReasonVariantMatched}
			r.Status, r.Reason, r.Actor = Verified, ReasonVariantMatched, ActorVariant
			r.ReasonText = "a new listing variant whose every item equals a definition approved for another variant of the server becomes baseline v1"
			setBaseline(&r, &b, obs.Items)
			r.ReferenceVariant, r.ReferenceHash = cmp.ReferenceVariant, cmp.ReferenceHash
			out.NewBaseline = &b
		case cmp.Approved:
			r.Status, r.Reason, r.Severity = Changed, ReasonVariantUnmatched, cmp.Severity
			r.DriftAtMs = nowMs
			if pol.Posture == Strict {
				r.Status, r.DriftAtMs = Pending, 0
			}
			r.ReferenceVariant, r.ReferenceHash = cmp.ReferenceVariant, cmp.ReferenceHash
			r.ReasonText = fmt.Sprintf("a new listing variant with %s that no other variant of the server approved (%s); an admin must approve %s",
				plural(len(cmp.Unmatched), "item"), clipList(cmp.Unmatched, 5), obs.Hash)
		case pol.Posture == Strict:
			r.Status, r.Reason = Pending, ReasonPendingApproval
			r.ReasonText = "never seen before; the strict posture waits for an admin to approve " + obs.Hash
		default:
			b := Baseline{Version: 1, Hash: obs.Hash, CapturedAtMs: obsMs, ApprovedAtMs: nowMs, ApprovedBy: ActorTOFU, Reason: ReasonFirstBaseline}
			r.Status, r.Reason, r.ReasonText, r.Actor = Verified, ReasonFirstBaseline, "first manifest seen becomes baseline v1 (trust on first use)", ActorTOFU
			setBaseline(&r, &b, obs.Items)
			out.NewBaseline = &b
		}
		out.Record = r
		return out
	}
	r := cloneRecord(rec)
	out := Outcome{Previous: rec.Status}
	if applied(&r, obs.EventID) {
		return out // a redelivery: its effect is already in the record
	}
	if obsMs < r.LiveObservedMs && (obs.Hash != r.LiveHash || obs.ErrorCode != r.LiveError) {
		// An older observation (a late redelivery, a slow proxy) never
		// replaces a newer one.
		return out
	}
	moved := obs.Policy != nil && applyPolicy(&r, *obs.Policy, obs.WantsLiveHash, obs.ErrorCode != "")
	sameLive := obs.Hash == r.LiveHash && obs.ErrorCode == r.LiveError
	matches := obs.ErrorCode == "" && obs.Hash == r.BaselineHash && r.BaselineHash != ""
	// unseen: a record an import made before any proxy listed the variant
	// (no live manifest yet); its first sight is judged against the
	// imported baseline (import.go).
	unseen := rec.LiveHash == "" && rec.LiveError == "" && rec.LiveObservedMs == 0
	r.LiveHash, r.LiveError, r.LiveObservedMs = obs.Hash, obs.ErrorCode, obsMs
	filled := fillItems(&r, obs)
	// fillIn stores item hashes that the record lacked (it was written
	// before they were kept), when nothing else changed.
	fillIn := func() Outcome {
		if !filled && !moved && !unseen {
			return out
		}
		r.UpdatedAtMs = nowMs
		remember(&r, obs.EventID)
		out.Record, out.Write = r, true
		out.Announce = r.Serve() != rec.Serve()
		return out
	}

	switch r.Status {
	case Verified:
		if matches {
			return fillIn() // the hot path: nothing changed, nothing to write
		}
		a := Assessment{Severity: "critical"}
		if obs.ErrorCode == "" && obs.Assess != nil {
			a = obs.Assess(r.BaselineHash, obs.Hash)
		}
		r.Severity, r.Benign = a.Severity, a.Benign
		r.Instructions = findInstructions(r.BaselineHash, obs, a)
		strictFirst := unseen && r.Policy.Posture == Strict // an imported baseline's first sight under strict
		if r.Policy.Guard && a.Benign && obs.ErrorCode == "" && !strictFirst {
			b := Baseline{Version: r.BaselineVersion + 1, Hash: obs.Hash, CapturedAtMs: obsMs, ApprovedAtMs: nowMs,
				ApprovedBy: ActorGuard, Reason: ReasonAutoApproved}
			setBaseline(&r, &b, obs.Items)
			// The verdict says what was accepted: benign, and how severe.
			r.Severity, r.Benign = a.Severity, true
			r.Reason, r.Actor = ReasonAutoApproved, ActorGuard
			r.ReasonText = fmt.Sprintf("a provably benign change (%s) was accepted as baseline v%d", a.Severity, b.Version)
			out.NewBaseline = &b
		} else {
			r.Status, r.DriftAtMs, r.Actor = Changed, nowMs, "system"
			r.Reason, r.ReasonText = driftReason(obs, a.Severity)
			if a.Note != "" {
				r.ReasonText += "; not benign: " + a.Note
			}
			if strictFirst && obs.ErrorCode == "" {
				r.Status, r.DriftAtMs, r.Reason = Pending, 0, ReasonPendingApproval
				r.ReasonText = fmt.Sprintf("the first manifest seen, %s, differs from the imported baseline v%d (%s); the strict posture waits for an admin to approve it", obs.Hash, r.BaselineVersion, a.Severity)
			}
		}
	case Changed, Pending, Quarantined:
		// Drift never passes by itself: a manifest that reverts to the
		// baseline keeps the status until an admin acts. Only the live hash
		// moves, so that an approval names what is live now.
		if sameLive {
			if r.Status == Changed && r.Withholding() && r.BaselineHash != "" && obs.ErrorCode == "" &&
				obs.Hash != r.BaselineHash && !r.InstructionsCompared() && obs.Assess != nil {
				// Under withhold_changed, the instructions of this live
				// manifest were never compared with the baseline's (the
				// policy changed after it was seen, or the baseline moved):
				// compare them now (status.Record.Confirms asks proxies for
				// the whole manifest for it).
				r.Instructions = findInstructions(r.BaselineHash, obs, obs.Assess(r.BaselineHash, obs.Hash))
				filled = true
			}
			return fillIn() // nothing new: the record already says all of it
		}
		r.Severity, r.Benign, r.Instructions = "", false, nil
		base := r.BaselineHash
		if base == "" {
			base = r.ReferenceHash // a new variant is assessed against the variant it was compared with
		}
		if obs.ErrorCode == "" && obs.Hash != base && base != "" && obs.Assess != nil {
			a := obs.Assess(base, obs.Hash)
			r.Severity, r.Benign = a.Severity, a.Benign
			if base == r.BaselineHash {
				r.Instructions = findInstructions(base, obs, a)
			}
		}
		switch r.Status {
		case Changed:
			if r.Reason == ReasonVariantUnmatched && r.BaselineHash == "" && obs.ErrorCode == "" {
				r.ReasonText = "a new listing variant that no other variant of the server approved; an admin must approve " + obs.Hash
				break
			}
			r.Reason, r.ReasonText = driftReason(obs, r.Severity)
		case Pending:
			if obs.ErrorCode != "" {
				r.Reason, r.ReasonText = ReasonUnfingerprintable, "the live manifest could not be fingerprinted ("+obs.ErrorCode+"); nothing can be approved"
			} else {
				r.Reason, r.ReasonText = ReasonPendingApproval, "waiting for an admin to approve "+obs.Hash
			}
		}
		r.Actor = "system"
	}
	r.UpdatedAtMs = nowMs
	remember(&r, obs.EventID)
	out.Record, out.Write, out.Announce = r, true, true
	return out
}

// applyPolicy applies the settings the policy resolves for the server to
// r: posture, on_drift and guard at once; hashing settings other than the
// record's only as PolicyWants (with the live manifest's hash under them,
// when known). It reports whether r changed.
func applyPolicy(r *Record, p Policy, wantsLive string, failed bool) bool {
	before, wants, live := r.Policy, r.PolicyWants, r.PolicyWantsLiveHash
	r.Policy.Posture, r.Policy.OnDrift, r.Policy.Guard = p.Posture, p.OnDrift, p.Guard
	if h := p.Hashing(); h != r.Policy.Hashing() {
		if wants == nil || *wants != h {
			r.PolicyWants, r.PolicyWantsLiveHash = &h, ""
		}
		switch {
		case wantsLive != "":
			r.PolicyWantsLiveHash = wantsLive
		case failed:
			r.PolicyWantsLiveHash = "" // nothing sound to re-baseline to
		}
	} else {
		r.PolicyWants, r.PolicyWantsLiveHash = nil, ""
	}
	return r.Policy.Posture != before.Posture || r.Policy.OnDrift != before.OnDrift || r.Policy.Guard != before.Guard ||
		(r.PolicyWants == nil) != (wants == nil) || (wants != nil && r.PolicyWants != nil && *wants != *r.PolicyWants) ||
		r.PolicyWantsLiveHash != live
}

// Resettle applies the drift settings the tenant's policy resolves now to
// a record, without an observation: the service's sweep of a tenant's
// records after its policy changed, so that an idle server is judged by
// the new settings at once. Posture, action on drift and guard take effect
// (a changed variant is served under alert and withheld under block, and
// that is announced); a hashing change is only marked wanted (PolicyWants)
// and waits for an explicit re-baseline, as it does at an observation.
// Status, baseline and live manifest are unchanged.
func Resettle(rec *Record, pol Policy, now time.Time) Outcome {
	if rec == nil {
		return Outcome{}
	}
	r := cloneRecord(rec)
	if !applyPolicy(&r, pol, "", false) {
		return Outcome{Previous: rec.Status}
	}
	r.UpdatedAtMs = now.UnixMilli()
	return Outcome{Record: r, Write: true, Announce: r.Serve() != rec.Serve(), Previous: rec.Status}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func clipList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}

func driftReason(obs Observation, severity string) (string, string) {
	if obs.ErrorCode != "" {
		return ReasonUnfingerprintable, "the live manifest could not be fingerprinted (" + obs.ErrorCode + ")"
	}
	return ReasonDrift, "the live manifest " + obs.Hash + " differs from the baseline (" + severity + ")"
}

// findInstructions is the record's finding on the observation's
// instructions against the baseline base, from the assessment of the two
// (nil when there is none to make: no live manifest).
func findInstructions(base string, obs Observation, a Assessment) *status.InstructionsFinding {
	if obs.ErrorCode != "" || obs.Hash == "" || base == "" {
		return nil
	}
	return &status.InstructionsFinding{Baseline: base, Live: obs.Hash, Changed: !a.InstructionsSame}
}

// setBaseline makes b the record's baseline, with its item hashes when
// items are those of b (a baseline is always the live manifest, so the
// record has no live items apart from it). The items go into the version
// (b.Items), which the record names (BaselineItemsVersion) rather than
// holds once stored (status.Encode).
func setBaseline(r *Record, b *Baseline, items *Items) {
	r.BaselineVersion, r.BaselineHash = b.Version, b.Hash
	r.BaselineItems, r.BaselineItemsVersion, r.LiveItems, r.ItemsOmitted = nil, 0, nil, false
	b.Items = nil
	if items.Of(b.Hash) {
		r.BaselineItems, r.BaselineItemsVersion, b.Items = items, b.Version, items
	}
	r.ReferenceVariant, r.ReferenceHash = "", ""
	r.CapturedAtMs, r.ApprovedAtMs, r.ApprovedBy = b.CapturedAtMs, b.ApprovedAtMs, b.ApprovedBy
	r.DriftAtMs, r.Severity, r.Benign, r.Instructions = 0, "", false, nil
}

// fillItems keeps the observation's item hashes of the baseline when the
// record lacks them and the manifest is the baseline (a record written
// before they were kept fills in). It reports whether they were added.
// Live items are not kept (status.Encode never stores them): an approve
// reads them from the stored manifest.
func fillItems(r *Record, obs Observation) bool {
	r.LiveItems = nil
	if obs.ErrorCode != "" || r.ItemsOmitted {
		// A record whose items did not fit is not filled in again and
		// again: each time they would be left out (status.Encode).
		return false
	}
	if r.BaselineHash != "" && !r.HasBaselineItems() && obs.Items.Of(r.BaselineHash) {
		r.BaselineItems = obs.Items
		return true
	}
	return false
}

func cloneRecord(r *Record) Record {
	c := *r
	c.Applied = slices.Clone(r.Applied)
	return c
}

// Errors of admin actions: sentinels of their stable codes (package coded),
// which errors.Is matches to every error with the code.
var (
	ErrNotFound         = coded.New("not_found", "")
	ErrStaleHash        = coded.New("stale_hash", "")
	ErrUnfingerprinted  = coded.New("unfingerprintable", "")
	ErrNothingToApprove = coded.New("nothing_to_approve", "")
)

// Approve re-baselines rec to the live manifest, which must be the hash the
// admin reviewed. The new baseline takes the live manifest's item hashes
// from the record; items are for a record that lacks them (written before
// they were kept): the caller's reading of the manifest, or nil.
func Approve(rec *Record, hash, actor string, items *Items, now time.Time) (Outcome, error) {
	if err := approvable(rec, hash); err != nil {
		return Outcome{}, err
	}
	r := cloneRecord(rec)
	out := Outcome{Previous: rec.Status}
	its := ItemsFor(rec, hash)
	if its == nil && items.Of(hash) {
		its = items
	}
	nowMs := now.UnixMilli()
	if r.Status == Verified && r.BaselineHash == hash {
		if r.HasBaselineItems() || its == nil {
			return out, nil // already the approved baseline
		}
		r.BaselineItems, r.UpdatedAtMs = its, nowMs // approved before its items were kept
		out.Record, out.Write, out.Announce = r, true, true
		return out, nil
	}
	b := Baseline{Version: r.BaselineVersion + 1, Hash: hash, CapturedAtMs: r.LiveObservedMs, ApprovedAtMs: nowMs, ApprovedBy: actor, Reason: ReasonApproved}
	setBaseline(&r, &b, its)
	r.Status, r.Reason, r.Actor, r.UpdatedAtMs = Verified, ReasonApproved, actor, nowMs
	r.ReasonText = fmt.Sprintf("approved by %s as baseline v%d", actor, b.Version)
	out.Record, out.Write, out.Announce, out.NewBaseline = r, true, true, &b
	return out, nil
}

// approvable checks that rec has a sound live manifest and that it is
// hash, the one the admin reviewed: what every approve needs.
func approvable(rec *Record, hash string) error {
	switch {
	case rec == nil:
		return coded.Errorf(ErrNotFound.Code, "no manifest of this server has been observed")
	case rec.LiveError != "":
		return coded.Errorf(ErrUnfingerprinted.Code, "the live manifest could not be fingerprinted (%s); there is nothing sound to approve", rec.LiveError)
	case rec.LiveHash == "":
		return coded.Errorf(ErrNothingToApprove.Code, "no live manifest")
	case hash != rec.LiveHash:
		return coded.Errorf(ErrStaleHash.Code, "you approved %s but the live manifest is now %s; review it and approve that hash", hash, rec.LiveHash)
	}
	return nil
}

// ItemsFor returns the item hashes the record holds of the manifest with
// the given hash (its live manifest's or its baseline's), or nil.
func ItemsFor(rec *Record, hash string) *Items {
	switch {
	case rec.LiveItems.Of(hash):
		return rec.LiveItems
	case rec.BaselineItems.Of(hash):
		return rec.BaselineItems
	}
	return nil
}

// Quarantine holds one variant's record until an explicit approve: what a
// server's hold does to each of its variants (see Hold). A variant never
// seen has no record to hold; the server's hold covers it.
func Quarantine(rec *Record, actor, reason string, now time.Time) Outcome {
	if rec == nil || rec.Status == Quarantined {
		out := Outcome{Previous: Unknown}
		if rec != nil {
			out.Previous = rec.Status
		}
		return out
	}
	r, prev := cloneRecord(rec), rec.Status
	r.Status, r.Reason, r.Actor, r.UpdatedAtMs = Quarantined, ReasonQuarantined, actor, now.UnixMilli()
	r.ReasonText = "quarantined by " + actor
	if reason != "" {
		r.ReasonText += ": " + reason
	}
	return Outcome{Record: r, Write: true, Announce: true, Previous: prev}
}

// ReasonRebaselined: an admin re-baselined a variant to the hashing
// settings its tenant's policy asks for.
const ReasonRebaselined = "rebaselined"

// Errors of Rebaseline.
var (
	ErrNothingToRebaseline = coded.New("nothing_to_rebaseline", "")
	ErrNotVerified         = coded.New("not_verified", "")
)

// Rebaseline moves a verified variant to the hashing settings its
// tenant's policy asks for (rec.PolicyWants): the approved manifest,
// hashed with them, becomes the next baseline version, approved by actor,
// who names its hash (rec.PolicyWantsLiveHash) as approve names a hash.
// items are that manifest's item hashes with the new settings, read by the
// caller from the stored manifest, which the caller checked is the
// approved one (it hashes to the baseline with the record's settings). A
// variant that is not verified is refused: re-baselining would approve a
// change nobody reviewed; approve it (or quarantine it) first.
func Rebaseline(rec *Record, hash, actor string, items *Items, now time.Time) (Outcome, error) {
	if rec == nil {
		return Outcome{}, coded.Errorf(ErrNotFound.Code, "no manifest of this server has been observed")
	}
	if rec.PolicyWants == nil {
		return Outcome{}, coded.Errorf(ErrNothingToRebaseline.Code, "the policy asks for the settings variant %s already has (%s)", rec.Variant, rec.Policy.Hashing())
	}
	if rec.Status != Verified || rec.LiveError != "" || rec.LiveHash != rec.BaselineHash {
		return Outcome{}, coded.Errorf(ErrNotVerified.Code, "variant %s is %s, not verified at its baseline: a re-baseline would approve what nobody reviewed; approve or quarantine it first", rec.Variant, rec.Status)
	}
	if rec.PolicyWantsLiveHash == "" {
		return Outcome{}, coded.Errorf(ErrNothingToRebaseline.Code, "no listing of variant %s has been fingerprinted with %s yet; it will be with the next one", rec.Variant, *rec.PolicyWants)
	}
	if hash != rec.PolicyWantsLiveHash {
		return Outcome{}, coded.Errorf(ErrStaleHash.Code, "you named %s but the live manifest with %s is %s; review it and name that hash", hash, *rec.PolicyWants, rec.PolicyWantsLiveHash)
	}
	if !items.Of(hash) {
		return Outcome{}, coded.Errorf(ErrNothingToRebaseline.Code, "the item hashes of %s are not at hand", hash)
	}
	r := cloneRecord(rec)
	nowMs := now.UnixMilli()
	b := Baseline{Version: r.BaselineVersion + 1, Hash: hash, CapturedAtMs: r.LiveObservedMs, ApprovedAtMs: nowMs, ApprovedBy: actor, Reason: ReasonRebaselined}
	r.Policy = r.Policy.WithHashing(*rec.PolicyWants)
	r.PolicyWants, r.PolicyWantsLiveHash = nil, ""
	r.LiveHash = hash
	setBaseline(&r, &b, items)
	r.Status, r.Reason, r.Actor, r.UpdatedAtMs = Verified, ReasonRebaselined, actor, nowMs
	r.ReasonText = fmt.Sprintf("re-baselined by %s to %s as baseline v%d", actor, r.Policy.Hashing(), b.Version)
	return Outcome{Record: r, Write: true, Announce: true, Previous: rec.Status, NewBaseline: &b}, nil
}
