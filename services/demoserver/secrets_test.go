package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpShowsNoEnvironment: --help shows the built-in defaults, never a
// value from the environment (issue 15).
func TestHelpShowsNoEnvironment(t *testing.T) {
	env := map[string]string{"MCPDRIFT_DEMO_STATE_FILE": "/env-marker/state.json"}
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, func(k string) string { return env[k] }, &stderr); !strings.Contains(stderr.String(), "Usage") {
		t.Fatalf("--help: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "marker") {
		t.Errorf("--help shows a value of the environment:\n%s", stderr.String())
	}
}
