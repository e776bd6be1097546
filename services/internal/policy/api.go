package policy

import "encoding/json"

// The shapes of the drift service's /v1/policy (docs/policy.md), which the
// admin API writes and driftctl reads.

// Applied is what an apply did to one tenant.
type Applied struct {
	Tenant  string `json:"tenant"`
	Version int64  `json:"version"`
	Hash    string `json:"hash"`
	Rules   int    `json:"rules"`
	// Changed is false when the tenant's stored policy was already this
	// one: nothing was written, the version did not move.
	Changed bool `json:"changed"`
	// Cleared: the tenant's policy was replaced by an empty one.
	Cleared bool `json:"cleared,omitempty"`
}

// ApplyResult is the answer of PUT /v1/policy that applied a document.
type ApplyResult struct {
	Hash    string    `json:"hash"` // Hash of the whole document
	Applied []Applied `json:"applied"`
}

// TestRequest is the body of POST /v1/policy/test: a call to evaluate
// against the tenant's stored policy, without calling anything.
type TestRequest struct {
	Tenant string          `json:"tenant"`
	Server string          `json:"server"`
	Tool   string          `json:"tool"`
	Agent  string          `json:"agent,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	// Drifted and Risk replace what the status bucket says of the server
	// (its drift state, its risk mode), to try a rule's gate.
	Drifted *bool `json:"drifted,omitempty"`
	Risk    Mode  `json:"risk,omitempty"`
}

// Where a test's server state came from (TestResult.StateFrom).
const (
	StateFromStatus  = "status"  // the status bucket
	StateFromRequest = "request" // the request's Drifted or Risk
	StateFromNone    = "none"    // the server has no record: not drifted, no risk mode
)

// TestResult is the answer of POST /v1/policy/test: the decision, the
// stored policy's version and hash (0 and "": the tenant has none), and
// the server state the call was judged with.
type TestResult struct {
	Tenant    string `json:"tenant"`
	Server    string `json:"server"`
	Tool      string `json:"tool"`
	Version   int64  `json:"version"`
	Hash      string `json:"hash,omitempty"`
	Drifted   bool   `json:"drifted"`
	Risk      Mode   `json:"risk,omitempty"`
	RiskBand  string `json:"risk_band,omitempty"`
	StateFrom string `json:"state_from"`

	Rule         string   `json:"rule"`
	Action       Action   `json:"action"`
	Reason       string   `json:"reason,omitempty"`
	Code         string   `json:"code,omitempty"`
	Mode         Mode     `json:"mode,omitempty"`
	Redact       []string `json:"redact,omitempty"`
	ShadowRule   string   `json:"shadow_rule,omitempty"`
	ShadowAction Action   `json:"shadow_action,omitempty"`
	// Sanitized are the arguments as the server would receive them, when
	// the decision redacts some.
	Sanitized json.RawMessage `json:"sanitized,omitempty"`
}
