// Package state is the schema-status state machine of the drift service,
// free of I/O: given a server's record and an event (a fingerprint, an
// approval, a quarantine), it returns the next record and what to announce.
// The service stores records in a JetStream key-value bucket with
// compare-and-set, so that this package is the only place transitions are
// decided.
package state

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Status is the schema status of a server (for one listing variant).
type Status string

// The statuses of the design: only verified is served (and changed, under
// the alert posture).
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
)

// Actors that are not people.
const (
	ActorTOFU  = "system:trust-on-first-use"
	ActorGuard = "system:guard"
)

// Policy says how a server is treated; it is recorded with the server when
// its record is created.
type Policy struct {
	Posture string `json:"posture"`  // Discovery or Strict
	OnDrift string `json:"on_drift"` // Block or Alert
	Guard   bool   `json:"guard"`    // auto-accept a provably benign change as a new baseline
}

// Validate reports a policy with unknown values.
func (p Policy) Validate() error {
	var errs []error
	if p.Posture != Discovery && p.Posture != Strict {
		errs = append(errs, fmt.Errorf("posture %q: want %s or %s", p.Posture, Discovery, Strict))
	}
	if p.OnDrift != Block && p.OnDrift != Alert {
		errs = append(errs, fmt.Errorf("on-drift %q: want %s or %s", p.OnDrift, Block, Alert))
	}
	return errors.Join(errs...)
}

// Record is a server's status for one listing variant: the value stored in
// the status bucket (JSON).
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

	LiveHash       string `json:"live_hash,omitempty"`        // the last manifest observed
	LiveError      string `json:"live_error,omitempty"`       // its error code, when it could not be fingerprinted
	LiveObservedMs int64  `json:"live_observed_ms,omitempty"` // when it was observed
	DriftAtMs      int64  `json:"drift_at_ms,omitempty"`      // when the live manifest first differed from the baseline
	Severity       string `json:"severity,omitempty"`         // of the live diff against the baseline
	Benign         bool   `json:"benign,omitempty"`

	Reason      string   `json:"reason"`
	ReasonText  string   `json:"reason_text,omitempty"`
	Actor       string   `json:"actor,omitempty"`
	UpdatedAtMs int64    `json:"updated_at_ms"`
	Applied     []string `json:"applied,omitempty"` // recent event ids, for exactly-once effect
}

// Serve reports whether proxies serve the server's tools.
func (r *Record) Serve() bool {
	return r.Status == Verified || (r.Status == Changed && r.Policy.OnDrift == Alert)
}

// Baseline is one approved version of a server's surface, kept forever.
type Baseline struct {
	Version      int64  `json:"version"`
	Hash         string `json:"hash"`
	CapturedAtMs int64  `json:"captured_at_ms,omitempty"`
	ApprovedAtMs int64  `json:"approved_at_ms"`
	ApprovedBy   string `json:"approved_by"`
	Reason       string `json:"reason"`
}

// Observation is a fingerprint result for the server.
type Observation struct {
	EventID    string
	Hash       string // "" when ErrorCode is set
	ErrorCode  string
	ObservedAt time.Time
	// Assess classifies the live surface against the baseline; called only
	// when the two differ. It returns the diff's severity and whether the
	// change is benign.
	Assess func(baselineHash, liveHash string) (severity string, benign bool)
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

func (r *Record) applied(id string) bool { return id != "" && slices.Contains(r.Applied, id) }

func (r *Record) remember(id string) {
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
		r.remember(obs.EventID)
		out := Outcome{Write: true, Announce: true, Previous: Unknown}
		switch {
		case obs.ErrorCode != "":
			r.Status, r.Reason = Pending, ReasonUnfingerprintable
			r.ReasonText = "the first manifest could not be fingerprinted (" + obs.ErrorCode + "); nothing can be trusted"
		case pol.Posture == Strict:
			r.Status, r.Reason = Pending, ReasonPendingApproval
			r.ReasonText = "never seen before; the strict posture waits for an admin to approve " + obs.Hash
		default:
			b := Baseline{Version: 1, Hash: obs.Hash, CapturedAtMs: obsMs, ApprovedAtMs: nowMs, ApprovedBy: ActorTOFU, Reason: ReasonFirstBaseline}
			r.Status, r.Reason, r.ReasonText, r.Actor = Verified, ReasonFirstBaseline, "first manifest seen becomes baseline v1 (trust on first use)", ActorTOFU
			r.setBaseline(b)
			out.NewBaseline = &b
		}
		out.Record = r
		return out
	}
	r := cloneRecord(rec)
	out := Outcome{Previous: rec.Status}
	if r.applied(obs.EventID) {
		return out // a redelivery: its effect is already in the record
	}
	if obsMs < r.LiveObservedMs && (obs.Hash != r.LiveHash || obs.ErrorCode != r.LiveError) {
		// An older observation (a late redelivery, a slow proxy) never
		// replaces a newer one.
		return out
	}
	sameLive := obs.Hash == r.LiveHash && obs.ErrorCode == r.LiveError
	matches := obs.ErrorCode == "" && obs.Hash == r.BaselineHash && r.BaselineHash != ""
	r.LiveHash, r.LiveError, r.LiveObservedMs = obs.Hash, obs.ErrorCode, obsMs

	switch r.Status {
	case Verified:
		if matches {
			return out // the hot path: nothing changed, nothing to write
		}
		sev, benign := "critical", false
		if obs.ErrorCode == "" && obs.Assess != nil {
			sev, benign = obs.Assess(r.BaselineHash, obs.Hash)
		}
		r.Severity, r.Benign = sev, benign
		if r.Policy.Guard && benign && obs.ErrorCode == "" {
			b := Baseline{Version: r.BaselineVersion + 1, Hash: obs.Hash, CapturedAtMs: obsMs, ApprovedAtMs: nowMs,
				ApprovedBy: ActorGuard, Reason: ReasonAutoApproved}
			r.setBaseline(b)
			r.Reason, r.Actor = ReasonAutoApproved, ActorGuard
			r.ReasonText = fmt.Sprintf("a provably benign change (%s) was accepted as baseline v%d", sev, b.Version)
			out.NewBaseline = &b
		} else {
			r.Status, r.DriftAtMs, r.Actor = Changed, nowMs, "system"
			r.Reason, r.ReasonText = driftReason(obs, sev)
		}
	case Changed, Pending, Quarantined:
		// Drift never passes by itself: a manifest that reverts to the
		// baseline keeps the status until an admin acts. Only the live hash
		// moves, so that an approval names what is live now.
		if sameLive {
			return out // nothing new: the record already says all of it
		}
		r.Severity, r.Benign = "", false
		if obs.ErrorCode == "" && obs.Hash != r.BaselineHash && r.BaselineHash != "" && obs.Assess != nil {
			r.Severity, r.Benign = obs.Assess(r.BaselineHash, obs.Hash)
		}
		switch r.Status {
		case Changed:
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
	r.remember(obs.EventID)
	out.Record, out.Write, out.Announce = r, true, true
	return out
}

func driftReason(obs Observation, severity string) (string, string) {
	if obs.ErrorCode != "" {
		return ReasonUnfingerprintable, "the live manifest could not be fingerprinted (" + obs.ErrorCode + ")"
	}
	return ReasonDrift, "the live manifest " + obs.Hash + " differs from the baseline (" + severity + ")"
}

func (r *Record) setBaseline(b Baseline) {
	r.BaselineVersion, r.BaselineHash = b.Version, b.Hash
	r.CapturedAtMs, r.ApprovedAtMs, r.ApprovedBy = b.CapturedAtMs, b.ApprovedAtMs, b.ApprovedBy
	r.DriftAtMs, r.Severity, r.Benign = 0, "", false
}

func cloneRecord(r *Record) Record {
	c := *r
	c.Applied = slices.Clone(r.Applied)
	return c
}

// Errors of admin actions; each has a stable code (its text).
var (
	ErrNotFound         = errors.New("not_found")
	ErrStaleHash        = errors.New("stale_hash")
	ErrUnfingerprinted  = errors.New("unfingerprintable")
	ErrNothingToApprove = errors.New("nothing_to_approve")
)

// Approve re-baselines rec to the live manifest, which must be the hash the
// admin reviewed.
func Approve(rec *Record, hash, actor string, now time.Time) (Outcome, error) {
	if rec == nil {
		return Outcome{}, fmt.Errorf("%w: no manifest of this server has been observed", ErrNotFound)
	}
	if rec.LiveError != "" {
		return Outcome{}, fmt.Errorf("%w: the live manifest could not be fingerprinted (%s); there is nothing sound to approve", ErrUnfingerprinted, rec.LiveError)
	}
	if rec.LiveHash == "" {
		return Outcome{}, fmt.Errorf("%w: no live manifest", ErrNothingToApprove)
	}
	if hash != rec.LiveHash {
		return Outcome{}, fmt.Errorf("%w: you approved %s but the live manifest is now %s; review it and approve that hash", ErrStaleHash, hash, rec.LiveHash)
	}
	r := cloneRecord(rec)
	out := Outcome{Previous: rec.Status}
	if r.Status == Verified && r.BaselineHash == hash {
		return out, nil // already the approved baseline
	}
	nowMs := now.UnixMilli()
	b := Baseline{Version: r.BaselineVersion + 1, Hash: hash, CapturedAtMs: r.LiveObservedMs, ApprovedAtMs: nowMs, ApprovedBy: actor, Reason: ReasonApproved}
	r.setBaseline(b)
	r.Status, r.Reason, r.Actor, r.UpdatedAtMs = Verified, ReasonApproved, actor, nowMs
	r.ReasonText = fmt.Sprintf("approved by %s as baseline v%d", actor, b.Version)
	out.Record, out.Write, out.Announce, out.NewBaseline = r, true, true, &b
	return out, nil
}

// Quarantine holds the server until an explicit approve. rec may be nil: a
// server can be quarantined before it is ever seen.
func Quarantine(rec *Record, tenant, server, variant string, pol Policy, actor, reason string, now time.Time) Outcome {
	var r Record
	prev := Unknown
	if rec != nil {
		r, prev = cloneRecord(rec), rec.Status
	} else {
		r = Record{Tenant: tenant, Server: server, Variant: variant, Policy: pol}
	}
	if r.Status == Quarantined {
		return Outcome{Previous: prev}
	}
	r.Status, r.Reason, r.Actor, r.UpdatedAtMs = Quarantined, ReasonQuarantined, actor, now.UnixMilli()
	r.ReasonText = "quarantined by " + actor
	if reason != "" {
		r.ReasonText += ": " + reason
	}
	return Outcome{Record: r, Write: true, Announce: true, Previous: prev}
}
