package admin

import (
	"strings"
	"testing"
)

// TestParseTokensNamesApart: a token's name is the actor of every action
// it does in the audit trail, so two tokens of one name (a read and a
// write one, two people) and a token named as the unauthenticated caller
// is ("anonymous") are refused: their actions could not be told apart.
func TestParseTokensNamesApart(t *testing.T) {
	for _, spec := range []string{
		"alice:read:aaaaaaaaaaaaaaaa,alice:write:bbbbbbbbbbbbbbbb",
		"alice:write:aaaaaaaaaaaaaaaa\nalice:write:bbbbbbbbbbbbbbbb",
		"anonymous:write:aaaaaaaaaaaaaaaa",
	} {
		toks, err := ParseTokens(spec)
		if err == nil {
			t.Errorf("ParseTokens(%q) = %+v, want an error", spec, toks)
			continue
		}
		if strings.Contains(err.Error(), "bbbbbbbb") || strings.Contains(err.Error(), "aaaaaaaa") {
			t.Errorf("the error reveals a secret: %v", err)
		}
	}
	if toks, err := ParseTokens("alice:write:aaaaaaaaaaaaaaaa,alice-2026-11:write:bbbbbbbbbbbbbbbb"); err != nil || len(toks) != 2 {
		t.Errorf("a rotated token under a new name: %+v %v", toks, err)
	}
}
