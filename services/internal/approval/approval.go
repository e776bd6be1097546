// Package approval is the contract of held tools/call approvals between the
// proxies that hold calls, the drift service that keeps the requests and
// records the admins' resolutions, driftctl and the review console: the
// subject, the bucket and its keys, the record (mcpdriftv1.Approval, JSON
// mapping) and its states. docs/policy-enforcement.md describes the flow.
package approval

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Bucket is the KV bucket of approvals (bus.BucketApprovals): one key per
// request (Key), whose value is an mcpdriftv1.Approval (JSON). Only the
// drift service writes it; a tenant's proxies watch their tenant's keys. It
// keeps a request, resolved or not, for 7 days.
const Bucket = bus.BucketApprovals

// MaxArguments bounds the arguments a request carries.
const MaxArguments = 64 << 10

// RequestSubject is where a proxy asks for an approval (core NATS
// request-reply; the drift service answers with a Reply).
func RequestSubject(tenant, server string) string {
	return bus.Prefix + ".approval.request." + tenant + "." + server
}

// RequestSubjects is what the drift service subscribes to.
const RequestSubjects = bus.Prefix + ".approval.request.*.*"

// Key is the bucket key of request id of tenant.
func Key(tenant, id string) string { return tenant + "." + id }

// The states of a request (State).
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired" // unresolved when its proxy stopped waiting
)

// NewID returns a fresh request id: 32 hex digits.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id is a request id.
func ValidID(id string) error {
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("approval id %q: want 32 lowercase hex digits", id)
	}
	return nil
}

// State is the state of a at now.
func State(a *mcpdriftv1.Approval, now time.Time) string {
	if r := a.GetResolution(); r != nil {
		return r.GetOutcome()
	}
	if now.UnixMilli() >= a.GetRequest().GetExpiresAtUnixMs() {
		return Expired
	}
	return Pending
}

// ValidRequest checks a request as the drift service receives it on
// subject: its tenant and server must be the subject's (a proxy's NATS
// permissions bind it to its tenant's subjects).
func ValidRequest(r *mcpdriftv1.ApprovalRequest, subject string) error {
	var errs []error
	if subject != RequestSubject(r.GetTenant(), r.GetServer()) {
		errs = append(errs, fmt.Errorf("request of tenant %q server %q on subject %q", r.GetTenant(), r.GetServer(), subject))
	}
	errs = append(errs, ValidID(r.GetId()), bus.ValidID("tenant", r.GetTenant()), bus.ValidID("server", r.GetServer()))
	if r.GetTool() == "" {
		errs = append(errs, errors.New("no tool"))
	}
	if len(r.GetArguments()) > MaxArguments {
		errs = append(errs, fmt.Errorf("arguments of %d bytes, more than %d", len(r.GetArguments()), MaxArguments))
	}
	if r.GetExpiresAtUnixMs() <= r.GetRequestedAtUnixMs() {
		errs = append(errs, errors.New("expires before it was requested"))
	}
	return errors.Join(errs...)
}

// Encode is the JSON of a message of this package (a request, an Approval).
func Encode(m proto.Message) ([]byte, error) { return bus.MarshalJSON(m) }

// Decode reads an Approval record.
func Decode(data []byte) (*mcpdriftv1.Approval, error) {
	var a mcpdriftv1.Approval
	if err := protojson.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("decoding approval: %w", err)
	}
	if a.GetRequest() == nil {
		return nil, errors.New("decoding approval: no request")
	}
	return &a, nil
}

// DecodeRequest reads an ApprovalRequest.
func DecodeRequest(data []byte) (*mcpdriftv1.ApprovalRequest, error) {
	var r mcpdriftv1.ApprovalRequest
	if err := protojson.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding approval request: %w", err)
	}
	return &r, nil
}

// Reply is the drift service's answer to a request: OK, or the error's
// stable code and sentence.
type Reply struct {
	OK    bool   `json:"ok"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// Show is a request as the admin API, driftctl and the console show it.
type Show struct {
	ID                 string          `json:"id"`
	State              string          `json:"state"` // pending, approved, denied, expired
	Tenant             string          `json:"tenant"`
	Server             string          `json:"server"`
	Proxy              string          `json:"proxy"`
	Tool               string          `json:"tool"`
	Agent              string          `json:"agent,omitempty"`
	Rule               string          `json:"rule,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	RiskMode           string          `json:"risk_mode,omitempty"`
	ArgumentsDigest    string          `json:"arguments_digest"`
	Arguments          json.RawMessage `json:"arguments,omitempty"`
	ArgumentsTruncated bool            `json:"arguments_truncated,omitempty"`
	RequestedAtMs      int64           `json:"requested_at_ms"`
	ExpiresAtMs        int64           `json:"expires_at_ms"`
	Actor              string          `json:"actor,omitempty"`
	ResolutionReason   string          `json:"resolution_reason,omitempty"`
	ResolvedAtMs       int64           `json:"resolved_at_ms,omitempty"`
}

// ShowOf is how a is shown at now.
func ShowOf(a *mcpdriftv1.Approval, now time.Time) Show {
	r := a.GetRequest()
	sh := Show{ID: r.GetId(), State: State(a, now), Tenant: r.GetTenant(), Server: r.GetServer(), Proxy: r.GetProxy(),
		Tool: r.GetTool(), Agent: r.GetAgent(), Rule: r.GetRule(), Reason: r.GetReason(), RiskMode: r.GetRiskMode(),
		ArgumentsDigest: r.GetArgumentsDigest(), ArgumentsTruncated: r.GetArgumentsTruncated(),
		RequestedAtMs: r.GetRequestedAtUnixMs(), ExpiresAtMs: r.GetExpiresAtUnixMs()}
	if args := r.GetArguments(); len(args) > 0 && json.Valid(args) {
		sh.Arguments = args
	}
	if res := a.GetResolution(); res != nil {
		sh.Actor, sh.ResolutionReason, sh.ResolvedAtMs = res.GetActor(), res.GetReason(), res.GetResolvedAtUnixMs()
	}
	return sh
}
