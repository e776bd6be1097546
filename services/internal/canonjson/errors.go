package canonjson

import "fmt"

// Code names a reason for rejecting a document. Codes are stable: they appear
// in events, logs and CLI output, and callers branch on them.
type Code string

// The codes Parse reports.
const (
	CodeInvalidJSON      Code = "invalid_json"        // not JSON per RFC 8259
	CodeTrailingData     Code = "trailing_data"       // bytes after the top-level value
	CodeDuplicateKey     Code = "duplicate_key"       // an object names the same key twice
	CodeInvalidUTF8      Code = "invalid_utf8"        // a string is not valid UTF-8
	CodeLoneSurrogate    Code = "lone_surrogate"      // a \u escape is half a surrogate pair
	CodeTooDeep          Code = "too_deep"            // nesting past Limits.MaxDepth
	CodeTooLarge         Code = "too_large"           // input past Limits.MaxBytes
	CodeNumberOutOfRange Code = "number_out_of_range" // overflows to infinity, underflows to zero, or is subnormal
	CodeNumberInexact    Code = "number_inexact"      // a number, in any notation, whose exact value is not the double it reads as
)

// Error is a rejected document: what is wrong (Code), where (Offset, a byte
// offset into the input), and a sentence for people.
type Error struct {
	Code   Code
	Offset int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s at byte %d: %s", e.Code, e.Offset, e.Msg)
}

// ErrorCode returns the code (package coded's Coder).
func (e *Error) ErrorCode() string { return string(e.Code) }

// ErrorMessage returns the sentence and where, without the code.
func (e *Error) ErrorMessage() string { return fmt.Sprintf("%s (at byte %d)", e.Msg, e.Offset) }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &canonjson.Error{Code: canonjson.CodeDuplicateKey}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func errAt(code Code, off int, format string, args ...any) *Error {
	return &Error{Code: code, Offset: off, Msg: fmt.Sprintf(format, args...)}
}
