package driftsvc

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
)

// ExportBaseline returns the approved baselines of a server's variants as
// an unsigned lockfile: each variant that has a baseline, with its hashing
// settings, the baseline version as kept (who approved it and when) and
// every item of its stored manifest with its definition. driftctl signs it
// (the key never reaches the service). A server none of whose variants was
// ever approved is no_baseline.
func (s *Service) ExportBaseline(ctx context.Context, tenant, server, actor string) (*lockfile.File, error) {
	v, err := s.Server(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	f := &lockfile.File{Format: lockfile.Format, Tenant: tenant, Server: server, ExportedAtMs: s.now().UnixMilli(), ExportedBy: actor}
	for _, rec := range v.Variants {
		if rec.BaselineVersion == 0 || rec.BaselineHash == "" {
			continue
		}
		key := bus.BaselineKey(tenant, server, rec.Variant, rec.BaselineVersion)
		b, _, err := getJSON[state.Baseline](ctx, s.h.Baselines, key, "baseline")
		if err != nil {
			return nil, err
		}
		if b == nil || b.Hash != rec.BaselineHash {
			return nil, fmt.Errorf("baseline %s is not the record's baseline %s", key, rec.BaselineHash)
		}
		sf, err := s.surfaceOf(ctx, b.Hash)
		if err != nil {
			return nil, fmt.Errorf("reading the approved manifest of variant %s: %w", rec.Variant, err)
		}
		lv, err := lockfile.VariantOf(rec.Variant, rec.Policy.Hashing(), *b, sf)
		if err != nil {
			return nil, err
		}
		f.Variants = append(f.Variants, lv)
	}
	if len(f.Variants) == 0 {
		return nil, coded.Errorf(ErrNoBaseline.Code, "no variant of %s/%s has an approved baseline to export", tenant, server)
	}
	return f, nil
}

// ImportBaseline installs the baselines of a lockfile: its signature must
// verify with one of Config.BaselineKeys, and its definitions must hash to
// its item hashes and make up each baseline hash (lockfile.Verify, with the
// fingerprint engine). Every variant is checked against its record before
// anything is written (lockfile_*, baseline_downgrade,
// baseline_hashing_mismatch: nothing changes); then each approved manifest
// is stored under its hash (for diffs and history), and each variant gets
// its next baseline version through the state machine (state.Import), with
// compare-and-set. A variant never seen gets a record, verified, that a
// proxy serves at its first sight when the live surface matches.
func (s *Service) ImportBaseline(ctx context.Context, f *lockfile.File, actor string) (*state.ImportResult, error) {
	if len(s.cfg.BaselineKeys) == 0 {
		return nil, coded.New(lockfile.CodeKeyUnknown, "this drift service trusts no baseline signing keys (--baseline-keys, MCPDRIFT_BASELINE_KEYS): every import is refused")
	}
	signer, err := f.Verify(s.cfg.BaselineKeys)
	if err != nil {
		return nil, err
	}
	out := &state.ImportResult{KeyID: lockfile.KeyID(signer)}
	imps := make([]state.Imported, len(f.Variants))
	for i := range f.Variants {
		v := &f.Variants[i]
		imps[i] = state.Imported{Hash: v.Baseline.Hash, Items: v.ItemHashes(), Hashing: v.Hashing,
			CapturedAtMs: v.Baseline.CapturedAtMs, ApprovedAtMs: v.Baseline.ApprovedAtMs, ApprovedBy: v.Baseline.ApprovedBy,
			Version: v.Baseline.Version, KeyID: out.KeyID}
	}
	srv, _, err := s.getServer(ctx, f.Tenant, f.Server)
	if err != nil {
		return nil, err
	}
	// Every variant is checked before any is written: a refusal changes
	// nothing.
	for i := range f.Variants {
		rec, _, err := s.get(ctx, bus.StatusKey(f.Tenant, f.Server, f.Variants[i].Variant))
		if err != nil {
			return nil, err
		}
		if _, err := state.Import(rec, f.Tenant, f.Server, f.Variants[i].Variant, imps[i], s.settingsOf(f.Tenant, f.Server), srv.IsHeld(), actor, nil, s.now()); err != nil {
			return nil, err
		}
	}
	for i := range f.Variants {
		if err := s.storeApproved(ctx, &f.Variants[i]); err != nil {
			return nil, err
		}
	}
	for i := range f.Variants {
		v := &f.Variants[i]
		wrote := false
		pol := s.settingsOf(f.Tenant, f.Server)
		if _, err := gatherThen(ctx, s, bus.StatusKey(f.Tenant, f.Server, v.Variant),
			func(ctx context.Context, rec *state.Record) (*state.Assessment, error) {
				if rec == nil || rec.LiveHash == "" || rec.LiveError != "" || rec.LiveHash == v.Baseline.Hash || rec.BaselineHash == v.Baseline.Hash {
					return nil, nil
				}
				a := s.assess(ctx, f.Tenant, f.Server, v.Baseline.Hash, rec.LiveHash)
				return &a, nil
			},
			func(rec *state.Record, a *state.Assessment) (state.Outcome, error) {
				assess := func(string, string) state.Assessment { return state.Assessment{Severity: "critical"} }
				if a != nil {
					assess = func(string, string) state.Assessment { return *a }
				}
				o, err := state.Import(rec, f.Tenant, f.Server, v.Variant, imps[i], pol, srv.IsHeld(), actor, assess, s.now())
				wrote = o.Write
				return o, err
			}); err != nil {
			return nil, fmt.Errorf("importing variant %s: %w", v.Variant, err)
		}
		if wrote {
			out.Imported = append(out.Imported, v.Variant)
		} else {
			out.Unchanged = append(out.Unchanged, v.Variant)
		}
	}
	if out.View, err = s.Server(ctx, f.Tenant, f.Server); err != nil {
		return nil, err
	}
	return out, nil
}

// storeApproved stores a verified variant's approved manifest (the
// capture its definitions make) under its baseline hash, unless a manifest
// is there already (content-addressed: what is there hashes the same), and
// checks that what is stored is that surface.
func (s *Service) storeApproved(ctx context.Context, v *lockfile.Variant) error {
	name := bus.ManifestName(v.Baseline.Hash)
	_, err := s.h.Manifests.GetInfo(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		raw, err := v.Capture()
		if err != nil {
			return err
		}
		if _, err := s.h.Manifests.PutBytes(ctx, name, raw); err != nil {
			return fmt.Errorf("storing manifest %s: %w", v.Baseline.Hash, err)
		}
	case err != nil:
		return fmt.Errorf("looking up manifest %s: %w", v.Baseline.Hash, err)
	}
	if _, err := s.surfaceOf(ctx, v.Baseline.Hash); err != nil {
		return fmt.Errorf("checking the stored manifest of variant %s: %w", v.Variant, err)
	}
	return nil
}
