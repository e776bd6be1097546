package admin

import (
	"strings"
	"testing"
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
