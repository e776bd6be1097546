// Package coded is the one shape of an error that carries a stable code: a
// short snake_case word that events, API bodies, CLI output and metrics
// carry and that callers branch on, beside a sentence for people.
//
// Every package's coded errors implement Coder, so that a code is always
// read with errors.As (CodeOf), through any wrapping, and never recovered by
// parsing an error's text. Error is the concrete type for a package that
// needs no richer one; package-level sentinels made with New and an empty
// message let callers keep branching with errors.Is.
//
// The registry (registry.go, Lookup) is the one list of every code a client
// or an operator can see, with what it means where it is read and, for the
// proxy's answers, the shape they take: the JSON-RPC error code and the
// HTTP status, which the proxy reads from it (session.Reply) so that each
// code is answered one way on every transport. It is a Go table rather
// than a data file with generated constants: it needs no generator, and
// the proxy reads it at run time. Packages keep naming their codes with
// their own typed constants (canonjson.Code, session.Code, ...); tests hold
// the two together: every code a package declares or writes is in the
// registry and every entry is declared somewhere (TestEveryCodeRegistered,
// which reads the services' source), and docs/codes.md is generated from
// the registry (TestCodesDoc; go test ./internal/coded -run TestCodesDoc
// -update rewrites it).
package coded

import (
	"errors"
	"fmt"
)

// Coder is an error with a stable code. Its Error text is, by convention,
// the code, ": " and the message.
type Coder interface {
	error
	// ErrorCode is the stable code.
	ErrorCode() string
	// ErrorMessage is the sentence for people, without the code.
	ErrorMessage() string
}

// Error is an error with a stable code, a sentence and an optional cause.
type Error struct {
	Code string
	Msg  string
	Err  error // the cause, if any (Unwrap)
}

// New returns an error with code and message msg. With an empty msg it is a
// sentinel: errors.Is matches it to every *Error with its code.
func New(code, msg string) *Error { return &Error{Code: code, Msg: msg} }

// Errorf returns an error with code and the message format makes. As with
// fmt.Errorf, a %w verb makes its operand the cause.
func Errorf(code, format string, args ...any) *Error {
	w := fmt.Errorf(format, args...)
	e := &Error{Code: code, Msg: w.Error()}
	switch u := w.(type) {
	case interface{ Unwrap() error }:
		e.Err = u.Unwrap()
	case interface{ Unwrap() []error }:
		e.Err = w
	}
	return e
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Code
	}
	return e.Code + ": " + e.Msg
}

// ErrorCode returns the code.
func (e *Error) ErrorCode() string { return e.Code }

// ErrorMessage returns the message, without the code.
func (e *Error) ErrorMessage() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is a sentinel (an *Error without message or
// cause) with e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Code == e.Code
}

// CodeOf returns the code of the first Coder in err's chain, or "" when
// there is none.
func CodeOf(err error) string {
	var c Coder
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return ""
}

// MessageOf returns err's sentence without its code when err is itself a
// Coder, and err.Error() otherwise: a coded error wrapped with context
// ("reading x: not_found: ...") keeps its context, code included. It
// returns "" for a nil err.
func MessageOf(err error) string {
	if err == nil {
		return ""
	}
	if c, ok := err.(Coder); ok {
		return c.ErrorMessage()
	}
	return err.Error()
}
