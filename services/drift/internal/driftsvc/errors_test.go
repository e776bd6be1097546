package driftsvc

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// TestCodeReadsEveryErrorType: Code (and coded.CodeOf) reads the code of
// each kind of error the service returns, bare and wrapped; the sentinels
// still match with errors.Is; the message is the text without the code.
func TestCodeReadsEveryErrorType(t *testing.T) {
	_, approveErr := state.Approve(&state.Record{LiveHash: "sha256:11"}, "sha256:22", "alice", nil, time.Now())
	amb := ambiguous("acme", "s1", "approve", []state.Record{{Variant: "a", Status: state.Changed, LiveHash: "sha256:aa"},
		{Variant: "b", Status: state.Verified, LiveError: "duplicate_item"}})
	for _, tc := range []struct {
		name     string
		err      error
		code     string
		sentinel error // errors.Is matches it; nil for none
	}{
		{"state_stale_hash", approveErr, "stale_hash", state.ErrStaleHash},
		{"not_found", coded.Errorf(state.ErrNotFound.Code, "no status for %s", "acme/s1"), "not_found", state.ErrNotFound},
		{"no_baseline", coded.Errorf(ErrNoBaseline.Code, "never approved"), "no_baseline", ErrNoBaseline},
		{"held_again", coded.Errorf(ErrHeldAgain.Code, "bob quarantined it again"), "held_again", ErrHeldAgain},
		{"ambiguous", amb, "variant_ambiguous", ErrVariantAmbiguous},
		{"invalid_id", bus.ValidID("tenant", "a.b"), "invalid_id", bus.ErrInvalidID},
		{"key_not_found", fmt.Errorf("reading acme.s1: %w", jetstream.ErrKeyNotFound), "not_found", nil},
		{"internal", errors.New("nats: timeout"), "internal", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{tc.err, fmt.Errorf("approving: %w", tc.err), fmt.Errorf("b: %w", fmt.Errorf("a: %w", tc.err))} {
				if got := Code(err); got != tc.code {
					t.Errorf("Code(%q) = %q, want %q", err, got, tc.code)
				}
				if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
					t.Errorf("errors.Is(%q, %v) = false", err, tc.sentinel)
				}
			}
			if tc.sentinel == nil {
				return
			}
			if got := coded.CodeOf(tc.err); got != tc.code {
				t.Errorf("coded.CodeOf = %q, want %q", got, tc.code)
			}
			if want := tc.code + ": " + coded.MessageOf(tc.err); tc.err.Error() != want {
				t.Errorf("Error() = %q, want the code and the message %q", tc.err.Error(), want)
			}
		})
	}
	var ae *AmbiguousError
	if !errors.As(fmt.Errorf("x: %w", amb), &ae) || len(ae.CandidateVariants()) != 2 {
		t.Errorf("the candidates of %v are lost", amb)
	}
	if want := "variant_ambiguous: acme/s1 has 2 listing variants that approve could mean; name one as the variant: " +
		"a (changed, live sha256:aa); b (verified, live error duplicate_item)"; amb.Error() != want {
		t.Errorf("AmbiguousError = %q, want %q", amb.Error(), want)
	}
}
