package driftsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/settings"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// settingsOf returns the drift settings of a server as its tenant's policy
// resolves them over the service's flags (package settings).
func (s *Service) settingsOf(tenant, server string) state.Policy {
	if s.pol == nil {
		return settings.Drift(nil, server, s.cfg.Policy)
	}
	return s.pol.Drift(tenant, server, s.cfg.Policy)
}

// fingerprintHashing is the hashing a fingerprint was made with.
func fingerprintHashing(fp *mcpdriftv1.Fingerprint) (status.Hashing, error) {
	return status.HashingOf(fp.SurfaceHash, !fp.AnnotationsExcluded, fp.CanonicalForm)
}

// surfaceUnder returns the manifest stored under stored, parsed with the
// hashing h (its hashes are then those of h), and makes sure it is stored
// under that hash too, so that every later reading of it by hash (a diff,
// a comparison of variants, the console) finds it. It is how the service
// compares a fingerprint made with other settings than a record's: it
// never compares the two hashes, it hashes the same bytes again.
func (s *Service) surfaceUnder(ctx context.Context, stored string, h status.Hashing) (*surface.Surface, error) {
	src, err := s.surfaceOf(ctx, stored) // checks the bytes against their name
	if err != nil {
		return nil, err
	}
	raw, err := s.manifestBytes(ctx, stored)
	if err != nil {
		return nil, err
	}
	sf, err := parseWith(raw, h)
	if err != nil {
		return nil, fmt.Errorf("parsing manifest %s with %s: %w", stored, h, err)
	}
	if sf.Hash == src.Hash {
		return src, nil
	}
	hash := sf.Hash.String()
	name := bus.ManifestName(hash)
	if _, err := s.h.Manifests.GetInfo(ctx, name); errors.Is(err, jetstream.ErrObjectNotFound) {
		if _, err := s.h.Manifests.PutBytes(ctx, name, raw); err != nil {
			return nil, fmt.Errorf("storing manifest %s: %w", hash, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("looking up manifest %s: %w", hash, err)
	}
	s.surf.put(hash, sf, len(raw))
	return sf, nil
}

// underRecord is a fingerprint as the state machine compares it with a
// record: its hash and items made with the record's hashing, and the live
// manifest's hash with the hashing the policy asks for when that differs.
type underRecord struct {
	hash      string
	items     *state.Items
	wantsLive string
}

// rehash makes a fingerprint comparable with a record hashed with rec
// (the hashing a new record is made with, for a server never seen): a
// fingerprint made with other settings (the policy changed between the
// observation and now, or asks for settings the record does not have
// yet) is hashed again from its stored manifest. wants is the hashing the
// policy asks for.
func (s *Service) rehash(ctx context.Context, fp *mcpdriftv1.Fingerprint, items *state.Items, rec, wants status.Hashing) (underRecord, error) {
	out := underRecord{hash: fp.SurfaceHash, items: items}
	if fp.ErrorCode != "" {
		return out, nil
	}
	made, err := fingerprintHashing(fp)
	if err != nil {
		return out, err
	}
	if made != rec {
		sf, err := s.surfaceUnder(ctx, fp.SurfaceHash, rec)
		if err != nil {
			return out, fmt.Errorf("hashing %s again with the record's settings (%s): %w", fp.SurfaceHash, rec, err)
		}
		out.hash, out.items = sf.Hash.String(), status.ItemsOf(sf)
		s.m.rehashed()
	}
	switch {
	case wants == rec:
	case wants == made:
		out.wantsLive = fp.SurfaceHash
	default:
		sf, err := s.surfaceUnder(ctx, fp.SurfaceHash, wants)
		if err != nil {
			return out, fmt.Errorf("hashing %s with the settings the policy asks for (%s): %w", fp.SurfaceHash, wants, err)
		}
		out.wantsLive = sf.Hash.String()
	}
	return out, nil
}

// riskMode is the enforcement mode of band for a server, from its
// tenant's policy (allow without one).
func (s *Service) riskMode(tenant, server string, band policy.Band) policy.Mode {
	if s.pol == nil {
		return policy.ModeAllow
	}
	return s.pol.RiskMode(tenant, server, band)
}

// rate rates the record's live surface (surface.Rate) into the server's
// risk, ratcheted (state.Ratchet): each new surface of a variant once; an
// unchanged one costs nothing. A manifest that cannot be read is retried
// with the fingerprint.
func (s *Service) rate(ctx context.Context, rec *state.Record) error {
	if rec.LiveError != "" || rec.LiveHash == "" {
		return nil
	}
	key := bus.StatusKey(rec.Tenant, rec.Server, rec.Variant)
	if s.rated.has(key, rec.LiveHash) {
		return nil
	}
	// Rated already (by another instance, or before a restart): the server
	// record says so, and reading it costs less than the manifest.
	if srv, _, err := s.getServer(ctx, rec.Tenant, rec.Server); err == nil && srv != nil && srv.Risk != nil &&
		slices.Contains(srv.Risk.Surfaces, rec.LiveHash) {
		s.rated.put(key, rec.LiveHash)
		return nil
	}
	sf, err := s.surfaceOf(ctx, rec.LiveHash)
	if err != nil {
		return fmt.Errorf("rating the risk of %s: %w", rec.LiveHash, err)
	}
	sev, reasons := s.markers.Rate(sf)
	band := policy.Band(sev.String())
	mode := s.riskMode(rec.Tenant, rec.Server, band)
	if _, err := s.updateServer(ctx, rec.Tenant, rec.Server, func(srv *state.Server) (state.Server, bool, error) {
		next, write := state.Ratchet(srv, rec.Tenant, rec.Server, rec.LiveHash, band, mode, reasons, s.now())
		return next, write, nil
	}); err != nil {
		return fmt.Errorf("storing the risk of %s/%s: %w", rec.Tenant, rec.Server, err)
	}
	s.rated.put(key, rec.LiveHash)
	return nil
}

// markerMemoBytes bounds the strings the service's MarkerMemo keeps with
// their markers.
const markerMemoBytes = 16 << 20

// maxRated bounds the ratedSet.
const maxRated = 1 << 14

// ratedSet remembers, per variant, the surface hash last rated into its
// server's risk: a fleet re-listing an unchanged server reads no server
// record for it. Forgetting is harmless (the server record's
// Risk.Surfaces says the same).
type ratedSet struct {
	mu  sync.Mutex
	max int
	m   map[string]string
}

func newRatedSet(max int) *ratedSet { return &ratedSet{max: max, m: map[string]string{}} }

func (r *ratedSet) has(key, hash string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[key] == hash
}

func (r *ratedSet) put(key, hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= r.max {
		clear(r.m)
	}
	r.m[key] = hash
}

// Rebaseline moves variants of a server to the hashing settings its
// tenant's policy asks for (state.Rebaseline): the named variant, or else
// every variant whose live manifest with those settings is hash (or the
// server's only variant). It returns the server after, and the variants
// re-baselined.
func (s *Service) Rebaseline(ctx context.Context, tenant, server, variant, hash, actor string) (*state.View, []string, error) {
	v, err := s.Server(ctx, tenant, server)
	if err != nil {
		return nil, nil, err
	}
	var targets []string
	if variant != "" || len(v.Variants) == 1 {
		rec, err := s.pick(v, variant, "rebaseline", nil)
		if err != nil {
			return nil, nil, err
		}
		targets = []string{rec.Variant}
	} else {
		var wants []string
		for _, r := range v.Variants {
			if r.PolicyWants != nil && r.PolicyWantsLiveHash == hash {
				targets = append(targets, r.Variant)
			}
			if r.PolicyWants != nil {
				wants = append(wants, r.Variant+" "+r.PolicyWantsLiveHash)
			}
		}
		if len(targets) == 0 {
			if len(wants) == 0 {
				return nil, nil, coded.Errorf(state.ErrNothingToRebaseline.Code, "the policy asks for the settings every variant of %s/%s already has", tenant, server)
			}
			return nil, nil, coded.Errorf(state.ErrStaleHash.Code, "no variant of %s/%s is live at %s with the new settings; name one of: %s", tenant, server, hash, strings.Join(wants, "; "))
		}
	}
	for _, t := range targets {
		if _, err := gatherThen(ctx, s, bus.StatusKey(tenant, server, t),
			func(ctx context.Context, rec *state.Record) (*state.Items, error) {
				return s.rebaselineItems(ctx, rec, hash)
			},
			func(rec *state.Record, items *state.Items) (state.Outcome, error) {
				return state.Rebaseline(rec, hash, actor, items, s.now())
			}); err != nil {
			return nil, nil, err
		}
	}
	v, err = s.Server(ctx, tenant, server)
	return v, targets, err
}

// rebaselineItems reads the manifest a re-baseline names (hash, with the
// settings the policy asks for) and checks that it is the approved one:
// hashed with the record's settings it is the baseline. It returns its
// item hashes with the new settings; nil when the record has nothing to
// re-baseline (state.Rebaseline says why).
func (s *Service) rebaselineItems(ctx context.Context, rec *state.Record, hash string) (*state.Items, error) {
	if rec == nil || rec.PolicyWants == nil || hash != rec.PolicyWantsLiveHash || rec.BaselineHash == "" {
		return nil, nil
	}
	raw, err := s.manifestBytes(ctx, hash)
	if err != nil {
		return nil, err
	}
	next, err := parseWith(raw, *rec.PolicyWants)
	if err != nil || next.Hash.String() != hash {
		return nil, fmt.Errorf("manifest stored as %s does not hash to it with %s (%v)", hash, *rec.PolicyWants, err)
	}
	old, err := parseWith(raw, rec.Policy.Hashing())
	if err != nil {
		return nil, fmt.Errorf("parsing manifest %s with the record's settings: %w", hash, err)
	}
	if old.Hash.String() != rec.BaselineHash {
		return nil, coded.Errorf(state.ErrStaleHash.Code, "the manifest at %s is not the approved baseline %s (with %s it is %s); approve the live manifest first",
			hash, rec.BaselineHash, rec.Policy.Hashing(), old.Hash)
	}
	return status.ItemsOf(next), nil
}

// SetRisk sets a server's risk band and mode as an admin says (a relax,
// or a tightening); only an admin relaxes a band (state.Ratchet). A server
// never observed is not_found.
func (s *Service) SetRisk(ctx context.Context, tenant, server string, band policy.Band, mode policy.Mode, actor, reason string) (*state.View, error) {
	if _, err := s.Server(ctx, tenant, server); err != nil {
		return nil, err
	}
	if _, err := s.updateServer(ctx, tenant, server, func(srv *state.Server) (state.Server, bool, error) {
		next, err := state.SetRisk(srv, tenant, server, band, mode, actor, reason, s.now())
		return next, err == nil, err
	}); err != nil {
		return nil, err
	}
	return s.Server(ctx, tenant, server)
}
