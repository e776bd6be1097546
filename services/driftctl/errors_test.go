package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// TestErrorsCarryTheirCode: the API's error answers and driftctl's own
// errors carry their code for coded.CodeOf, through wrapping, and print as
// "driftctl: <code>: <sentence>".
func TestErrorsCarryTheirCode(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusConflict, Status: "409 Conflict"}
	for _, tc := range []struct {
		name, code, sentence string
		err                  error
	}{
		{"api_answer", "stale_hash", "you approved sha256:11 but the live manifest is now sha256:22",
			answerError(resp, []byte(`{"error":{"code":"stale_hash","message":"you approved sha256:11 but the live manifest is now sha256:22"}}`))},
		{"api_other_answer", "api_error", "409 Conflict: <html>", answerError(resp, []byte(`<html>`))},
		{"ambiguity_hint", "variant_ambiguous", "acme/s1 has 2 listing variants (give --variant)",
			ambiguityHint(answerError(resp, []byte(`{"error":{"code":"variant_ambiguous","message":"acme/s1 has 2 listing variants"}}`)))},
		{"own_error", "too_large", "in.json is over 67108864 bytes", coded.Errorf("too_large", "%s is over %d bytes", "in.json", maxInput)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{tc.err, fmt.Errorf("approving: %w", tc.err)} {
				if got := coded.CodeOf(err); got != tc.code {
					t.Errorf("CodeOf(%q) = %q, want %q", err, got, tc.code)
				}
			}
			if got := coded.MessageOf(tc.err); got != tc.sentence {
				t.Errorf("MessageOf = %q, want %q", got, tc.sentence)
			}
			var out bytes.Buffer
			if st := report(&out, tc.err); st != 2 {
				t.Errorf("exit status %d, want 2", st)
			}
			if want := "driftctl: " + tc.code + ": " + tc.sentence + "\n"; out.String() != want {
				t.Errorf("reported %q, want %q", out.String(), want)
			}
		})
	}
	var ae *apiError
	if err := fmt.Errorf("x: %w", answerError(resp, []byte(`{"error":{"code":"not_found","message":"m"}}`))); !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("the API's status is lost: %v", err)
	}
}
