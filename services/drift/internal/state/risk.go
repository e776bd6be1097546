package state

import (
	"fmt"
	"slices"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// ActorRisk is who sets a risk band on a re-scan.
const ActorRisk = "system"

// maxRatedSurfaces bounds status.Risk.Surfaces.
const maxRatedSurfaces = 32

var (
	bands = []policy.Band{policy.BandLow, policy.BandMedium, policy.BandHigh, policy.BandCritical}
	modes = []policy.Mode{policy.ModeAllow, policy.ModeQuarantine, policy.ModeBlock}
)

// ErrInvalidRisk: an admin named a band or mode that does not exist.
var ErrInvalidRisk = coded.New("invalid_risk", "")

// bandRank orders bands from low (0); a band not known ranks above
// critical, so that nothing reads it as lower than what it replaces.
func bandRank(b string) int {
	if i := slices.Index(bands, policy.Band(b)); i >= 0 {
		return i
	}
	return len(bands)
}

func modeRank(m string) int {
	if i := slices.Index(modes, policy.Mode(m)); i >= 0 {
		return i
	}
	return len(modes)
}

// Ratchet applies a re-scan's rating of one surface (its hash) to the
// server's risk: band and mode each become the tighter of the old and the
// new; a re-scan never relaxes them. A surface already rated (in
// Risk.Surfaces) changes nothing, so that an admin's relax (SetRisk)
// stands until the server shows a surface not rated yet. It returns the
// server record to write, and false when nothing changed.
func Ratchet(srv *Server, tenant, server, hash string, band policy.Band, mode policy.Mode, reasons []string, now time.Time) (Server, bool) {
	var s Server
	if srv != nil {
		s = *srv
	}
	s.Tenant, s.Server = tenant, server
	if s.Risk != nil && slices.Contains(s.Risk.Surfaces, hash) {
		return s, false
	}
	r := status.Risk{Band: string(band), Mode: string(mode), Reasons: reasons, SetBy: ActorRisk, AtMs: now.UnixMilli()}
	if old := s.Risk; old != nil {
		r.Surfaces = slices.Clone(old.Surfaces)
		if bandRank(old.Band) >= bandRank(r.Band) {
			r.Band = old.Band
			if bandRank(old.Band) > bandRank(string(band)) {
				r.Reasons = old.Reasons // what set the band still explains it
			}
		}
		if modeRank(old.Mode) > modeRank(r.Mode) {
			r.Mode = old.Mode
		}
		if r.Band == old.Band && r.Mode == old.Mode {
			r.SetBy, r.AtMs = old.SetBy, old.AtMs
		}
	}
	r.Surfaces = append(r.Surfaces, hash)
	if len(r.Surfaces) > maxRatedSurfaces {
		r.Surfaces = slices.Clone(r.Surfaces[len(r.Surfaces)-maxRatedSurfaces:])
	}
	s.Risk, s.UpdatedAtMs = &r, now.UnixMilli()
	return s, true
}

// SetRisk is an admin's setting of the server's band and mode (a relax or
// a tightening), with the reason given; the surfaces rated so far stay
// rated, so that a re-scan of them does not undo it.
func SetRisk(srv *Server, tenant, server string, band policy.Band, mode policy.Mode, actor, reason string, now time.Time) (Server, error) {
	if !slices.Contains(bands, band) {
		return Server{}, coded.Errorf(ErrInvalidRisk.Code, "band %q: want low, medium, high or critical", band)
	}
	if !slices.Contains(modes, mode) {
		return Server{}, coded.Errorf(ErrInvalidRisk.Code, "mode %q: want allow, quarantine or block", mode)
	}
	var s Server
	if srv != nil {
		s = *srv
	}
	s.Tenant, s.Server = tenant, server
	r := status.Risk{Band: string(band), Mode: string(mode), SetBy: actor, AtMs: now.UnixMilli()}
	r.Reasons = []string{fmt.Sprintf("set by %s", actor)}
	if reason != "" {
		r.Reasons[0] += ": " + reason
	}
	if s.Risk != nil {
		r.Surfaces = slices.Clone(s.Risk.Surfaces)
	}
	s.Risk, s.UpdatedAtMs = &r, now.UnixMilli()
	return s, nil
}

// ActorPolicy is who tightens a risk mode when the tenant's policy maps
// the server's band to a stricter one (the service's sweep after a policy
// change).
const ActorPolicy = "system:policy"

// Tighten applies the mode the tenant's policy maps the server's band to
// now, when it is stricter than the server's mode; a looser one changes
// nothing (only a re-scan of a new surface or an admin's SetRisk moves a
// mode, and a re-scan only ever tightens it). A server never rated has no
// band to map and is left alone, and so is one whose risk an admin set
// (SetRisk): that decision stands until the server shows a surface not
// rated yet, as it does for the ratchet. It returns the server record to
// write, and false when nothing changed.
func Tighten(srv *Server, mode policy.Mode, now time.Time) (Server, bool) {
	if srv == nil {
		return Server{}, false
	}
	if srv.Risk == nil || modeRank(string(mode)) <= modeRank(srv.Risk.Mode) ||
		(srv.Risk.SetBy != ActorRisk && srv.Risk.SetBy != ActorPolicy) {
		return *srv, false
	}
	s := *srv
	r := *srv.Risk
	r.Reasons = append(slices.Clone(r.Reasons), fmt.Sprintf("the policy maps band %s to %s", r.Band, mode))
	r.Mode, r.SetBy, r.AtMs = string(mode), ActorPolicy, now.UnixMilli()
	s.Risk, s.UpdatedAtMs = &r, now.UnixMilli()
	return s, true
}
