package status

import "github.com/mcpdrift/mcpdrift/services/internal/surface"

// Show is one listing variant's record as the admin API shows it.
type Show struct {
	Record Record `json:"record"`
	// Serve: proxies serve this variant (its record serves and the server
	// is not held).
	Serve bool `json:"serve"`
	// Diff classifies the live manifest against the baseline (a new
	// variant without one: against the variant it was compared with), when
	// they differ (show only).
	Diff *surface.Report `json:"diff,omitempty"`
}

// ServerShow is a server as the admin API shows it: its hold and its
// variants.
type ServerShow struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
	// Held: the server is quarantined as a whole; no variant is served,
	// present or future, until an explicit approve.
	Held bool    `json:"held"`
	Hold *Server `json:"hold,omitempty"`
	// Risk is the server's risk band and enforcement mode (nil: never
	// rated); the server record's (Hold.Risk).
	Risk *Risk `json:"risk,omitempty"`
	// Serve: some variant is served.
	Serve    bool   `json:"serve"`
	Variants []Show `json:"variants"`
	// Approved names the variants an approve or a rebaseline re-baselined
	// (those actions only).
	Approved []string `json:"approved,omitempty"`
}

// ShowServer is v as the admin API shows it, each variant's serve decided
// by the serve rule.
func ShowServer(v *View) ServerShow {
	out := ServerShow{Tenant: v.Tenant, Server: v.Server, Held: v.Held(), Hold: v.Hold, Variants: make([]Show, 0, len(v.Variants))}
	if v.Hold != nil {
		out.Risk = v.Hold.Risk
	}
	for i := range v.Variants {
		sh := Show{Record: v.Variants[i], Serve: v.Serve(&v.Variants[i])}
		out.Serve = out.Serve || sh.Serve
		out.Variants = append(out.Variants, sh)
	}
	return out
}
