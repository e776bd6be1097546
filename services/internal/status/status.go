// Package status is the status record contract: the values the drift
// service writes to the status bucket (a server's record, and the record of
// each of its listing variants, with the item hashes of its approved
// baseline), the baseline versions it keeps, the serve rule, and the shape
// the admin API shows them in. The drift service is their one writer; the
// proxy's fleet gate, driftctl, stack and the review console read them
// through this package, so that there is one definition of each field and
// one answer to "is this served?". docs/bus.md describes the JSON.
package status

import (
	"errors"
	"fmt"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Status is the schema status of one listing variant of a server.
type Status string

// The statuses of the design: only verified is served (and changed, under
// the alert posture, or its unchanged items under withhold_changed).
const (
	Unknown     Status = "unknown"
	Verified    Status = "verified"
	Changed     Status = "changed"
	Pending     Status = "pending"
	Quarantined Status = "quarantined"
)

// Posture and drift policies.
const (
	Discovery = "discovery" // trust on first use: the first manifest becomes baseline v1
	Strict    = "strict"    // a server never seen waits in pending for approval
	Block     = "block"     // drift withholds the server's tools
	Alert     = "alert"     // drift is announced and audited, but tools are served
	// WithholdChanged: drift withholds the changed and added items only;
	// the items whose hash equals the baseline's stay served, unless the
	// instructions changed (they speak for every tool: the whole server is
	// withheld).
	WithholdChanged = "withhold_changed"
)

// OnDriftValid reports whether s is an action on drift (Block, Alert or
// WithholdChanged).
func OnDriftValid(s string) bool { return s == Block || s == Alert || s == WithholdChanged }

// Policy says how a server is treated; it is recorded with the server when
// its record is created.
type Policy struct {
	Posture string `json:"posture"`  // Discovery or Strict
	OnDrift string `json:"on_drift"` // Block, Alert or WithholdChanged
	Guard   bool   `json:"guard"`    // auto-accept a provably benign change as a new baseline
	// Hash is the fingerprint's hash algorithm ("sha256" when empty) and
	// Annotations whether tool annotations are covered (true when nil):
	// the settings the baseline's hashes were made with, so that every
	// part judges the server by the same ones (policy.DriftSetting).
	Hash        string `json:"hash,omitempty"`
	Annotations *bool  `json:"annotations,omitempty"`
	// Form is the canonical form the baseline's hashes were made in
	// (docs/canonical-form.md): FormV2, or empty for mcpdrift/v1, the form
	// of every record made before forms were named (docs/adr/0015).
	Form string `json:"form,omitempty"`
}

// The canonical forms as the settings name them. FormV1 is empty, so that
// a record, a lockfile or a policy_wants written before forms were named
// reads as the form its hashes were made in.
const (
	FormV1     = ""
	FormV2     = "mcpdrift/v2"
	FormLatest = FormV2 // the form of a server first seen, unless its policy names another
)

// Hashing is how a server's hashes are made: what changing moves every
// hash of it, so that it never takes effect without an explicit
// re-baseline.
type Hashing struct {
	Hash        string `json:"hash"`           // "sha256" or "sha512"
	Annotations bool   `json:"annotations"`    // tool annotations covered
	Form        string `json:"form,omitempty"` // FormV1 (empty) or FormV2
}

// DefaultHashing is the hashing of a policy that says nothing of it: what
// a server first seen is hashed with. A record that says nothing of its
// form is of FormV1 (Policy.Hashing), not of DefaultHashing's.
var DefaultHashing = Hashing{Hash: "sha256", Annotations: true, Form: FormLatest}

// Hashing returns p's hashing settings, defaults filled in; a record that
// names no form was hashed in FormV1.
func (p Policy) Hashing() Hashing {
	h := DefaultHashing
	if p.Hash != "" {
		h.Hash = p.Hash
	}
	if p.Annotations != nil {
		h.Annotations = *p.Annotations
	}
	h.Form = p.Form
	return h
}

// WithHashing returns p with h as its hashing settings, written so that
// the defaults leave the record's JSON as it was before they existed.
func (p Policy) WithHashing(h Hashing) Policy {
	p.Hash, p.Annotations = "", nil
	if h.Hash != DefaultHashing.Hash {
		p.Hash = h.Hash
	}
	if !h.Annotations {
		p.Annotations = &h.Annotations
	}
	p.Form = h.Form
	return p
}

// FormOf returns the engine's form named by a setting: FormV1 for "" (or
// its tag, "mcpdrift/v1"), FormV2 for "mcpdrift/v2".
func FormOf(name string) (surface.Form, bool) {
	if name == FormV1 {
		return surface.FormV1, true
	}
	return surface.FormNamed(name)
}

// FormName is the setting's name of an engine form: FormV1 is "".
func FormName(f surface.Form) string {
	if f == surface.FormV1 {
		return FormV1
	}
	return f.String()
}

// Options are the engine's options for h. An unknown algorithm or form is
// an error: nothing is hashed by a setting that is not understood.
func (h Hashing) Options() (surface.Options, error) {
	alg, ok := surface.AlgNamed(h.Hash)
	if !ok {
		return surface.Options{}, fmt.Errorf("hash %q: want sha256 or sha512", h.Hash)
	}
	form, ok := FormOf(h.Form)
	if !ok || h.Form == surface.FormV1.String() {
		return surface.Options{}, fmt.Errorf("form %q: want %s or none (mcpdrift/v1)", h.Form, FormV2)
	}
	return surface.Options{Hash: alg, ExcludeAnnotations: !h.Annotations, Form: form}, nil
}

// HashingOf returns the settings a hash was made with, as far as the hash
// says (its algorithm tag) with the annotations switch and form given.
func HashingOf(hash string, annotations bool, form string) (Hashing, error) {
	d, err := surface.ParseDigest(hash)
	if err != nil {
		return Hashing{}, err
	}
	if _, ok := FormOf(form); !ok || form == surface.FormV1.String() {
		return Hashing{}, fmt.Errorf("form %q: want %s or none (mcpdrift/v1)", form, FormV2)
	}
	return Hashing{Hash: d.Alg().String(), Annotations: annotations, Form: form}, nil
}

func (h Hashing) String() string {
	s := h.Hash + ", annotations not covered"
	if h.Annotations {
		s = h.Hash + ", annotations covered"
	}
	if h.Form != FormV1 {
		s += ", form " + h.Form
	}
	return s
}

// Validate reports a policy with unknown values.
func (p Policy) Validate() error {
	var errs []error
	if _, ok := surface.AlgNamed(p.Hash); !ok {
		errs = append(errs, fmt.Errorf("hash %q: want sha256 or sha512", p.Hash))
	}
	if _, ok := FormOf(p.Form); !ok || p.Form == surface.FormV1.String() {
		errs = append(errs, fmt.Errorf("form %q: want %s or none (mcpdrift/v1)", p.Form, FormV2))
	}
	if p.Posture != Discovery && p.Posture != Strict {
		errs = append(errs, fmt.Errorf("posture %q: want %s or %s", p.Posture, Discovery, Strict))
	}
	if !OnDriftValid(p.OnDrift) {
		errs = append(errs, fmt.Errorf("on-drift %q: want %s, %s or %s", p.OnDrift, Block, Alert, WithholdChanged))
	}
	return errors.Join(errs...)
}

// Record is a server's status for one listing variant: the value stored in
// the status bucket under <tenant>.<server>.<variant> (JSON).
type Record struct {
	Tenant  string `json:"tenant"`
	Server  string `json:"server"`
	Variant string `json:"variant"`
	Status  Status `json:"status"`
	Policy  Policy `json:"policy"`

	BaselineVersion int64  `json:"baseline_version"`
	BaselineHash    string `json:"baseline_hash,omitempty"`
	CapturedAtMs    int64  `json:"captured_at_ms,omitempty"` // when the baseline's manifest was observed
	ApprovedAtMs    int64  `json:"approved_at_ms,omitempty"`
	ApprovedBy      string `json:"approved_by,omitempty"`
	// BaselineItems are the item hashes of the approved baseline, as the
	// fingerprint service computed them: what proxies compare each live
	// item with. A record stores them only when its baseline version does
	// not (BaselineItemsVersion): an earlier baseline, kept before versions
	// held them. Nil and no BaselineItemsVersion: the variant is not served
	// until they fill in (docs/bus.md).
	BaselineItems *Items `json:"baseline_items,omitempty"`
	// BaselineItemsVersion is the baseline version whose entry in the
	// baselines bucket (Baseline.Items) holds the baseline's item hashes:
	// the record names them instead of holding them, so that it does not
	// grow with the manifest. Equal to BaselineVersion, or 0.
	BaselineItemsVersion int64 `json:"baseline_items_version,omitempty"`

	LiveHash       string `json:"live_hash,omitempty"`        // the last manifest observed
	LiveError      string `json:"live_error,omitempty"`       // its error code, when it could not be fingerprinted
	LiveObservedMs int64  `json:"live_observed_ms,omitempty"` // when it was observed
	// LiveItems are the item hashes of the live manifest while it differs
	// from the baseline, so that an approve makes them the baseline's. They
	// are never stored (Encode leaves them out: a record does not grow with
	// the manifest); an approve reads them from the stored manifest.
	// Records written before that may hold them. Proxies never read them.
	LiveItems *Items `json:"live_items,omitempty"`
	// ItemsOmitted: the record would exceed MaxRecordBytes with its item
	// hashes, so they were left out (the live ones first); without the
	// baseline's, the variant is not served.
	ItemsOmitted bool   `json:"items_omitted,omitempty"`
	DriftAtMs    int64  `json:"drift_at_ms,omitempty"` // when the live manifest first differed from the baseline
	Severity     string `json:"severity,omitempty"`    // of the live diff against the baseline
	Benign       bool   `json:"benign,omitempty"`
	// Instructions is what the drift service found of the live manifest's
	// instructions against the baseline's when it compared the two
	// manifests (nil: never compared). It speaks only for the two hashes it
	// names: once either moves it says nothing, and the instructions count
	// as changed (InstructionsChanged) until they are compared again.
	Instructions *InstructionsFinding `json:"instructions,omitempty"`

	// A variant first seen after another variant of the server was
	// approved is compared with that variant's baseline: the one closest to
	// it is named here (diff --live shows the live manifest against it
	// until the variant has a baseline of its own).
	ReferenceVariant string `json:"reference_variant,omitempty"`
	ReferenceHash    string `json:"reference_hash,omitempty"`

	// PolicyWants are the hashing settings the tenant's policy asks for
	// when they differ from the record's (Policy): they would move every
	// hash, so the record keeps its own until an admin re-baselines
	// (docs/policy-drift-settings.md). PolicyWantsLiveHash is the live
	// manifest's hash under them, what a re-baseline names ("" until a
	// listing under them was fingerprinted).
	PolicyWants         *Hashing `json:"policy_wants,omitempty"`
	PolicyWantsLiveHash string   `json:"policy_wants_live_hash,omitempty"`

	Reason      string   `json:"reason"`
	ReasonText  string   `json:"reason_text,omitempty"`
	Actor       string   `json:"actor,omitempty"`
	UpdatedAtMs int64    `json:"updated_at_ms"`
	Applied     []string `json:"applied,omitempty"` // recent event ids, for exactly-once effect
}

// InstructionsFinding is the drift service's comparison of a live
// manifest's instructions with a baseline's (Record.Instructions).
type InstructionsFinding struct {
	Baseline string `json:"baseline"` // the baseline hash compared
	Live     string `json:"live"`     // the live hash compared
	Changed  bool   `json:"changed"`  // the two differ (also: one has instructions and the other none)
}

// Serve is the serve rule: whether proxies serve the variant's items, on
// its own record (a held server serves none: see Serves). A variant is
// served when it is verified, or changed under the alert policy, or
// changed under the withhold_changed policy with its instructions
// unchanged (proxies then serve only the items whose hash equals the
// baseline's), and its record carries the item hashes of its approved
// baseline; nothing without them is served, whatever the status says.
func (r *Record) Serve() bool {
	switch {
	case r.Status == Verified:
	case r.Status == Changed && r.Policy.OnDrift == Alert:
	case r.Status == Changed && r.Policy.OnDrift == WithholdChanged && !r.InstructionsChanged():
	default:
		return false
	}
	return r.HasBaselineItems()
}

// InstructionsChanged reports whether the live manifest's instructions
// may differ from the baseline's: unless the record's finding
// (Instructions) names this very baseline and live manifest and found them
// equal, they count as changed. A live manifest that could not be
// fingerprinted counts as changed too.
func (r *Record) InstructionsChanged() bool {
	if r.LiveError != "" {
		return true
	}
	if r.LiveHash != "" && r.LiveHash == r.BaselineHash {
		return false
	}
	return !r.InstructionsCompared() || r.Instructions.Changed
}

// InstructionsCompared reports whether the record's instructions finding
// is about its baseline and live manifest.
func (r *Record) InstructionsCompared() bool {
	f := r.Instructions
	return f != nil && f.Live != "" && f.Baseline == r.BaselineHash && f.Live == r.LiveHash
}

// Withholding reports whether the record's drift policy is
// withhold_changed: a changed variant is then served item by item, only
// what equals the baseline.
func (r *Record) Withholding() bool { return r.Policy.OnDrift == WithholdChanged }

// HasBaselineItems reports whether the baseline's item hashes are known:
// held by the record, or by the entry of its baseline version
// (BaselineItemsVersion), which a reader fetches and checks.
func (r *Record) HasBaselineItems() bool {
	if r.BaselineHash == "" {
		return false
	}
	return r.BaselineItems.Of(r.BaselineHash) || r.ItemsInBaseline()
}

// ItemsInBaseline reports whether the record names the baseline version
// entry that holds its baseline's item hashes instead of holding them.
func (r *Record) ItemsInBaseline() bool {
	return r.BaselineVersion > 0 && r.BaselineItemsVersion == r.BaselineVersion
}

// Confirms returns the surface hash a proxy may report a re-listing of in
// the compact form (docs/bus.md, "Compact re-listings"): the live
// manifest's hash, which the pipeline fingerprinted itself from a whole
// manifest, so that deciding on it again would change nothing but the
// observation time. "" when there is none, or the record still needs a
// whole manifest of it: no live hash, a live manifest that could not be
// fingerprinted, baseline item hashes the drift service fills in from the
// next fingerprint of it (a record written before they were kept), a policy
// asking for other hashing settings whose live hash (PolicyWantsLiveHash)
// is still to be made, or a changed variant under withhold_changed whose
// live instructions the drift service has still to compare with the
// baseline's (Instructions).
func (r *Record) Confirms() string {
	switch {
	case r.LiveHash == "" || r.LiveError != "":
		return ""
	case r.PolicyWants != nil && r.PolicyWantsLiveHash == "":
		return ""
	case r.ItemsOmitted: // never filled in (see the drift service's fillItems)
	case r.LiveHash == r.BaselineHash && !r.HasBaselineItems():
		return ""
	case r.Status == Changed && r.Withholding() && r.LiveHash != r.BaselineHash && !r.InstructionsCompared():
		// Under withhold_changed, the instructions of this live manifest
		// were never compared with the baseline's (the policy changed
		// after it was seen, or a baseline moved): the next whole manifest
		// lets the drift service compare them.
		return ""
	}
	// A live manifest that differs from the baseline has nothing to fill
	// in: live items are not kept (Encode).
	return r.LiveHash
}

// Alerting reports whether the record's drift policy is alert: a served
// variant is then served whole, drift included, and every call forwarded
// only because of it is reported.
func (r *Record) Alerting() bool { return r.Policy.OnDrift == Alert }

// Serves is the serve rule with the server's hold: srv (nil when the
// server has no record of its own) holds every variant, also one with no
// record.
func Serves(srv *Server, r *Record) bool { return !srv.IsHeld() && r != nil && r.Serve() }

// Server is the server-level record, beside its variants' records in the
// status bucket (key <tenant>.<server>): the hold that quarantines every
// listing variant of the server, present and future, and the variant whose
// first manifest was trusted on first use. Proxies read Held: a held server
// serves no variant, also one they have no record of.
type Server struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`

	Held       bool   `json:"held"`
	HeldBy     string `json:"held_by,omitempty"`
	HeldAtMs   int64  `json:"held_at_ms,omitempty"`
	HeldReason string `json:"held_reason,omitempty"`
	// Who lifted the last hold, by approving a variant, and when.
	ReleasedBy   string `json:"released_by,omitempty"`
	ReleasedAtMs int64  `json:"released_at_ms,omitempty"`

	// FirstVariant is the one variant of the server that may be trusted on
	// first use (discovery): the first to claim it. Every other variant is
	// compared with what was approved.
	FirstVariant string `json:"first_variant,omitempty"`
	FirstAtMs    int64  `json:"first_at_ms,omitempty"`

	// Risk is the server's risk band and enforcement mode (nil: never
	// rated, which enforces nothing beyond the rules).
	Risk *Risk `json:"risk,omitempty"`

	UpdatedAtMs int64 `json:"updated_at_ms"`
}

// Risk is a server's risk band (low, medium, high, critical: what the
// engine found on its surface) and enforcement mode (allow, quarantine,
// block: policy.Mode). A re-scan only ratchets them tighter; only an admin
// relaxes them (SetBy names who set them last, "system" for a re-scan).
type Risk struct {
	Band    string   `json:"band"`
	Mode    string   `json:"mode"`
	Reasons []string `json:"reasons,omitempty"`
	SetBy   string   `json:"set_by,omitempty"`
	AtMs    int64    `json:"at_ms,omitempty"`
	// Surfaces are the surface hashes already rated into Band (the most
	// recent, bounded): a re-scan of one of them changes nothing, so that
	// an admin's relax stands until the server shows a surface not rated
	// yet.
	Surfaces []string `json:"surfaces,omitempty"`
}

// IsHeld reports whether srv holds its server; nil holds nothing.
func (srv *Server) IsHeld() bool { return srv != nil && srv.Held }

// Baseline is one approved version of a variant's surface, kept forever in
// the baselines bucket under <tenant>.<server>.<variant>.v<version>.
type Baseline struct {
	Version      int64  `json:"version"`
	Hash         string `json:"hash"`
	CapturedAtMs int64  `json:"captured_at_ms,omitempty"`
	ApprovedAtMs int64  `json:"approved_at_ms"`
	ApprovedBy   string `json:"approved_by"`
	Reason       string `json:"reason"`
	// Items are the item hashes of the version's surface (Hash), stored
	// once per version; the variant's status record names the version
	// (Record.BaselineItemsVersion) instead of holding them. Nil in a
	// version kept before they were.
	Items *Items `json:"items,omitempty"`
}

// View is a server as the drift service reads it: its own record (nil when
// it has none) and the record of every listing variant, ordered by variant.
type View struct {
	Tenant   string
	Server   string
	Hold     *Server
	Variants []Record
}

// Held reports whether the server is quarantined as a whole.
func (v *View) Held() bool { return v.Hold.IsHeld() }

// Serve reports whether a variant's record is served, the server's hold
// considered.
func (v *View) Serve(r *Record) bool { return Serves(v.Hold, r) }

// History is every baseline version of one listing variant, oldest first.
type History struct {
	Variant   string     `json:"variant"`
	Baselines []Baseline `json:"baselines"`
}
