// Package admin is the drift service's admin HTTP API: list, show, diff and
// history of server status for the read role; approve (of the whole live
// manifest or of named items), quarantine, rebaseline and risk for the
// write role; a live stream of verdicts. It speaks of servers: a path names
// a tenant and a server, and a listing variant is named (?variant= or in
// the body) only where an action could mean several. Every request is authenticated with
// a bearer token, and every action, allowed or not, is published as an
// AdminAction event.
package admin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/approvals"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Role is what a token may do.
type Role string

// Roles: write includes read.
const (
	RoleRead  Role = "read"
	RoleWrite Role = "write"
)

// Anonymous is the actor of a request without a valid token.
const Anonymous = "anonymous"

// Token is one API credential.
type Token struct {
	Name   string // who: recorded as the actor of every action
	Role   Role
	Secret string
}

// ParseTokens reads "name:role:secret" entries separated by commas or
// newlines, as given in MCPDRIFT_ADMIN_TOKENS or a tokens file.
func ParseTokens(spec string) ([]Token, error) {
	var out []Token
	var errs []error
	seen, named := map[string]bool{}, map[string]bool{}
	for _, f := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == '\n' }) {
		f = strings.TrimSpace(f)
		if f == "" || strings.HasPrefix(f, "#") {
			continue
		}
		parts := strings.SplitN(f, ":", 3)
		if len(parts) != 3 || parts[0] == "" || len(parts[2]) < 16 {
			errs = append(errs, fmt.Errorf("token entry %q: want name:role:secret with a secret of 16 characters or more", clip(parts[0])))
			continue
		}
		role := Role(parts[1])
		if role != RoleRead && role != RoleWrite {
			errs = append(errs, fmt.Errorf("token %q: role %q, want read or write", parts[0], parts[1]))
			continue
		}
		if seen[parts[2]] {
			errs = append(errs, fmt.Errorf("token %q: the same secret is given twice", parts[0]))
			continue
		}
		// The name is the actor in the audit trail: two tokens of one
		// name, or one named as the unauthenticated caller is, could not
		// be told apart there.
		if named[parts[0]] || parts[0] == Anonymous {
			errs = append(errs, fmt.Errorf("token %q: the name is given twice or is the unauthenticated caller's; give each token a name of its own", parts[0]))
			continue
		}
		seen[parts[2]], named[parts[0]] = true, true
		out = append(out, Token{Name: parts[0], Role: role, Secret: parts[2]})
	}
	return out, errors.Join(errs...)
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Backend is what the API serves; *driftsvc.Service is one.
type Backend interface {
	List(ctx context.Context) ([]state.View, error)
	Server(ctx context.Context, tenant, server string) (*state.View, error)
	// DiffRecord is a variant's live manifest against its baseline (or
	// reference), nil when they do not differ.
	DiffRecord(ctx context.Context, rec *state.Record) (*surface.Report, error)
	Diff(ctx context.Context, tenant, server, variant string) (string, *surface.Report, error)
	History(ctx context.Context, tenant, server, variant string) ([]state.History, error)
	Approve(ctx context.Context, tenant, server, variant, hash, actor string) (*state.View, []string, error)
	// ApproveItems approves the live definitions of the named items
	// (KIND:NAME) of the variant live at hash into a new baseline version.
	ApproveItems(ctx context.Context, tenant, server, variant, hash string, items []string, actor string) (*state.View, []string, error)
	Quarantine(ctx context.Context, tenant, server, actor, reason string, preemptive bool) (*state.View, error)
	// Rebaseline moves variants to the hashing settings the tenant's
	// policy asks for, naming the live hash with them.
	Rebaseline(ctx context.Context, tenant, server, variant, hash, actor string) (*state.View, []string, error)
	// SetRisk sets the server's risk band and mode (an admin's relax or
	// tightening).
	SetRisk(ctx context.Context, tenant, server string, band policy.Band, mode policy.Mode, actor, reason string) (*state.View, error)
}

// Deps are what the handler needs besides the backend.
type Deps struct {
	// Audit publishes an admin action after it was carried out (or
	// refused). When it fails, a write answers 500 audit_unavailable saying
	// the action was done but not audited; a read logs it.
	Audit func(ctx context.Context, a *mcpdriftv1.AdminAction) error
	// Follow subscribes to verdicts, calling fn with each (JSON), until stop
	// is called. It returns once the subscription is in place.
	Follow func(fn func(verdict []byte)) (stop func(), err error)
	// Code maps a backend error that carries no code (package coded) to its
	// stable code; without it such an error is internal.
	Code func(error) string
	Log  zerolog.Logger
	Now  func() time.Time
	// Metrics counts requests by action and result; nil counts nothing.
	Metrics *Metrics
	// Approvals serves the held calls' approvals (GET /v1/approvals, POST
	// /v1/approvals/{id}/approve|deny); nil: those answer 503.
	Approvals Approvals
	// Policies serves /v1/policy (docs/policy.md); nil answers 501.
	Policies Policies
	// Baselines serves a server's baseline lockfile (GET and POST
	// .../baseline); nil: those answer 404.
	Baselines Baselines
}

// Approvals is what the API serves of held calls (*approvals.Service).
type Approvals interface {
	List(ctx context.Context) (pending, recent []approval.Show, err error)
	Resolve(ctx context.Context, id string, approve bool, actor, reason string) (approval.Show, error)
}

// ApprovalsShow is the body of GET /v1/approvals.
type ApprovalsShow struct {
	Pending []approval.Show `json:"pending"`
	Recent  []approval.Show `json:"recent"`
}

type handler struct {
	b      Backend
	tokens []Token
	d      Deps
}

// NewHandler returns the API.
func NewHandler(b Backend, tokens []Token, d Deps) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{b: b, tokens: tokens, d: d}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /v1/servers", h.auth(RoleRead, "status", h.list))
	mux.HandleFunc("GET /v1/servers/{tenant}/{server}", h.auth(RoleRead, "show", h.show))
	mux.HandleFunc("GET /v1/servers/{tenant}/{server}/diff", h.auth(RoleRead, "diff", h.diff))
	mux.HandleFunc("GET /v1/servers/{tenant}/{server}/history", h.auth(RoleRead, "history", h.history))
	mux.HandleFunc("POST /v1/servers/{tenant}/{server}/approve", h.auth(RoleWrite, "approve", h.approve))
	mux.HandleFunc("POST /v1/servers/{tenant}/{server}/quarantine", h.auth(RoleWrite, "quarantine", h.quarantine))
	mux.HandleFunc("POST /v1/servers/{tenant}/{server}/rebaseline", h.auth(RoleWrite, "rebaseline", h.rebaseline))
	mux.HandleFunc("POST /v1/servers/{tenant}/{server}/risk", h.auth(RoleWrite, "risk", h.risk))
	mux.HandleFunc("/v1/servers/{tenant}/{server}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path+
			" (a path names a tenant and a server; name a listing variant with ?variant= or \"variant\" in the body)")
	})
	mux.HandleFunc("GET /v1/verdicts", h.auth(RoleRead, "tail", nil)) // a stream, served by tail
	mux.HandleFunc("GET /v1/approvals", h.auth(RoleRead, "approvals", h.approvals))
	mux.HandleFunc("POST /v1/approvals/{id}/approve", h.auth(RoleWrite, "approve_call", h.resolve(true)))
	mux.HandleFunc("POST /v1/approvals/{id}/deny", h.auth(RoleWrite, "deny_call", h.resolve(false)))
	h.policyRoutes(mux)
	h.baselineRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// call is one request as it is audited.
type call struct {
	action *mcpdriftv1.AdminAction
}

type apiFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (status int, body any, err error)

func (h *handler) token(r *http.Request) (Token, bool) { return BearerToken(h.tokens, r) }

// BearerToken is the token a request's "Authorization: Bearer <secret>"
// header names, as the API checks it (the review console checks the same).
func BearerToken(tokens []Token, r *http.Request) (Token, bool) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return Token{}, false
	}
	return Lookup(tokens, got)
}

// Lookup returns the token whose secret is secret, compared in constant
// time; an empty secret is no token.
func Lookup(tokens []Token, secret string) (Token, bool) {
	if secret == "" {
		return Token{}, false
	}
	for _, t := range tokens {
		if subtle.ConstantTimeCompare([]byte(secret), []byte(t.Secret)) == 1 {
			return t, true
		}
	}
	return Token{}, false
}

// auth authenticates, checks the role, runs f, and audits the outcome.
func (h *handler) auth(need Role, action string, f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		a := &mcpdriftv1.AdminAction{
			EventId: fmt.Sprintf("admin-%d-%s", h.d.Now().UnixNano(), randomSuffix()),
			Action:  action, Actor: Anonymous, AtUnixMs: h.d.Now().UnixMilli(),
		}
		pathErr := h.validPath(r)
		if pathErr == nil {
			// Only valid ids name the audit subject's tokens.
			a.Tenant, a.Server, a.Variant = r.PathValue("tenant"), r.PathValue("server"), r.URL.Query().Get("variant")
		}
		tok, ok := h.token(r)
		var status int
		var body any
		var err error
		switch {
		case !ok:
			status, err = http.StatusUnauthorized, coded.New("unauthenticated", "a valid bearer token is required (Authorization: Bearer <token>)")
		case need == RoleWrite && tok.Role != RoleWrite:
			a.Actor, a.Role = tok.Name, string(tok.Role)
			status, err = http.StatusForbidden, coded.Errorf("forbidden", "%s needs the write role; token %q has %s", action, tok.Name, tok.Role)
		default:
			a.Actor, a.Role = tok.Name, string(tok.Role)
			if err = pathErr; err != nil {
				status = http.StatusBadRequest
				break
			}
			if action == "tail" {
				// A stream: audited when it starts.
				if aerr := h.audit(ctx, a, nil); aerr != nil {
					h.d.Metrics.done(action, http.StatusServiceUnavailable)
					writeError(w, http.StatusServiceUnavailable, "audit_unavailable", "the action could not be audited, so it was not done")
					return
				}
				h.d.Metrics.done(action, http.StatusOK)
				h.tail(ctx, w, r)
				return
			}
			status, body, err = f(ctx, w, r, &call{action: a})
		}
		if aerr := h.audit(ctx, a, err); aerr != nil {
			h.d.Log.Error().Err(aerr).Str("action", action).Str("actor", a.Actor).Msg("publishing admin action")
			if err == nil && need == RoleWrite {
				// Done but not audited: say so loudly rather than pretend.
				h.d.Metrics.done(action, http.StatusInternalServerError)
				writeError(w, http.StatusInternalServerError, "audit_unavailable", "the action was done but could not be audited: "+aerr.Error())
				return
			}
		}
		if err != nil {
			code, msg := h.describe(err)
			if status == 0 {
				status = httpStatus(code)
			}
			h.d.Metrics.done(action, status)
			var refused *policyErrors
			if errors.As(err, &refused) {
				writeErrorList(w, status, code, msg, refused.list)
				return
			}
			var cands candidates
			if errors.As(err, &cands) {
				writeError(w, status, code, msg, cands.CandidateVariants()...)
				return
			}
			writeError(w, status, code, msg)
			return
		}
		h.d.Metrics.done(action, status)
		writeJSON(w, status, body)
	}
}

func (h *handler) audit(ctx context.Context, a *mcpdriftv1.AdminAction, err error) error {
	a.Ok = err == nil
	if err != nil {
		a.ErrorCode, a.ErrorMessage = h.describe(err)
	}
	if h.d.Audit == nil {
		return nil
	}
	return h.d.Audit(ctx, a)
}

func (h *handler) validPath(r *http.Request) error {
	for _, p := range []string{"tenant", "server"} {
		if v := r.PathValue(p); v != "" {
			if err := bus.ValidID(p, v); err != nil {
				return coded.Errorf(bus.CodeInvalidID, "%w", err)
			}
		}
	}
	if v := r.URL.Query().Get("variant"); v != "" || r.URL.Query().Has("variant") {
		if err := bus.ValidID("variant", v); err != nil {
			return coded.Errorf(bus.CodeInvalidID, "%w", err)
		}
	}
	return nil
}

// candidates is an error that names the listing variants an action could
// mean (driftsvc.AmbiguousError).
type candidates interface{ CandidateVariants() []string }

// describe returns the code and the sentence of an error for the API's
// answer and the audit: the code it carries (coded.CodeOf), else the one
// Deps.Code gives it, else internal.
func (h *handler) describe(err error) (code, msg string) {
	if code = coded.CodeOf(err); code == "" {
		code = "internal"
		if h.d.Code != nil {
			code = h.d.Code(err)
		}
	}
	return code, coded.MessageOf(err)
}

func httpStatus(code string) int {
	switch code {
	case "not_found":
		return http.StatusNotFound
	case "stale_hash", "unfingerprintable", "no_baseline", "nothing_to_approve", "variant_ambiguous", "held_again",
		"nothing_to_rebaseline", "not_verified", state.ErrItemUnchanged.Code, state.ErrItemUnknown.Code:
		return http.StatusConflict
	case "invalid_id", "bad_request", "invalid_risk", state.ErrItemInvalid.Code:
		return http.StatusBadRequest
	case approvals.CodeResolved, approvals.CodeExpired, approvals.CodeConflict:
		return http.StatusConflict
	case "approvals_unavailable":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func path(r *http.Request) (tenant, server string) {
	return r.PathValue("tenant"), r.PathValue("server")
}

// Show and ServerShow are a variant and a server as the API shows them:
// the status contract (package status), which driftctl and stack read.
type (
	Show       = status.Show
	ServerShow = status.ServerShow
)

func serverShow(v *state.View) ServerShow { return status.ShowServer(v) }

// DiffShow is the body of GET .../diff: the report and the variant it is of.
type DiffShow struct {
	Variant string `json:"variant"`
	*surface.Report
}

func (h *handler) list(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	views, err := h.b.List(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := make([]ServerShow, 0, len(views))
	for i := range views {
		out = append(out, serverShow(&views[i]))
	}
	return http.StatusOK, out, nil
}

func (h *handler) show(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	t, s := path(r)
	v, err := h.b.Server(ctx, t, s)
	if err != nil {
		return 0, nil, err
	}
	if variant := r.URL.Query().Get("variant"); variant != "" {
		var one []state.Record
		for _, rec := range v.Variants {
			if rec.Variant == variant {
				one = append(one, rec)
			}
		}
		if len(one) == 0 {
			return 0, nil, coded.Errorf(state.ErrNotFound.Code, "%s/%s has no listing variant %s", t, s, variant)
		}
		v.Variants = one
	}
	out := serverShow(v)
	for i := range out.Variants {
		if out.Variants[i].Diff, err = h.b.DiffRecord(ctx, &out.Variants[i].Record); err != nil {
			return 0, nil, err
		}
	}
	return http.StatusOK, out, nil
}

func (h *handler) diff(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	t, s := path(r)
	variant, rep, err := h.b.Diff(ctx, t, s, r.URL.Query().Get("variant"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, DiffShow{Variant: variant, Report: rep}, nil
}

func (h *handler) history(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	t, s := path(r)
	hist, err := h.b.History(ctx, t, s, r.URL.Query().Get("variant"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, hist, nil
}

// ApproveRequest is the body of POST .../approve.
type ApproveRequest struct {
	Hash string `json:"hash"` // the live manifest's hash, as reviewed
	// Variant names the listing variant to approve; empty: the variants
	// whose live manifest is Hash (or the server's only variant).
	Variant string `json:"variant,omitempty"`
	// Items, when given, approves only these items' live definitions
	// (KIND:NAME: tool:search_notes, resource:ui://notes/view.html,
	// instructions), the rest staying as approved before: a per-item
	// approve, of one variant (the named one, or the only one live at
	// Hash). Not for rebaseline.
	Items []string `json:"items,omitempty"`
}

// QuarantineRequest is the body of POST .../quarantine.
type QuarantineRequest struct {
	Reason string `json:"reason"`
	// Preemptive holds a server that has never been observed, so that its
	// first listing comes up quarantined; without it such a server is
	// not_found.
	Preemptive bool `json:"preemptive,omitempty"`
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return coded.Errorf("bad_request", "the body must be a JSON object of the documented shape: %w", err)
	}
	// One object and nothing after it: a second value (say the items of
	// a per-item approve) would otherwise be ignored, not refused.
	if _, err := dec.Token(); err != io.EOF {
		return coded.New("bad_request", "the body must be one JSON object of the documented shape, with nothing after it")
	}
	return nil
}

func (h *handler) approve(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return h.namedHash(ctx, r, c, "hash must be the sha256:<hex> you reviewed",
		func(ctx context.Context, tenant, server string, req ApproveRequest, actor string) (*state.View, []string, error) {
			if req.Items == nil {
				return h.b.Approve(ctx, tenant, server, req.Variant, req.Hash, actor)
			}
			return h.b.ApproveItems(ctx, tenant, server, req.Variant, req.Hash, req.Items, actor)
		})
}

// AuditItems is the hash column of a per-item approve's audit row
// (AdminAction.hash): the live hash reviewed, then the items approved as
// a JSON array, so that the hash stays its first word.
func AuditItems(hash string, items []string) string {
	b, _ := json.Marshal(items)
	return hash + " items=" + string(b)
}

// namedHash carries out an action that names a hash and, optionally, a
// variant (approve, rebaseline): the body is an ApproveRequest (a
// RebaselineRequest has its shape), the hash (and the items of a per-item
// approve) is audited, and the answer is the server after, with the
// variants the action re-baselined.
func (h *handler) namedHash(ctx context.Context, r *http.Request, c *call, hashHint string,
	do func(ctx context.Context, tenant, server string, req ApproveRequest, actor string) (*state.View, []string, error)) (int, any, error) {
	var req ApproveRequest
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	c.action.Hash = req.Hash
	if req.Items != nil {
		c.action.Hash = AuditItems(req.Hash, req.Items)
	}
	if req.Variant != "" {
		if err := bus.ValidID("variant", req.Variant); err != nil {
			return 0, nil, coded.Errorf(bus.CodeInvalidID, "%w", err)
		}
		c.action.Variant = req.Variant
	}
	if _, err := surface.ParseDigest(req.Hash); err != nil {
		return 0, nil, coded.Errorf("bad_request", "%s: %w", hashHint, err)
	}
	t, s := path(r)
	v, done, err := do(ctx, t, s, req, c.action.Actor)
	if err != nil {
		return 0, nil, err
	}
	if len(done) == 1 {
		c.action.Variant = done[0]
	}
	out := serverShow(v)
	out.Approved = done
	return http.StatusOK, out, nil
}

func (h *handler) quarantine(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req QuarantineRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			return 0, nil, err
		}
	}
	t, s := path(r)
	v, err := h.b.Quarantine(ctx, t, s, c.action.Actor, req.Reason, req.Preemptive)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, serverShow(v), nil
}

// RebaselineRequest is the body of POST .../rebaseline: Hash is the live
// manifest's hash by the settings the policy asks for
// (policy_wants_live_hash in show); Variant names the listing variant,
// empty: the variants live at Hash by them (or the server's only one).
type RebaselineRequest = ApproveRequest

// RiskRequest is the body of POST .../risk.
type RiskRequest struct {
	Band   policy.Band `json:"band"`
	Mode   policy.Mode `json:"mode"`
	Reason string      `json:"reason,omitempty"`
}

func (h *handler) rebaseline(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return h.namedHash(ctx, r, c, "hash must be the live hash by the new settings (policy_wants_live_hash)",
		func(ctx context.Context, tenant, server string, req ApproveRequest, actor string) (*state.View, []string, error) {
			if req.Items != nil {
				return nil, nil, coded.New("bad_request", "a rebaseline moves the whole approved manifest to the new settings; it names no items")
			}
			return h.b.Rebaseline(ctx, tenant, server, req.Variant, req.Hash, actor)
		})
}

func (h *handler) risk(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req RiskRequest
	if err := decodeBody(r, &req); err != nil {
		return 0, nil, err
	}
	// The audit row's hash column carries what was set (AdminAction.hash).
	c.action.Hash = "band=" + string(req.Band) + " mode=" + string(req.Mode)
	t, s := path(r)
	v, err := h.b.SetRisk(ctx, t, s, req.Band, req.Mode, c.action.Actor, req.Reason)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, serverShow(v), nil
}

// tail streams verdicts as newline-delimited JSON until the client leaves.
func (h *handler) tail(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if h.d.Follow == nil {
		writeError(w, http.StatusNotImplemented, "unavailable", "this server does not stream verdicts")
		return
	}
	lines := make(chan []byte, 256)
	stop, err := h.d.Follow(func(v []byte) {
		select {
		case lines <- v:
		default: // a client too slow to read loses verdicts rather than stall the bus
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "subscribing to verdicts: "+err.Error())
		return
	}
	defer stop()
	// The subscription is in place before the client hears 200: a verdict
	// that happens after that reaches it.
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-lines:
			if _, err := w.Write(append(v, '\n')); err != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// Error is the body of every error response.
type Error struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// Candidates names the listing variants an ambiguous action could
		// mean (variant_ambiguous).
		Candidates []string `json:"candidates,omitempty"`
		// Errors are every error of a refused policy document
		// (policy_invalid): code, rule, field, line, message each.
		Errors []*policy.Error `json:"errors,omitempty"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string, cands ...string) {
	var e Error
	e.Error.Code, e.Error.Message, e.Error.Candidates = code, msg, cands
	writeJSON(w, status, e)
}

func writeErrorList(w http.ResponseWriter, status int, code, msg string, list []*policy.Error) {
	var e Error
	e.Error.Code, e.Error.Message, e.Error.Errors = code, msg, list
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

var errNoApprovals = coded.New("approvals_unavailable", "this drift service serves no approvals")

func (h *handler) approvals(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if h.d.Approvals == nil {
		return 0, nil, errNoApprovals
	}
	pending, recent, err := h.d.Approvals.List(ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, ApprovalsShow{Pending: nonNil(pending), Recent: nonNil(recent)}, nil
}

func nonNil(s []approval.Show) []approval.Show {
	if s == nil {
		return []approval.Show{}
	}
	return s
}

// ResolveBody is the optional body of POST /v1/approvals/{id}/approve|deny.
type ResolveBody struct {
	Reason string `json:"reason"`
}

// resolve approves or denies a held call; the admin action names the
// request and, once found, the call's tenant and server.
func (h *handler) resolve(approve bool) apiFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
		if h.d.Approvals == nil {
			return 0, nil, errNoApprovals
		}
		var body ResolveBody
		if r.ContentLength != 0 {
			if err := decodeBody(r, &body); err != nil {
				return 0, nil, err
			}
		}
		id := r.PathValue("id")
		if approval.ValidID(id) == nil {
			c.action.ApprovalId = id
		}
		sh, err := h.d.Approvals.Resolve(ctx, id, approve, c.action.Actor, body.Reason)
		if sh.ID != "" {
			c.action.Tenant, c.action.Server = sh.Tenant, sh.Server
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, sh, nil
	}
}
