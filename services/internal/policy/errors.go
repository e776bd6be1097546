package policy

import (
	"errors"
	"fmt"
	"strings"
)

// The codes of the errors Parse, Validate and Compile report, and of the
// decisions Evaluate makes on arguments it cannot read. They are stable:
// the admin API, driftctl and audit rows carry them (docs/policy.md).
const (
	CodeSyntax           = "policy_bad_syntax"        // not YAML or JSON, or more than one document
	CodeUnknownField     = "policy_unknown_field"     // a field the document format does not have
	CodeBadType          = "policy_bad_type"          // a field of the wrong type (a list for a string...)
	CodeMissingID        = "policy_missing_id"        // a rule without an id
	CodeBadID            = "policy_bad_id"            // a rule id outside the name rules
	CodeDuplicateID      = "policy_duplicate_id"      // two rules of a tenant with the same id
	CodeMissingTenant    = "policy_missing_tenant"    // a rule or setting without a tenant
	CodeBadTenant        = "policy_bad_tenant"        // a tenant outside the name rules
	CodeBadServer        = "policy_bad_server"        // a setting's server outside the name rules
	CodeBadGlob          = "policy_bad_glob"          // a server, tool or agent glob that can match nothing valid
	CodeBadPath          = "policy_bad_path"          // an argument path outside the supported JSONPath subset
	CodeBadOp            = "policy_bad_op"            // an unknown operator
	CodeBadValue         = "policy_bad_value"         // a clause value that does not fit its operator
	CodeBadRegex         = "policy_bad_regex"         // a regex RE2 does not compile
	CodeBadCIDR          = "policy_bad_cidr"          // a cidr_match value that is no CIDR or address
	CodeBadAction        = "policy_bad_action"        // a missing or unknown action
	CodeBadRedact        = "policy_bad_redact"        // sanitize without redact paths, or redact on another action
	CodeBadSetting       = "policy_bad_setting"       // an unknown posture, on_drift or hash
	CodeDuplicateSetting = "policy_duplicate_setting" // two drift or risk settings for the same tenant and server
	CodeBadBand          = "policy_bad_band"          // an unknown risk band
	CodeBadMode          = "policy_bad_mode"          // an unknown risk mode
	CodeTooLarge         = "policy_too_large"         // a document past the limits (MaxBytes, MaxRules...)
	// CodeUnreadableArgs is the code of a Deny decision on a call whose
	// arguments a candidate rule's clauses needed but that cannot be read
	// unambiguously (Decision.Code): invalid JSON, duplicate member names,
	// invalid UTF-8, lone surrogates, too deep or too large, not an object.
	CodeUnreadableArgs = "policy_unreadable_arguments"
)

// Error is one thing wrong with a policy document: a stable code, the rule
// it is about (the rule's id, or drift[i], risk[i], rules[i] for a rule
// without a valid id; empty for the document as a whole), the field (such as
// args[0].op), the line in the source when known, and a sentence. It
// implements coded.Coder. Parse and Validate return every Error of a
// document joined (errors.Join); Errors lists them.
type Error struct {
	Code  string `json:"code"`
	Rule  string `json:"rule,omitempty"`
	Field string `json:"field,omitempty"`
	Line  int    `json:"line,omitempty"`
	Msg   string `json:"message"`
}

// Error is the code, where, and the sentence.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code)
	b.WriteString(": ")
	if w := e.where(); w != "" {
		b.WriteString(w)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) where() string {
	var parts []string
	if e.Line > 0 {
		parts = append(parts, fmt.Sprintf("line %d", e.Line))
	}
	if e.Rule != "" {
		parts = append(parts, e.Rule)
	}
	if e.Field != "" {
		parts = append(parts, e.Field)
	}
	return strings.Join(parts, ": ")
}

// ErrorCode returns the code (coded.Coder).
func (e *Error) ErrorCode() string { return e.Code }

// ErrorMessage returns where and the sentence, without the code.
func (e *Error) ErrorMessage() string {
	if w := e.where(); w != "" {
		return w + ": " + e.Msg
	}
	return e.Msg
}

// Is reports whether target is an *Error with e's code and no message, a
// sentinel: errors.Is(err, &policy.Error{Code: policy.CodeBadOp}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Code == e.Code
}

// Errors lists the *Error values in err, through errors.Join and wrapping,
// in order; nil when there are none.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		switch x := err.(type) {
		case nil:
		case *Error:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

// errs collects the errors of one validation.
type errs struct{ list []error }

func (l *errs) add(code, rule, field, format string, args ...any) {
	l.list = append(l.list, &Error{Code: code, Rule: rule, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (l *errs) err() error { return errors.Join(l.list...) }
