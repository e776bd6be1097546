package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	bin := t.TempDir()
	for _, c := range commands {
		if err := os.WriteFile(filepath.Join(bin, c), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		args []string
		want []string // in the error; none: valid
	}{
		{"defaults", []string{"--bin-dir", bin}, nil},
		{"every_problem_at_once", []string{"--bin-dir", t.TempDir(), "--posture", "lax", "--nats-port", "0", "--port-base", "65530"},
			[]string{`posture "lax"`, "nats port 0", "port base 65530", "command fingerprint not found", "make build"}},
		{"subcommand_typo", []string{"--bin-dir", bin, "dmo"}, []string{"the only subcommand is demo"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, err := parseConfig(c.args, func(string) string { return "" }, &stderr)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.adminAddr() != "127.0.0.1:8470" || cfg.opsAddr(3) != "127.0.0.1:8474" || cfg.proxyAddr() != "127.0.0.1:8480" || cfg.demoAddr() != "127.0.0.1:8490" {
					t.Errorf("default ports: %s %s %s %s", cfg.adminAddr(), cfg.opsAddr(3), cfg.proxyAddr(), cfg.demoAddr())
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v, want %q in it", err, w)
				}
			}
		})
	}
}

// TestTokens: the first start makes a write and a read token, private to
// the user; later starts reuse them.
func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin-tokens")
	first, err := ensureTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: %v, mode %v", err, st.Mode())
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "admin:write:"+first) || !strings.Contains(string(b), "viewer:read:") || len(first) < 16 {
		t.Fatalf("tokens file %q, write token %q", b, first)
	}
	again, err := ensureTokens(path)
	if err != nil || again != first {
		t.Fatalf("second start: %q %v, want the same token", again, err)
	}
	if _, err := writeToken([]byte("viewer:read:0123456789abcdef\n")); err == nil {
		t.Error("a tokens file without a write token was accepted")
	}
}
