package coded_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Each error type of the shared packages implements coded.Coder.
var (
	_ coded.Coder = (*coded.Error)(nil)
	_ coded.Coder = (*canonjson.Error)(nil)
	_ coded.Coder = (*surface.Error)(nil)
)

// TestCodeOfReadsEveryErrorType: CodeOf reads the code of each shared error
// type, bare and through wrapping; MessageOf is the sentence without the
// code, and the error's text is the code, ": " and that sentence.
func TestCodeOfReadsEveryErrorType(t *testing.T) {
	_, canonErr := canonjson.Canonicalize([]byte(`{"a":1,"a":2}`))
	_, surfErr := surface.Parse([]byte(`{"tools":[{"name":"x"},{"name":"x"}]}`), surface.Options{})
	for _, tc := range []struct {
		name      string
		err       error
		code      string
		wantSplit bool // Error() is code + ": " + MessageOf
	}{
		{"coded_error", coded.New("not_found", "no such server"), "not_found", true},
		{"coded_errorf", coded.Errorf("stale_hash", "you approved %s", "sha256:00"), "stale_hash", true},
		{"coded_sentinel", coded.New("held_again", ""), "held_again", false},
		{"canonjson", canonErr, string(canonjson.CodeDuplicateKey), false},
		{"surface", surfErr, string(surface.CodeDuplicateItem), true},
		{"bus_valid_id", bus.ValidID("tenant", "a b"), bus.CodeInvalidID, true},
		{"bus_poison", bus.Poisonf(bus.CodeUnknownSubject, "subject x"), bus.CodeUnknownSubject, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error to test")
			}
			for _, err := range []error{
				tc.err,
				fmt.Errorf("reading: %w", tc.err),
				fmt.Errorf("two: %w", fmt.Errorf("one: %w", tc.err)),
				errors.Join(errors.New("other"), tc.err),
			} {
				if got := coded.CodeOf(err); got != tc.code {
					t.Errorf("CodeOf(%q) = %q, want %q", err, got, tc.code)
				}
			}
			msg := coded.MessageOf(tc.err)
			if tc.wantSplit && tc.err.Error() != tc.code+": "+msg {
				t.Errorf("Error() = %q, MessageOf = %q: want the code, \": \" and the message", tc.err.Error(), msg)
			}
			if got := coded.MessageOf(fmt.Errorf("reading: %w", tc.err)); got != "reading: "+tc.err.Error() {
				t.Errorf("MessageOf of a wrapped error = %q, want its whole text", got)
			}
		})
	}
}

func TestCodeOfUncoded(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), fmt.Errorf("wrapped: %w", errors.New("plain"))} {
		if got := coded.CodeOf(err); got != "" {
			t.Errorf("CodeOf(%v) = %q, want none", err, got)
		}
	}
	if got := coded.MessageOf(nil); got != "" {
		t.Errorf("MessageOf(nil) = %q", got)
	}
	if got := coded.MessageOf(errors.New("plain")); got != "plain" {
		t.Errorf("MessageOf(plain) = %q", got)
	}
}

// TestSentinels: a sentinel (no message) matches every error of its code
// with errors.Is, and nothing else.
func TestSentinels(t *testing.T) {
	errNotFound := coded.New("not_found", "")
	for _, tc := range []struct {
		name string
		err  error
		is   bool
	}{
		{"itself", errNotFound, true},
		{"same_code", coded.Errorf("not_found", "no status for %s", "acme/s1"), true},
		{"same_code_wrapped", fmt.Errorf("reading: %w", coded.New("not_found", "gone")), true},
		{"other_code", coded.New("stale_hash", "moved"), false},
		{"plain_error_with_the_code_as_text", errors.New("not_found"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, errNotFound); got != tc.is {
				t.Errorf("errors.Is(%q, sentinel) = %v, want %v", tc.err, got, tc.is)
			}
		})
	}
	// An error with a message is no sentinel: it matches only itself.
	e := coded.New("not_found", "one")
	if errors.Is(coded.New("not_found", "two"), e) {
		t.Error("an error with a message matched another of its code")
	}
}

func TestErrorfWrapsItsCause(t *testing.T) {
	cause := errors.New("connection refused")
	err := coded.Errorf("internal", "reading %s: %w", "k", cause)
	if !errors.Is(err, cause) {
		t.Errorf("%v does not wrap its cause", err)
	}
	if err.Error() != "internal: reading k: connection refused" || coded.MessageOf(err) != "reading k: connection refused" {
		t.Errorf("Error %q, MessageOf %q", err.Error(), coded.MessageOf(err))
	}
	two := coded.Errorf("internal", "%w and %w", cause, errNil{})
	if !errors.Is(two, cause) || !errors.As(two, new(errNil)) {
		t.Errorf("%v does not wrap both its causes", two)
	}
	if coded.Errorf("x", "no cause").Unwrap() != nil {
		t.Error("an error without %w has a cause")
	}
}

type errNil struct{}

func (errNil) Error() string { return "second" }
