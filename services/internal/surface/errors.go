package surface

import (
	"errors"
	"fmt"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Code names why a surface was rejected. Codes are stable: events, logs,
// the CLI and MCP errors carry them, and callers branch on them. The codes of
// package canonjson (invalid_json, duplicate_key, invalid_utf8, ...) pass
// through unchanged.
type Code = canonjson.Code

// Codes for what is wrong with a surface, beyond the JSON itself.
const (
	CodeUnknownFormat  Code = "unknown_format"  // not a list result, a JSON-RPC response or a capture
	CodeJSONRPCError   Code = "jsonrpc_error"   // a JSON-RPC response that carries an error
	CodeItemNotObject  Code = "item_not_object" // a tool, prompt or resource that is not an object
	CodeMissingName    Code = "missing_name"    // an item with no name (uri, uriTemplate), or an empty one
	CodeInvalidField   Code = "invalid_field"   // a covered field of the wrong JSON type
	CodeDuplicateItem  Code = "duplicate_item"  // two items with the same name in one listing
	CodeTooManyItems   Code = "too_many_items"  // more items than Limits.MaxItems
	CodeIncomplete     Code = "incomplete"      // the last page still had a nextCursor
	CodeMissingTools   Code = "missing_tools"   // a surface with no tools/list at all
	CodeInvalidCapture Code = "invalid_capture" // a capture not in the documented shape
	// CodeAmbiguousEnvelope: a result object that carries a JSON-RPC
	// envelope of its own ("jsonrpc"): which of the two a reader takes for
	// the result is anyone's guess, so neither is hashed.
	CodeAmbiguousEnvelope Code = "ambiguous_envelope"
	// CodeAmbiguousMember: member names that differ only in case ("name"
	// and "Name", "description" and "deſcription"), or a member a
	// case-insensitive reader takes for a hashed field: Go's encoding/json
	// matches struct fields that way, so such an item reads two ways.
	CodeAmbiguousMember Code = "ambiguous_member"
)

// Error is a rejected surface: a stable Code, a sentence, and where it was
// found when known (the listing kind, page and item).
type Error struct {
	Code Code
	Msg  string
	Kind Kind   // the listing the problem is in, if any
	Page int    // 1-based page number, 0 if unknown
	Item string // the offending item's name, if known
	Err  error  // the underlying canonjson error, if any
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.ErrorMessage() }

// ErrorCode returns the code (package coded's Coder).
func (e *Error) ErrorCode() string { return string(e.Code) }

// ErrorMessage returns where the problem is and the sentence, without the
// code.
func (e *Error) ErrorMessage() string {
	where := ""
	if e.Kind != 0 {
		where = e.Kind.String()
		if e.Page > 0 {
			where += fmt.Sprintf(" page %d", e.Page)
		}
		if e.Item != "" {
			where += fmt.Sprintf(" item %q", e.Item)
		}
		where += ": "
	}
	return where + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the stable code of err (coded.CodeOf), or "" when err
// carries none.
func CodeOf(err error) Code { return Code(coded.CodeOf(err)) }

func fail(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// jsonFail wraps a canonjson error, keeping its code and sentence.
func jsonFail(err error) *Error {
	var ce *canonjson.Error
	if errors.As(err, &ce) {
		return &Error{Code: ce.Code, Msg: ce.ErrorMessage(), Err: err}
	}
	return &Error{Code: canonjson.CodeInvalidJSON, Msg: err.Error(), Err: err}
}
