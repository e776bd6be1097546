package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyCommands: apply, list and test against a real drift service;
// a bad file is refused whole, every error on a line with its code and
// rule id, and nothing is stored.
func TestPolicyCommands(t *testing.T) {
	r := startCLIRig(t)
	bad := writeFile(t, "bad.yaml", `rules:
  - id: ok-rule
    tenant: default
    action: allow
  - id: no-exfil
    tenant: default
    args:
      - {path: $.url, op: regexp, value: "^https://evil"}
      - {path: $.host, op: cidr_match, value: 10.0.0.0/33}
    action: deny
  - tenant: default
    action: maybe
`)
	out, errOut, code := r.cli("policy", "apply", bad)
	if code != 2 || out != "" {
		t.Fatalf("bad file: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, want := range []string{
		"driftctl: policy_invalid: the policy document was refused whole; nothing was applied\n",
		"\n  policy_bad_op: line 5: no-exfil: args[0].op: unknown op \"regexp\"",
		"\n  policy_bad_cidr: line 5: no-exfil: args[1].value: ",
		"\n  policy_missing_id: line 11: rules[2]: id: ",
		"\n  policy_bad_action: line 11: rules[2]: action: ",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if out, _, code := r.cli("policy", "list"); code != 0 || strings.Contains(out, "default") {
		t.Fatalf("a refused file stored something: %d\n%s", code, out)
	}

	good := "../internal/policy/testdata/issue14.yaml" // the file of issue 14, as written
	out, errOut, code = r.cli("policy", "apply", good)
	if code != 0 || !regexpMatch(`default\s+v1\s+1\s+applied\s+sha256:`, out) {
		t.Fatalf("apply: code %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := r.cli("policy", "apply", good); !regexpMatch(`default\s+v1\s+1\s+unchanged`, out) {
		t.Errorf("re-apply:\n%s", out)
	}
	out, errOut, code = r.cli("policy", "list", "--tenant", "default")
	if code != 0 || !regexpMatch(`default\s+v1\s+1\s+0\s+1\s+0\s+alice`, out) ||
		!regexpMatch(`no-secret-search\s+0\s+notes\s+search_\*\s+\*\s+-\s+\$\.query contains "secret"\s+deny\s+false\s+searching for secrets`, out) {
		t.Fatalf("list --tenant: code %d\n%s%s", code, out, errOut)
	}
	if out, _, code := r.cli("policy", "list", "--tenant", "acme"); code != 0 || out != "tenant acme has no policy\n" {
		t.Errorf("list of a tenant without policy: %d %q", code, out)
	}
	if out, _, code := r.cli("policy", "list", "--json"); code != 0 || !strings.Contains(out, `"id": "no-secret-search"`) {
		t.Errorf("list --json: %d\n%s", code, out)
	}

	tests := []struct {
		name string
		args []string
		code int
		out  []string
		err  string
	}{
		{"deny", []string{"--tenant", "default", "--server", "notes", "--tool", "search_notes", "--args", `{"query":"top secret"}`}, 0,
			[]string{"rule: no-secret-search\n", "action: deny\n", "reason: searching for secrets is not allowed\n", "shadow: -\n"}, ""},
		{"allow", []string{"--tenant", "default", "--server", "notes", "--tool", "search_notes", "--args", `{"query":"lunch"}`}, 0,
			[]string{"rule: (none matched)\n", "action: allow\n"}, ""},
		{"other_tool", []string{"--tenant", "default", "--server", "notes", "--tool", "read", "--args", `{"query":"secret"}`}, 0,
			[]string{"action: allow\n"}, ""},
		{"risk_block", []string{"--tenant", "default", "--server", "notes", "--tool", "read", "--risk", "block"}, 0,
			[]string{"action: deny\n", "code: policy_risk_block\n", "(from request)"}, ""},
		{"missing_flags", []string{"--tenant", "default"}, 2, nil, "driftctl: usage: policy test needs --tenant, --server and --tool"},
		{"bad_args", []string{"--tenant", "default", "--server", "s", "--tool", "t", "--args", "{nope"}, 2, nil, "driftctl: usage: --args is not JSON"},
		{"bad_tenant", []string{"--tenant", "a.b", "--server", "s", "--tool", "t"}, 2, nil, "driftctl: invalid_id: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := r.cli(append([]string{"policy", "test"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.err) {
				t.Fatalf("code %d, stderr %q; want %d, %q", code, errOut, tt.code, tt.err)
			}
			out = regexp.MustCompile(` +`).ReplaceAllString(out, " ")
			for _, w := range tt.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
		})
	}

	// Clearing needs the write role; the read role is refused.
	r.env["MCPDRIFT_TOKEN"] = readTok
	if _, errOut, code := r.cli("policy", "apply", "--clear", "default"); code != 2 || !strings.HasPrefix(errOut, "driftctl: forbidden: ") {
		t.Errorf("clear with the read role: %d %q", code, errOut)
	}
	r.env["MCPDRIFT_TOKEN"] = writeTok
	if out, errOut, code := r.cli("policy", "apply", "--clear", "default"); code != 0 || !regexpMatch(`default\s+v2\s+0\s+cleared`, out) {
		t.Errorf("clear: %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"policy"}, {"policy", "apply"}, {"policy", "nope"}, {"policy", "apply", "a", "b"}} {
		if _, _, code := r.cli(args...); code != 2 {
			t.Errorf("%v: code %d, want 2", args, code)
		}
	}
	if _, errOut, code := r.cli("policy", "--help"); code != 0 || !strings.Contains(errOut, "apply FILE|-") {
		t.Errorf("policy --help: %d %q", code, errOut)
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
