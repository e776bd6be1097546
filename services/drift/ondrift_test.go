package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestOnDriftFlag: the drift service's default action on drift, from the
// flag or MCPDRIFT_ON_DRIFT, is one of the three; anything else stops it.
func TestOnDriftFlag(t *testing.T) {
	for _, tt := range []struct {
		value string
		ok    bool
	}{{"block", true}, {"alert", true}, {"withhold_changed", true}, {"withhold", false}, {"ignore", false}} {
		t.Run(tt.value, func(t *testing.T) {
			env := map[string]string{"MCPDRIFT_ADMIN_TOKENS": "ops:read:0123456789abcdef0123", "MCPDRIFT_ON_DRIFT": tt.value}
			var stderr bytes.Buffer
			cfg, err := parseConfig(nil, func(k string) string { return env[k] }, &stderr)
			if !tt.ok {
				if err == nil || !strings.Contains(err.Error(), "on-drift") || !strings.Contains(err.Error(), "withhold_changed") {
					t.Fatalf("parseConfig = %v, want an on-drift error naming the actions", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Drift.Policy.OnDrift != tt.value {
				t.Fatalf("on drift %q, want %q", cfg.Drift.Policy.OnDrift, tt.value)
			}
		})
	}
}
