package admin

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name  string
		spec  string
		names string
		err   string
	}{
		{"two", "ops:read:aaaaaaaaaaaaaaaa, alice:write:bbbbbbbbbbbbbbbb", "ops alice", ""},
		{"newlines_and_comments", "# tokens\nops:read:aaaaaaaaaaaaaaaa\n\nalice:write:bbbbbbbbbbbbbbbb\n", "ops alice", ""},
		{"secret_with_colons", "ops:read:aaaa:bbbb:cccc:dddd", "ops", ""},
		{"short_secret", "ops:read:short", "", "16 characters"},
		{"unknown_role", "ops:admin:aaaaaaaaaaaaaaaa", "", `role "admin"`},
		{"missing_parts", "ops", "", "name:role:secret"},
		{"same_secret_twice", "a:read:aaaaaaaaaaaaaaaa,b:write:aaaaaaaaaaaaaaaa", "a", "twice"},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toks, err := ParseTokens(tt.spec)
			var names []string
			for _, tok := range toks {
				names = append(names, tok.Name)
			}
			if got := strings.Join(names, " "); got != tt.names {
				t.Errorf("names %q, want %q", got, tt.names)
			}
			if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("err %v, want %q", err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "aaaaaaaa") {
				t.Errorf("an error reveals a secret: %v", err)
			}
		})
	}
}

// TestDescribe: the code and sentence of an error, as the API answers and
// audits them, are read with coded.CodeOf and coded.MessageOf: the code an
// error carries through wrapping, Deps.Code for one that carries none.
func TestDescribe(t *testing.T) {
	_, stale := state.Approve(&state.Record{LiveHash: "sha256:11"}, "sha256:22", "alice", nil, time.Now())
	idErr := coded.Errorf(bus.CodeInvalidID, "%w", bus.ValidID("tenant", "a.b"))
	keyErr := fmt.Errorf("reading acme.s1: %w", jetstream.ErrKeyNotFound)
	notFound := func(err error) string {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return "not_found"
		}
		return "internal"
	}
	for _, tc := range []struct {
		name      string
		err       error
		code, msg string
		withCode  bool // Deps.Code set
	}{
		{"admin_error", coded.New("unauthenticated", "a valid bearer token is required"), "unauthenticated", "a valid bearer token is required", true},
		// The sentence keeps bus.ValidID's own text, code included, as
		// the API has always answered it.
		{"invalid_id", idErr, "invalid_id", `invalid_id: tenant "a.b" must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -`, true},
		{"state_error", stale, "stale_hash", "you approved sha256:22 but the live manifest is now sha256:11; review it and approve that hash", true},
		{"wrapped_state_error", fmt.Errorf("approving: %w", stale), "stale_hash", "approving: " + stale.Error(), true},
		{"uncoded_with_deps_code", keyErr, "not_found", keyErr.Error(), true},
		{"uncoded_without_deps_code", keyErr, "internal", keyErr.Error(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &handler{}
			if tc.withCode {
				h.d.Code = notFound
			}
			code, msg := h.describe(tc.err)
			if code != tc.code || msg != tc.msg {
				t.Errorf("describe = %q, %q; want %q, %q", code, msg, tc.code, tc.msg)
			}
		})
	}
}

// TestApproveItemsAnswers: a per-item approve's refusals answer as the
// other approve refusals do (a conflict with what is live, or a bad
// request), and its audit row keeps the hash as its first word.
func TestApproveItemsAnswers(t *testing.T) {
	for code, want := range map[string]int{
		state.ErrItemUnchanged.Code: 409, state.ErrItemUnknown.Code: 409, state.ErrItemInvalid.Code: 400, "no_baseline": 409, "stale_hash": 409,
	} {
		if got := httpStatus(code); got != want {
			t.Errorf("httpStatus(%s) = %d, want %d", code, got, want)
		}
	}
	got := AuditItems("sha256:ab", []string{"tool:a", "resource:ui://x,y", `prompt:say "hi"`})
	if want := `sha256:ab items=["tool:a","resource:ui://x,y","prompt:say \"hi\""]`; got != want {
		t.Fatalf("AuditItems = %s, want %s", got, want)
	}
}
