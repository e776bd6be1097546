// Package policy is the per-call policy contract: the policy document an
// admin writes (call rules, drift settings, risk modes), its validation,
// the compiled form every proxy evaluates each tools/call against at
// dispatch, and the record the drift service stores per tenant in the
// policy bucket. The drift service is the one writer of that bucket;
// proxies watch their tenant's key and keep the last good copy; driftctl
// and the review console read it through this package. docs/policy.md
// describes the document and the evaluation order.
package policy

import (
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Bucket is the JetStream KV bucket of policies: one key per tenant (Key),
// whose value is a Stored record (JSON). Only the drift service writes it.
const Bucket = bus.BucketPolicy

// Key is the policy bucket's key of a tenant.
func Key(tenant string) string { return tenant }

// Action is what a matching rule does with a call.
type Action string

// The actions, from the least to the most restrictive.
const (
	Allow           Action = "allow"            // forward
	Audit           Action = "audit"            // forward and record the match
	Sanitize        Action = "sanitize"         // forward with the rule's argument paths redacted
	PendingApproval Action = "pending_approval" // hold until an admin approves or denies, or the wait ends (deny)
	Deny            Action = "deny"             // answer with a tool error "policy deny: <reason>"
)

// Op is an argument clause's operator.
type Op string

// The operators of an argument clause; each can be negated (Clause.Not).
const (
	OpEq        Op = "eq"         // JSON equality with Value
	OpContains  Op = "contains"   // a string containing Value, or an array with an element equal to it
	OpRegex     Op = "regex"      // a string matching the RE2 expression Value
	OpIn        Op = "in"         // equal to one of the values of the array Value
	OpCIDRMatch Op = "cidr_match" // an IP address string inside one of the CIDRs Value (a string or an array)
	OpGt        Op = "gt"         // a number greater than Value
	OpLt        Op = "lt"         // a number less than Value
)

// Clause tests one value inside a call's arguments. Path is a JSONPath of
// the simple form $.a.b[0].c (members and array indexes, from the root of
// the arguments object). A path that selects nothing never matches, also
// when negated: "not" negates the operator on a value that exists.
type Clause struct {
	Path  string `json:"path" yaml:"path"`
	Op    Op     `json:"op" yaml:"op"`
	Value any    `json:"value" yaml:"value"`
	Not   bool   `json:"not,omitempty" yaml:"not,omitempty"`
}

// Rule is one call rule. Server, Tool and Agent are globs (* and ?, matched
// against the whole name; empty matches everything). Rules are evaluated in
// order of Priority (higher first), then in the order written; the first
// enforced match decides.
type Rule struct {
	ID     string   `json:"id" yaml:"id"`
	Tenant string   `json:"tenant" yaml:"tenant"`
	Server string   `json:"server,omitempty" yaml:"server,omitempty"`
	Tool   string   `json:"tool,omitempty" yaml:"tool,omitempty"`
	Agent  string   `json:"agent,omitempty" yaml:"agent,omitempty"`
	Args   []Clause `json:"args,omitempty" yaml:"args,omitempty"`
	// Drifted, when set, makes the rule match only when the server's drift
	// state equals it (true: tool drift was detected on the server and it
	// is served under the alert posture).
	Drifted  *bool  `json:"drifted,omitempty" yaml:"drifted,omitempty"`
	Priority int    `json:"priority,omitempty" yaml:"priority,omitempty"`
	Action   Action `json:"action" yaml:"action"`
	Reason   string `json:"reason,omitempty" yaml:"reason,omitempty"`
	// Redact are the argument paths a sanitize rule replaces (Redacted).
	Redact []string `json:"redact,omitempty" yaml:"redact,omitempty"`
	// Shadow: evaluated and recorded, never enforced.
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
}

// Redacted is what a sanitize rule puts in place of a redacted value.
const Redacted = "[redacted by mcpdrift policy]"

// Hash algorithms of the fingerprint; hashes stay algorithm-tagged.
const (
	SHA256 = "sha256"
	SHA512 = "sha512"
)

// DriftSetting is how drift is judged for a tenant (Server empty) or for one
// server of it (an override). A field left out inherits: the server's
// override, then the tenant's setting, then the drift service's defaults.
// The settings a baseline was judged by are recorded with it
// (status.Policy); a change of Hash or Annotations moves every hash and
// takes effect only through an explicit re-baseline.
type DriftSetting struct {
	Tenant      string `json:"tenant" yaml:"tenant"`
	Server      string `json:"server,omitempty" yaml:"server,omitempty"`
	Posture     string `json:"posture,omitempty" yaml:"posture,omitempty"`   // status.Discovery or status.Strict
	OnDrift     string `json:"on_drift,omitempty" yaml:"on_drift,omitempty"` // status.Block, status.Alert or status.WithholdChanged
	Guard       *bool  `json:"guard,omitempty" yaml:"guard,omitempty"`
	Hash        string `json:"hash,omitempty" yaml:"hash,omitempty"`               // SHA256 or SHA512
	Annotations *bool  `json:"annotations,omitempty" yaml:"annotations,omitempty"` // tool annotations covered by the hash
	// Form is the canonical form of the hashes (FormV1 or FormV2; left
	// out: the newest, FormV2, docs/adr/0015). Like Hash, a change takes
	// effect only through a re-baseline.
	Form string `json:"form,omitempty" yaml:"form,omitempty"`
}

// Canonical forms of the fingerprint (docs/canonical-form.md).
const (
	FormV1 = "mcpdrift/v1"
	FormV2 = "mcpdrift/v2"
)

// Band is a server's risk band, from what the engine found on its surface.
type Band string

// The bands, from low to critical.
const (
	BandLow      Band = "low"
	BandMedium   Band = "medium"
	BandHigh     Band = "high"
	BandCritical Band = "critical"
)

// Mode is the enforcement mode of a server's risk band.
type Mode string

// The modes, from the least to the most restrictive.
const (
	ModeAllow      Mode = "allow"      // the rules decide
	ModeQuarantine Mode = "quarantine" // any action short of deny becomes pending_approval
	ModeBlock      Mode = "block"      // every call is denied
)

// RiskSetting maps risk bands to enforcement modes for a tenant (Server
// empty) or one server of it. A band it leaves out is ModeAllow.
type RiskSetting struct {
	Tenant string        `json:"tenant" yaml:"tenant"`
	Server string        `json:"server,omitempty" yaml:"server,omitempty"`
	Modes  map[Band]Mode `json:"modes" yaml:"modes"`
}

// Document is a policy file as an admin writes it (YAML or JSON): every
// tenant's rules and settings, applied as a whole or not at all.
type Document struct {
	Rules []Rule         `json:"rules,omitempty" yaml:"rules,omitempty"`
	Drift []DriftSetting `json:"drift,omitempty" yaml:"drift,omitempty"`
	Risk  []RiskSetting  `json:"risk,omitempty" yaml:"risk,omitempty"`
}

// Stored is a tenant's policy as the drift service stores it under
// Key(tenant): that tenant's part of the applied document, versioned.
type Stored struct {
	Tenant      string   `json:"tenant"`
	Version     int64    `json:"version"`
	Hash        string   `json:"hash"` // sha256 of the canonical JSON of Document
	UpdatedBy   string   `json:"updated_by"`
	UpdatedAtMs int64    `json:"updated_at_ms"`
	Document    Document `json:"document"`
}

// Call is what a rule is evaluated against: one tools/call as the proxy
// reads it. Arguments are the raw bytes of params.arguments.
type Call struct {
	Server    string
	Tool      string
	Agent     string
	Arguments []byte
	Drifted   bool
	Risk      Mode // the server's enforcement mode (status record); "" is ModeAllow
}

// Decision is the outcome of evaluating a call: the enforced action and the
// rule that decided it (Rule "" when no rule matched: Allow), and the first
// shadow rule that matched before it, if any (recorded, not enforced).
type Decision struct {
	Rule   string
	Action Action
	Reason string
	// Redact are the paths of a Sanitize rule, kept when quarantine holds
	// the call (an approved call is still sanitized): the set's own slice,
	// never to be modified.
	Redact []string

	// Code is set when the engine itself decided rather than a rule's
	// action: CodeUnreadableArgs, CodeRiskBlock, CodeRiskQuarantine.
	Code string

	// Mode is the risk mode that changed the rule's action ("" when it did
	// not): quarantine and block are enforced also under shadow mode.
	Mode Mode

	ShadowRule   string
	ShadowAction Action
}

// Risk is a server's risk band and enforcement mode as the drift service
// keeps them (ratcheted: a re-scan only tightens them; only an admin
// relaxes them).
type Risk = status.Risk
