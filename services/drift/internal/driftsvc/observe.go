package driftsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// A fingerprint is applied in three steps (docs/services/drift.md):
//
//   - gather reads everything the decision needs: the variant's record
//     (the read the compare-and-set needs), the server's drift settings,
//     the fingerprint hashed with the record's settings (rehash, from the
//     stored manifest), for a variant seen for the first time the server
//     record and how the manifest compares with the other variants'
//     baselines, and the assessment of a drift from the baseline;
//   - decide, a pure function of those inputs, returns the transition;
//   - commit writes it: the server record when the variant claims the
//     server's first sight, the new baseline version, the variant's record
//     with compare-and-set, then the verdict. It reads nothing.
//
// On a conflict (another writer changed a record between gather and
// commit) Observe gathers again and decides again, at most maxConflicts
// times.

// inputs are everything the decision on one fingerprint needs.
type inputs struct {
	fp  *mcpdriftv1.Fingerprint
	key string
	// rec is the variant's record at rev (nil and 0: never seen); cached
	// when it came from the status cache rather than the bucket.
	rec    *state.Record
	rev    uint64
	cached bool
	// want is the server's drift settings as its tenant's policy resolves
	// them now.
	want state.Policy
	// live is the fingerprint as the record's hashing makes it.
	live underRecord
	// first is gathered for a variant never seen (rec nil).
	first *firstSight
	// assessed holds the assessments of the live manifest against a
	// baseline, by baseline hash, that decide asked for (needAssessment).
	assessed map[string]state.Assessment
	now      time.Time
}

// firstSight is what the decision on a variant's first manifest needs.
type firstSight struct {
	// srv is the server record at srvRev (nil: none yet).
	srv    *state.Server
	srvRev uint64
	// cmp compares the manifest with the current baselines of the server's
	// other variants (only when the server is not held and the fingerprint
	// has a hash).
	cmp state.Comparison
	// claimedRecorded: the variant that claimed the server's first sight
	// (srv.FirstVariant, another one) has a record.
	claimedRecorded bool
	// rating is the manifest's risk (rate), gathered when the variant may
	// claim the server's first sight, so that the claim carries it: one
	// write of the server record instead of two.
	rating *rating
}

// rating is a manifest's risk band, why, and the mode the tenant's policy
// gives that band for the server.
type rating struct {
	band    policy.Band
	mode    policy.Mode
	reasons []string
}

// transition is what a decision does.
type transition struct {
	out state.Outcome
	// claim is the server record to write before the variant's record: the
	// variant claims the server's trust on first use.
	claim *state.Server
	// claimRev is the server record's revision the claim was decided on
	// (its compare-and-set); claimCreate: there was none.
	claimRev    uint64
	claimCreate bool
	// redelivered: the fingerprint was applied before; its verdict is
	// announced again (it may not have gone out).
	redelivered bool
	// rated: the claim carries the live manifest's risk (rate has nothing
	// left to write for it).
	rated bool
}

// needAssessment is decide's answer when the outcome depends on an
// assessment it was not given: gather it and decide again.
type needAssessment struct{ base string }

func (e *needAssessment) Error() string { return "the decision needs the assessment against " + e.base }

// Observe applies one fingerprint result. The record is judged by the
// settings it was made with: a fingerprint made with other hashing
// settings is hashed again from its stored manifest (rehash), never
// compared as it is; the settings the tenant's policy resolves now apply to
// the record as state.Observation.Policy says.
func (s *Service) Observe(ctx context.Context, fp *mcpdriftv1.Fingerprint) error {
	var (
		rec     *state.Record
		created bool
		err     error
		fresh   bool // read the bucket, not the cache
	)
	for attempt := 0; ; attempt++ {
		var in *inputs
		if in, err = s.gather(ctx, fp, attempt == 0 && !fresh); err != nil {
			break
		}
		var t transition
		if t, err = s.decideGathering(ctx, in); err != nil {
			break
		}
		if t.redelivered && in.cached {
			// Announce the record as the bucket has it now, at its revision.
			fresh = true
			continue
		}
		rec, err = s.commit(ctx, in.key, in.rec, in.rev, t)
		if s.again(err, attempt) {
			continue
		}
		created = in.rec == nil && t.out.Write
		if err == nil && t.rated {
			s.rated.put(in.key, in.live.hash)
		}
		break
	}
	if err == nil && rec != nil {
		err = s.rate(ctx, rec)
	}
	if err != nil || !created || rec == nil || rec.Status == state.Quarantined {
		return err
	}
	// The server may have been quarantined after gather read it and
	// before the record was created, by an admin whose sweep of the
	// variants did not see this one yet: hold it now. One of the two
	// always sees the other (the hold is written before the sweep lists
	// the variants; the record is created before this read).
	srv, _, err := s.getServer(ctx, fp.Tenant, fp.Server)
	if err != nil || srv == nil || !srv.Held {
		return err
	}
	_, err = s.quarantineVariant(ctx, fp.Tenant, fp.Server, fp.Variant, srv.HeldBy, srv.HeldReason)
	return err
}

// decideGathering decides, gathering each assessment the decision asks
// for and deciding again (a state.Observe asks for one at most).
func (s *Service) decideGathering(ctx context.Context, in *inputs) (transition, error) {
	for range 3 {
		t, err := decide(in)
		var need *needAssessment
		if !errors.As(err, &need) {
			return t, err
		}
		if in.assessed == nil {
			in.assessed = map[string]state.Assessment{}
		}
		in.assessed[need.base] = s.assess(ctx, in.fp.Tenant, in.fp.Server, need.base, in.live.hash)
	}
	return transition{}, errors.New("the decision asked for more assessments than one observation makes")
}

// gather reads what the decision on fp needs. cache lets the record come
// from the status cache (a fingerprint's first attempt).
func (s *Service) gather(ctx context.Context, fp *mcpdriftv1.Fingerprint, cache bool) (*inputs, error) {
	in := &inputs{fp: fp, key: bus.StatusKey(fp.Tenant, fp.Server, fp.Variant), want: s.settingsOf(fp.Tenant, fp.Server)}
	if cache {
		in.rec, in.rev, in.cached = s.status.get(in.key)
	}
	if !in.cached {
		var err error
		if in.rec, in.rev, err = s.get(ctx, in.key); err != nil {
			return nil, err
		}
		s.status.put(in.key, in.rev, in.rec)
	}
	hashing := in.want.Hashing()
	if in.rec != nil {
		hashing = in.rec.Policy.Hashing()
	}
	var err error
	if in.live, err = s.rehash(ctx, fp, s.itemsOf(fp), hashing, in.want.Hashing()); err != nil {
		return nil, err
	}
	if in.rec == nil {
		if in.first, err = s.gatherFirstSight(ctx, fp, in.live.hash, in.want.Posture == state.Discovery); err != nil {
			return nil, err
		}
	}
	in.now = s.now()
	return in, nil
}

// gatherFirstSight reads what a variant's first manifest is decided with;
// claims: the posture lets a first sight claim the server (discovery).
func (s *Service) gatherFirstSight(ctx context.Context, fp *mcpdriftv1.Fingerprint, hash string, claims bool) (*firstSight, error) {
	f := new(firstSight)
	var err error
	if f.srv, f.srvRev, err = s.getServer(ctx, fp.Tenant, fp.Server); err != nil {
		return nil, err
	}
	if (f.srv != nil && f.srv.Held) || fp.ErrorCode != "" {
		return f, nil
	}
	if f.cmp, err = s.compare(ctx, fp.Tenant, fp.Server, fp.Variant, hash); err != nil {
		return nil, err
	}
	if f.srv != nil && f.srv.FirstVariant != "" && f.srv.FirstVariant != fp.Variant {
		first, _, err := s.get(ctx, bus.StatusKey(fp.Tenant, fp.Server, f.srv.FirstVariant))
		if err != nil {
			return nil, err
		}
		f.claimedRecorded = first != nil
	} else if claims && hash != "" && (f.srv == nil || f.srv.FirstVariant == "") {
		// It may claim the server: rate it now, for the claim to carry.
		var err error
		if f.rating, err = s.rating(ctx, fp, hash); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// rating is the risk of the surface hash, as the fingerprint service rated
// it from its own parse (Fingerprint.risk) when fp carries it for that
// hash, or rated here from the stored manifest.
func (s *Service) rating(ctx context.Context, fp *mcpdriftv1.Fingerprint, hash string) (*rating, error) {
	r := new(rating)
	if risk := fp.GetRisk(); risk != nil && fp.SurfaceHash == hash && policy.ValidBand(policy.Band(risk.Band)) {
		r.band, r.reasons = policy.Band(risk.Band), risk.Reasons
	} else {
		sf, err := s.surfaceOf(ctx, hash)
		if err != nil {
			return nil, fmt.Errorf("rating the risk of %s: %w", hash, err)
		}
		band, reasons := s.markers.Rate(sf)
		r.band, r.reasons = policy.Band(band.String()), reasons
	}
	r.mode = s.riskMode(fp.Tenant, fp.Server, r.band)
	return r, nil
}

// decide is the decision on one fingerprint: a pure function of what
// gather read. It returns *needAssessment when the outcome depends on an
// assessment it was not given, errClaimPending when another variant's
// first sight is being applied (retried later).
func decide(in *inputs) (transition, error) {
	fp := in.fp
	var missing string
	o := state.Observation{
		EventID: fp.EventId, Hash: in.live.hash, ErrorCode: fp.ErrorCode,
		ObservedAt: time.UnixMilli(fp.ObservedAtUnixMs), Items: in.live.items,
		Assess: func(base, live string) state.Assessment {
			if a, ok := in.assessed[base]; ok && live == in.live.hash {
				return a
			}
			missing = base
			return state.Assessment{Severity: surface.SeverityCritical.String()}
		},
		Policy: &in.want, WantsLiveHash: in.live.wantsLive,
	}
	var t transition
	if in.rec == nil {
		f := in.first
		if f == nil {
			return transition{}, errors.New("deciding a first sight without its inputs")
		}
		switch {
		case f.srv != nil && f.srv.Held:
			o.Held = true
		case fp.ErrorCode != "":
		default:
			// Under the discovery posture, a server with no approved variant
			// is trusted on first use once: the variant that claims it in the
			// server record; any other is compared with it.
			cmp := f.cmp
			if !cmp.Approved && in.want.Posture == state.Discovery {
				claimed, write, ok := state.ClaimFirst(f.srv, fp.Tenant, fp.Server, fp.Variant, in.now)
				switch {
				case write:
					if r := f.rating; r != nil {
						claimed, _ = state.Ratchet(&claimed, fp.Tenant, fp.Server, in.live.hash, r.band, r.mode, r.reasons, in.now)
						t.rated = true
					}
					t.claim, t.claimRev, t.claimCreate = &claimed, f.srvRev, f.srv == nil
				case !ok:
					// Another variant was the server's first sight. Until its
					// record is there (a moment, on another drift instance),
					// wait for it so as to be compared with its baseline; once
					// it is there and nothing is approved (it is quarantined,
					// or pending), or it never came, this variant has nothing
					// to match: withheld.
					if !f.claimedRecorded && in.now.Sub(time.UnixMilli(claimed.FirstAtMs)) < claimPatience {
						return transition{}, fmt.Errorf("%w (variant %s of %s/%s)", errClaimPending, claimed.FirstVariant, fp.Tenant, fp.Server)
					}
					cmp = state.Comparison{Approved: true, Severity: surface.SeverityCritical.String(),
						Unmatched: []string{"every item (no other variant of the server is approved now)"}}
				}
			}
			o.Compare = func(string) state.Comparison { return cmp }
		}
	}
	t.out = state.Observe(in.rec, fp.Tenant, fp.Server, fp.Variant, o, in.want, in.now)
	if missing != "" {
		return transition{}, &needAssessment{base: missing}
	}
	t.redelivered = !t.out.Write && in.rec != nil && fp.EventId != "" && slices.Contains(in.rec.Applied, fp.EventId)
	if !t.out.Write {
		t.claim = nil // nothing is created: nothing to claim
	}
	return t, nil
}

// commit writes a transition decided on rec at rev: the server record it
// claims (compare-and-set), the new baseline version, the record
// (compare-and-set), then the verdict. errConflict when another writer was
// first. It reads nothing: a baseline version found already there is
// checked to be the same one (keepBaseline), which is the write's own
// idempotence, not an input to the decision.
func (s *Service) commit(ctx context.Context, key string, rec *state.Record, rev uint64, t transition) (*state.Record, error) {
	out := t.out
	if !out.Write {
		if t.redelivered {
			// A redelivery of an applied event: its verdict may not have
			// gone out; announcing the current state again is harmless
			// (same message id as the first time for this revision).
			s.redelivered.Add(1)
			return rec, s.announce(ctx, rec, rev, out.Previous)
		}
		return rec, nil
	}
	if t.claim != nil {
		if err := s.putServer(ctx, t.claim.Tenant, t.claim.Server, t.claimCreate, t.claimRev, t.claim); err != nil {
			return nil, err
		}
	}
	if out.NewBaseline != nil {
		if err := s.keepBaseline(ctx, &out.Record, out.NewBaseline); err != nil {
			return nil, err
		}
	}
	newRev, err := s.put(ctx, key, rec == nil, rev, &out.Record)
	if err != nil {
		return nil, err
	}
	s.status.put(key, newRev, &out.Record)
	s.applied.Add(1)
	s.m.write()
	if out.Announce {
		return &out.Record, s.announce(ctx, &out.Record, newRev, out.Previous)
	}
	return &out.Record, nil
}
