package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// policyView is the policy page: each tenant's stored policy as the admin
// API serves it (GET /v1/policy), read only. Policies are applied with
// driftctl policy apply or PUT /v1/policy, which validate the whole
// document.
type policyView struct {
	Tenants []policy.Stored
	Tenant  string // the tenant asked for ("" for all)
}

// Rules are a policy's rules in the order the engine evaluates them:
// priority, higher first, then as written.
func (policyView) Rules(d policy.Document) []policy.Rule {
	out := append([]policy.Rule(nil), d.Rules...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority > out[j].Priority })
	return out
}

// Clause is one argument clause as written: path, operator (not- when
// negated) and the value as JSON.
func (policyView) Clause(c policy.Clause) string {
	op := string(c.Op)
	if c.Not {
		op = "not " + op
	}
	v, err := json.Marshal(c.Value)
	if err != nil {
		v = []byte("?")
	}
	return c.Path + " " + op + " " + string(v)
}

// Glob is a rule's glob, "*" when it is empty (it matches everything).
func (policyView) Glob(g string) string {
	if g == "" {
		return "*"
	}
	return g
}

// Bool is a tri-state setting: "inherited" when unset.
func (policyView) Bool(b *bool) string { return tri(b, "inherited", "on", "off") }

// Gate is a rule's drift gate: whether it matches drifted servers only,
// undrifted ones only, or either.
func (policyView) Gate(b *bool) string { return tri(b, "either", "drifted only", "not drifted only") }

// tri names the three states of an optional bool.
func tri(b *bool, unset, yes, no string) string {
	switch {
	case b == nil:
		return unset
	case *b:
		return yes
	default:
		return no
	}
}

// Or is s, or def when s is empty.
func (policyView) Or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Modes are a risk setting's band modes, from low to critical. A band the
// tenant's setting leaves out is allow; one a server's override leaves out
// is the tenant's.
func (policyView) Modes(r policy.RiskSetting) string {
	var parts []string
	for _, b := range []policy.Band{policy.BandLow, policy.BandMedium, policy.BandHigh, policy.BandCritical} {
		mode := string(r.Modes[b])
		switch {
		case mode != "":
		case r.Server == "":
			mode = string(policy.ModeAllow)
		default:
			mode = "the tenant's"
		}
		parts = append(parts, string(b)+": "+mode)
	}
	return strings.Join(parts, ", ")
}

// policies draws the stored policies, read through the admin API as the
// caller (the API checks the role and audits the read).
func (c *Console) policies(w http.ResponseWriter, r *http.Request, u *who) {
	v := policyView{Tenant: r.URL.Query().Get("tenant")}
	path := "/v1/policy"
	if v.Tenant != "" {
		path += "?tenant=" + url.QueryEscape(v.Tenant)
	}
	code, e := c.apiDo(r, u, http.MethodGet, path, nil, &v.Tenants)
	if e != nil {
		c.fail(w, r, u, code, e.Error.Code, e.Error.Message)
		return
	}
	sort.Slice(v.Tenants, func(i, j int) bool { return v.Tenants[i].Tenant < v.Tenants[j].Tenant })
	c.renderFrame(w, r, http.StatusOK, "policy", &frame{Title: "Policy", User: u, Nav: "policy", Body: v})
}
