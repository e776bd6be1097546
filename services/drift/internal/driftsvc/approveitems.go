package driftsvc

import (
	"context"
	"fmt"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// ApproveItems approves the live definitions of the named items of one
// listing variant (KIND:NAME, state.ParseItemRef), whose live manifest must
// be hash, the one the admin reviewed: the next baseline version is the
// old baseline with each named item replaced by its live definition (added,
// changed or removed), the rest as approved before. Its manifest is
// composed from the item definitions the way a lockfile's is
// (lockfile.Variant.Capture), hashed by the fingerprint engine with the
// variant's settings, checked, and stored under its hash like every
// approved manifest, so that proxies, diffs, history and export read it as
// any other baseline. When the new baseline is the live manifest the
// variant is verified and the server's hold lifted, as by Approve;
// otherwise the variant stays changed (pending, quarantined) with what
// remains unapproved. The variant is the named one, the server's only one,
// or the only one live at hash. It returns the server after and the
// variant.
func (s *Service) ApproveItems(ctx context.Context, tenant, server, variant, hash string, items []string, actor string) (*state.View, []string, error) {
	refs, err := state.ParseItemRefs(items)
	if err != nil {
		return nil, nil, err
	}
	v, targets, err := s.approveTargets(ctx, tenant, server, variant, hash)
	if err != nil {
		return nil, nil, err
	}
	if len(targets) > 1 {
		var recs []state.Record
		for _, r := range v.Variants {
			if r.LiveHash == hash && r.LiveError == "" {
				recs = append(recs, r)
			}
		}
		return nil, nil, ambiguous(tenant, server, "approve items", recs)
	}
	rec, err := gatherThen(ctx, s, bus.StatusKey(tenant, server, targets[0]),
		func(ctx context.Context, rec *state.Record) (state.ItemsApproval, error) {
			return s.pickItems(ctx, rec, hash, refs)
		},
		func(rec *state.Record, a state.ItemsApproval) (state.Outcome, error) {
			return state.ApproveItems(rec, a, actor, s.now())
		})
	if err != nil {
		return nil, nil, err
	}
	if rec.Status == state.Verified {
		if err := s.releaseAfterApprove(ctx, tenant, server, actor, v.Hold); err != nil {
			return nil, nil, err
		}
	}
	v, err = s.Server(ctx, tenant, server)
	return v, targets, err
}

// pickItems prepares a per-item approve of rec (the I/O of it): reads the
// baseline's and the live manifest, picks the items (state.PickItems),
// composes the new baseline's manifest from their definitions, has the
// engine hash and check it, stores it, and assesses what remains. A record
// that cannot be approved as asked (another live hash, no baseline, no
// live manifest) gets an approval of nothing, which state.ApproveItems refuses
// with the reason.
func (s *Service) pickItems(ctx context.Context, rec *state.Record, hash string, refs []state.ItemRef) (state.ItemsApproval, error) {
	if rec == nil || rec.LiveHash != hash || rec.LiveError != "" || rec.BaselineHash == "" {
		return state.ItemsApproval{Hash: hash}, nil
	}
	base, err := s.surfaceOf(ctx, rec.BaselineHash)
	if err != nil {
		return state.ItemsApproval{}, fmt.Errorf("reading the approved manifest: %w", err)
	}
	live, err := s.surfaceOf(ctx, rec.LiveHash)
	if err != nil {
		return state.ItemsApproval{}, fmt.Errorf("reading the live manifest: %w", err)
	}
	picked, err := state.PickItems(status.ItemsOf(base), status.ItemsOf(live), refs)
	if err != nil {
		return state.ItemsApproval{}, err
	}
	lv := lockfile.Variant{Variant: rec.Variant, Hashing: rec.Policy.Hashing(), Listed: picked.Listed, Items: make([]lockfile.Item, len(picked.Items))}
	if lv.Listed == nil {
		lv.Listed = []string{}
	}
	for i, it := range picked.Items {
		k, _ := surface.KindNamed(it.Kind)
		from := base
		if li, ok := live.Find(k, it.Name); ok && li.Hash.String() == it.Hash {
			from = live
		}
		def, ok := from.Find(k, it.Name)
		if !ok || def.Hash.String() != it.Hash {
			return state.ItemsApproval{}, fmt.Errorf("approving items: no definition of %s with hash %s", it, it.Hash)
		}
		lv.Items[i] = lockfile.Item{Kind: it.Kind, Name: it.Name, Hash: it.Hash, Definition: def.Canonical}
	}
	raw, err := lv.Capture()
	if err != nil {
		return state.ItemsApproval{}, err
	}
	sf, err := parseWith(raw, lv.Hashing)
	if err != nil {
		return state.ItemsApproval{}, fmt.Errorf("hashing the new baseline: %w", err)
	}
	// The engine's hash of the composed manifest is the baseline's; Surface
	// checks every definition against its item hash and the items against it.
	lv.Baseline.Hash = sf.Hash.String()
	if sf, err = lv.Surface(); err != nil {
		return state.ItemsApproval{}, err
	}
	if err := s.storeApproved(ctx, &lv); err != nil {
		return state.ItemsApproval{}, err
	}
	a := state.ItemsApproval{Hash: hash, From: rec.BaselineHash, Picked: picked, Baseline: status.ItemsOf(sf)}
	if lv.Baseline.Hash != rec.LiveHash {
		a.Assess = s.assess(ctx, rec.Tenant, rec.Server, lv.Baseline.Hash, rec.LiveHash)
	}
	return a, nil
}
