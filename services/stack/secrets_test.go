package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpShowsNoEnvironment: --help shows the built-in defaults, never a
// value from the environment (issue 15: values there can hold secrets).
func TestHelpShowsNoEnvironment(t *testing.T) {
	env := map[string]string{"MCPDRIFT_STACK_DIR": "/env-marker/dir", "MCPDRIFT_CLICKHOUSE_ADDR": "env-marker:9000", "MCPDRIFT_AUDIT_DATABASE": "env_marker",
		"MCPDRIFT_NOTIFY_WEBHOOK": "https://hooks.example/env-marker"}
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr); !strings.Contains(stderr.String(), "Usage") {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, "marker") {
			t.Errorf("%v shows a value of the environment:\n%s", args, out)
		}
	}
}
