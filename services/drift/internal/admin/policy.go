package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/policystore"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Policies is the policy bucket as the API serves it; *policystore.Store
// is one.
type Policies interface {
	Apply(ctx context.Context, d *policy.Document, clear []string, actor string) ([]policy.Applied, error)
	Get(ctx context.Context, tenant string) (*policy.Stored, error)
	List(ctx context.Context) ([]policy.Stored, error)
}

// The codes of the policy endpoints' errors, besides the document's own
// (policy.Code*), which a refused document answers with in Errors.
const (
	CodePolicyInvalid     = "policy_invalid"     // the document was refused: see errors
	CodePolicyUnavailable = "policy_unavailable" // this server has no policy bucket
)

func (h *handler) policyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("PUT /v1/policy", h.auth(RoleWrite, "policy_apply", h.policyApply))
	mux.HandleFunc("GET /v1/policy", h.auth(RoleRead, "policy_list", h.policyList))
	mux.HandleFunc("POST /v1/policy/test", h.auth(RoleRead, "policy_test", h.policyTest))
}

// policyErrors is a refused document as an error: code policy_invalid and
// a sentence for the audit, and every error of the document for the body
// (Error.Errors: code, rule, field, line and message each).
type policyErrors struct{ list []*policy.Error }

func (e *policyErrors) Error() string {
	return CodePolicyInvalid + ": " + e.ErrorMessage()
}
func (e *policyErrors) ErrorCode() string { return CodePolicyInvalid }
func (e *policyErrors) ErrorMessage() string {
	var b strings.Builder
	b.WriteString("the policy document was refused whole, nothing was applied:")
	for i, pe := range e.list {
		if i == 20 {
			b.WriteString(" ...")
			break
		}
		b.WriteString(" [")
		b.WriteString(pe.Error())
		b.WriteString("]")
	}
	return b.String()
}

func (h *handler) policyApply(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Policies == nil {
		return http.StatusNotImplemented, nil, coded.New(CodePolicyUnavailable, "this drift service has no policy bucket")
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, policy.MaxBytes+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return http.StatusBadRequest, nil, &policyErrors{[]*policy.Error{{Code: policy.CodeTooLarge, Msg: "the document is over the limit of 4 MiB"}}}
		}
		return http.StatusBadRequest, nil, coded.Errorf("bad_request", "reading the body: %w", err)
	}
	clear := r.URL.Query()["clear"]
	for _, t := range clear {
		if err := bus.ValidID("tenant", t); err != nil {
			return http.StatusBadRequest, nil, coded.Errorf(bus.CodeInvalidID, "clear: %w", err)
		}
	}
	d, err := policy.Parse(data)
	if err != nil {
		return http.StatusBadRequest, nil, &policyErrors{policy.Errors(err)}
	}
	c.action.Hash = policy.Hash(d)
	tenants := append(d.Tenants(), clear...)
	slices.Sort(tenants)
	if tenants = slices.Compact(tenants); len(tenants) == 1 {
		c.action.Tenant = tenants[0]
	}
	if len(tenants) == 0 {
		return http.StatusBadRequest, nil, coded.New("bad_request", "the document names no tenant and nothing is cleared: nothing to apply (clear a tenant's policy with ?clear=TENANT)")
	}
	applied, err := h.d.Policies.Apply(ctx, d, clear, c.action.Actor)
	if err != nil {
		if pe := policy.Errors(err); len(pe) > 0 {
			return http.StatusBadRequest, nil, &policyErrors{pe}
		}
		switch coded.CodeOf(err) {
		case policystore.CodeConflict:
			return http.StatusConflict, nil, err
		case policystore.CodeClearNamed, bus.CodeInvalidID:
			return http.StatusBadRequest, nil, err
		}
		return 0, nil, err
	}
	return http.StatusOK, policy.ApplyResult{Hash: c.action.Hash, Applied: applied}, nil
}

func (h *handler) policyList(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Policies == nil {
		return http.StatusNotImplemented, nil, coded.New(CodePolicyUnavailable, "this drift service has no policy bucket")
	}
	if r.URL.Query().Has("tenant") {
		t := r.URL.Query().Get("tenant")
		if err := bus.ValidID("tenant", t); err != nil {
			return http.StatusBadRequest, nil, coded.Errorf(bus.CodeInvalidID, "%w", err)
		}
		c.action.Tenant = t
		st, err := h.d.Policies.Get(ctx, t)
		if err != nil {
			return 0, nil, err
		}
		out := []policy.Stored{}
		if st != nil {
			out = append(out, *st)
		}
		return http.StatusOK, out, nil
	}
	list, err := h.d.Policies.List(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, list, nil
}

func (h *handler) policyTest(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Policies == nil {
		return http.StatusNotImplemented, nil, coded.New(CodePolicyUnavailable, "this drift service has no policy bucket")
	}
	var req policy.TestRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, nil, coded.Errorf("bad_request", "the body must be a JSON object of the documented shape: %w", err)
	}
	for _, id := range []struct{ kind, v string }{{"tenant", req.Tenant}, {"server", req.Server}} {
		if err := bus.ValidID(id.kind, id.v); err != nil {
			return 0, nil, coded.Errorf(bus.CodeInvalidID, "%w", err)
		}
	}
	if req.Tool == "" {
		return 0, nil, coded.New("bad_request", "tool is required")
	}
	if req.Risk != "" && !policy.ValidMode(req.Risk) {
		return 0, nil, coded.Errorf("bad_request", "risk %q: want allow, quarantine or block", req.Risk)
	}
	c.action.Tenant, c.action.Server = req.Tenant, req.Server
	st, err := h.d.Policies.Get(ctx, req.Tenant)
	if err != nil {
		return 0, nil, err
	}
	var set *policy.Set
	out := policy.TestResult{Tenant: req.Tenant, Server: req.Server, Tool: req.Tool, StateFrom: policy.StateFromNone}
	if st != nil {
		if set, err = policy.CompileStored(st); err != nil {
			return 0, nil, coded.Errorf("policy_stored_invalid", "the stored policy of %s does not compile: %w", req.Tenant, err)
		}
		out.Version, out.Hash = st.Version, st.Hash
	}
	call := policy.Call{Server: req.Server, Tool: req.Tool, Agent: req.Agent, Arguments: req.Args}
	v, err := h.b.Server(ctx, req.Tenant, req.Server)
	switch {
	case err == nil:
		out.StateFrom = policy.StateFromStatus
		call.Drifted = drifted(v)
		if v.Hold != nil && v.Hold.Risk != nil {
			call.Risk = policy.Mode(v.Hold.Risk.Mode)
			out.RiskBand = v.Hold.Risk.Band
		}
	case h.describeCode(err) != "not_found":
		return 0, nil, err
	}
	if req.Drifted != nil {
		call.Drifted, out.StateFrom = *req.Drifted, policy.StateFromRequest
	}
	if req.Risk != "" {
		call.Risk, out.StateFrom = req.Risk, policy.StateFromRequest
	}
	d := set.Evaluate(&call)
	out.Drifted, out.Risk = call.Drifted, call.Risk
	out.Rule, out.Action, out.Reason, out.Code, out.Mode = d.Rule, d.Action, d.Reason, d.Code, d.Mode
	out.Redact, out.ShadowRule, out.ShadowAction = d.Redact, d.ShadowRule, d.ShadowAction
	if len(d.Redact) > 0 {
		if red, err := policy.Redact(req.Args, d.Redact); err == nil && json.Valid(red) {
			out.Sanitized = red
		}
	}
	return http.StatusOK, out, nil
}

func (h *handler) describeCode(err error) string {
	code, _ := h.describe(err)
	return code
}

// drifted is the drift state a rule's gate reads: tool drift was detected
// on a variant of the server (it is changed), which proxies serve only
// under the alert posture.
func drifted(v *status.View) bool {
	for i := range v.Variants {
		if v.Variants[i].Status == status.Changed {
			return true
		}
	}
	return false
}
