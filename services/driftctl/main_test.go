package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixtures = "../internal/surface/testdata"

func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(stdin), &out, &errb)
	code = report(&errb, err)
	return out.String(), errb.String(), code
}

func TestFingerprint(t *testing.T) {
	benign := filepath.Join(fixtures, "xxh64-collision", "benign.json")
	out, _, code := runCLI(t, "", "fingerprint", benign)
	if code != 0 || !strings.HasPrefix(out, "sha256:") || len(strings.TrimSpace(out)) != len("sha256:")+64 {
		t.Fatalf("fingerprint: code %d, out %q", code, out)
	}
	raw, err := os.ReadFile(benign)
	if err != nil {
		t.Fatal(err)
	}
	fromStdin, _, _ := runCLI(t, string(raw), "fingerprint", "-")
	if fromStdin != out {
		t.Fatalf("stdin gives %q, file gives %q", fromStdin, out)
	}
	js, _, code := runCLI(t, "", "fingerprint", "--json", benign)
	var parsed struct {
		Hash  string
		Items []struct{ Kind, Name, Hash string }
	}
	if err := json.Unmarshal([]byte(js), &parsed); err != nil || code != 0 {
		t.Fatalf("--json: code %d, %v\n%s", code, err, js)
	}
	if parsed.Hash != strings.TrimSpace(out) || len(parsed.Items) != 50 || parsed.Items[0].Kind != "tool" {
		t.Fatalf("--json: hash %s, %d items", parsed.Hash, len(parsed.Items))
	}
	noAnn, _, _ := runCLI(t, "", "fingerprint", "--no-annotations", benign)
	if noAnn == out {
		t.Fatal("--no-annotations did not change the hash of a manifest with annotations")
	}
}

func TestDiffExitCodes(t *testing.T) {
	benign := filepath.Join(fixtures, "xxh64-collision", "benign.json")
	poisoned := filepath.Join(fixtures, "xxh64-collision", "poisoned.json")
	tests := []struct {
		name     string
		args     []string
		stdin    string
		code     int
		stdout   string // substring
		stderr   string // substring
		severity string
	}{
		{"same", []string{"diff", benign, benign}, "", 0, `"drift": false`, "", "none"},
		{"drift", []string{"diff", benign, poisoned}, "", 1, `"marker_secret_path"`, "", "critical"},
		{"new_from_stdin", []string{"diff", benign, "-"}, `{"tools":[]}`, 1, `"tool_removed"`, "", "low"},
		{"hostile_input", []string{"diff", benign, "-"}, `{"tools":[{"name":"a","name":"b"}]}`, 2, "", "driftctl: duplicate_key:", ""},
		{"missing_file", []string{"diff", benign, "/nonexistent.json"}, "", 2, "", "driftctl: input_unreadable:", ""},
		{"one_arg", []string{"diff", benign}, "", 2, "", "driftctl: usage:", ""},
		{"both_stdin", []string{"diff", "-", "-"}, "", 2, "", "driftctl: usage:", ""},
		{"bad_flag", []string{"diff", "--frob", benign, benign}, "", 2, "", "flag provided but not defined", ""},
		{"help", []string{"diff", "--help"}, "", 0, "", "Usage: driftctl diff", ""},
		{"unknown_command", []string{"frobnicate"}, "", 2, "", "driftctl: usage: unknown command", ""},
		{"no_command", nil, "", 2, "", "Usage:", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, tt.stdin, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("code %d (want %d)\nstdout: %.400s\nstderr: %s", code, tt.code, out, errOut)
			}
			if tt.severity != "" {
				var rep struct{ Severity string }
				if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Severity != tt.severity {
					t.Fatalf("severity %q (%v), want %q", rep.Severity, err, tt.severity)
				}
			}
		})
	}
}
