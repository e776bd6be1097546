package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// cliRig runs driftctl commands in-process against a real drift command.
type cliRig struct {
	t   *testing.T
	srv *natstest.Server
	env map[string]string
}

func startCLIRig(t *testing.T) *cliRig {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the drift command")
	}
	srv := natstest.Start(t)
	api := startDrift(t, srv.ClientURL())
	return &cliRig{t: t, srv: srv, env: map[string]string{"MCPDRIFT_API": api, "MCPDRIFT_TOKEN": writeTok}}
}

// cli runs driftctl with args and returns stdout, stderr and the exit
// status main would exit with (errors printed as main prints them).
func (r *cliRig) cli(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return r.env[k] }, strings.NewReader(""), &out, &errb)
	code := report(&errb, err)
	return out.String(), errb.String(), code
}

// wait bounds every poll: it only stops a hung test.
const wait = 15 * time.Second

// contains returns nil when out() holds want, and otherwise what it held.
func contains(what, want string, out func() string) error {
	if got := out(); !strings.Contains(got, want) {
		return fmt.Errorf("%s printed %q, want %q in it", what, got, want)
	}
	return nil
}

// waitVariant polls until the variant of server has status want.
func (r *cliRig) waitVariant(server, variant, want string) {
	r.t.Helper()
	poll.Eventually(r.t, wait, func() error {
		if got := r.variantStatus(server, variant); got != want {
			return fmt.Errorf("variant %s of %s is %q, want %q", variant, server, got, want)
		}
		return nil
	})
}

// variantStatus reads one variant's status with show --json.
func (r *cliRig) variantStatus(server, variant string) string {
	out, _, code := r.cli("show", "--variant", variant, "acme", server)
	if code != 0 {
		return ""
	}
	var sv struct {
		Variants []struct {
			Record struct{ Status string } `json:"record"`
		} `json:"variants"`
	}
	if json.Unmarshal([]byte(out), &sv) != nil || len(sv.Variants) != 1 {
		return ""
	}
	return sv.Variants[0].Record.Status
}

// TestServerCommands: the commands name a server; a variant only where
// the choice is ambiguous; an unknown server or variant is not_found and
// changes nothing; quarantine holds every variant, present and future.
func TestServerCommands(t *testing.T) {
	r := startCLIRig(t)
	fx := "../internal/surface/testdata/real/filesystem/"
	t0 := time.Now()
	a := publishVariant(t, r.srv, "fs", variantA, "o1", fx+"2026.1.14.json", t0)
	r.waitVariant("fs", variantA, "verified")
	b := publishVariant(t, r.srv, "fs", variantB, "o2", fx+"2026.8.31.json", t0.Add(time.Second))
	r.waitVariant("fs", variantB, "changed")
	// A second drifted variant makes diff ambiguous.
	publishVariant(t, r.srv, "fs", variantA, "o3", fx+"2026.8.31.json", t0.Add(2*time.Second))
	r.waitVariant("fs", variantA, "changed")

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substrings
		stderr string
	}{
		{"status_of_one_server", []string{"status", "acme", "fs"}, 0, variantA, ""},
		{"show_lists_variants", []string{"show", "acme", "fs"}, 0, `"variant": "` + variantB + `"`, ""},
		{"diff_ambiguous", []string{"diff", "--live", "acme", "fs"}, 2, "", "driftctl: variant_ambiguous: acme/fs has 2 listing variants"},
		{"diff_ambiguous_names_candidates", []string{"diff", "--live", "acme", "fs"}, 2, "", variantB + " (changed, live " + b + ")"},
		{"diff_with_variant", []string{"diff", "--live", "--variant", variantB, "acme", "fs"}, 0, `"variant": "` + variantB + `"`, ""},
		{"diff_variant_after_args", []string{"diff", "--live", "acme", "fs", "--variant", variantB}, 0, `"oldHash": "` + a + `"`, ""},
		{"variant_positional_is_usage", []string{"show", "acme", "fs", variantA}, 2, "", "give --variant " + variantA},
		{"unknown_variant", []string{"show", "--variant", "default", "acme", "fs"}, 2, "", "driftctl: not_found:"},
		{"unknown_server", []string{"show", "acme", "notes"}, 2, "", "driftctl: not_found:"},
		{"quarantine_unknown_server", []string{"quarantine", "acme", "notes"}, 2, "", "driftctl: not_found: server acme/notes has never been observed"},
		{"quarantine_default", []string{"quarantine", "default", "notes"}, 2, "", "driftctl: not_found:"},
		{"quarantine_takes_no_variant", []string{"quarantine", "--variant", variantA, "acme", "fs"}, 2, "", "takes no --variant"},
		{"approve_unknown_variant", []string{"approve", "--hash", b, "--variant", "default", "acme", "fs"}, 2, "", "driftctl: not_found:"},
		{"approve_stale", []string{"approve", "--hash", "sha256:" + strings.Repeat("0", 64), "acme", "fs"}, 2, "", "driftctl: stale_hash:"},
		{"history_of_every_variant", []string{"history", "acme", "fs"}, 0, `"variant": "` + variantA + `"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := r.cli(tt.args...)
			if code != tt.code || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("driftctl %s: exit %d (want %d)\nstdout: %.600s\nstderr: %s\nwant stdout %q, stderr %q",
					strings.Join(tt.args, " "), code, tt.code, out, errOut, tt.stdout, tt.stderr)
			}
		})
	}
	// The refused actions wrote nothing: no server or variant "notes" or "default".
	out, _, _ := r.cli("status")
	if strings.Contains(out, "notes") || strings.Contains(out, "default") {
		t.Fatalf("a refused action left a record:\n%s", out)
	}

	// approve --hash picks the variants live at that hash: both are.
	out, errOut, code := r.cli("approve", "--hash", b, "acme", "fs")
	if code != 0 || !strings.Contains(out, `"approved": [`) || strings.Count(out, `"status": "verified"`) != 2 {
		t.Fatalf("approve --hash: %d %s %s", code, out, errOut)
	}

	// Quarantine holds the server: both variants and one first seen later.
	if out, errOut, code := r.cli("quarantine", "--reason", "incident 12", "acme", "fs"); code != 0 || !strings.Contains(out, `"held": true`) {
		t.Fatalf("quarantine: %d %s %s", code, out, errOut)
	}
	publishVariant(t, r.srv, "fs", "vnew", "o4", fx+"2026.8.31.json", t0.Add(3*time.Second))
	r.waitVariant("fs", "vnew", "quarantined")
	out, _, _ = r.cli("status", "acme", "fs")
	if strings.Count(out, "quarantined (server held)") != 3 || strings.Contains(out, "true") {
		t.Fatalf("status of a held server:\n%s", out)
	}
	// A pre-emptive hold of a server never observed must be asked for.
	if out, errOut, code := r.cli("quarantine", "--preemptive", "acme", "notes"); code != 0 || !strings.Contains(out, `"held": true`) {
		t.Fatalf("quarantine --preemptive: %d %s %s", code, out, errOut)
	}
	if out, _, _ := r.cli("status"); !regexp.MustCompile(`acme\s+notes\s+-\s+held`).MatchString(out) {
		t.Fatalf("status with a pre-emptive hold:\n%s", out)
	}
}

// TestREADMECommands runs the driftctl command lines of the README's
// admin API block, as printed (the live hash filled in), against a real
// drift service: each must succeed.
func TestREADMECommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(driftctl status.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no sh block of driftctl admin commands starting with driftctl status")
	}
	var lines []string
	for _, l := range strings.Split(string(block[1]), "\n") {
		if cmd, _, _ := strings.Cut(l, "  #"); strings.HasPrefix(cmd, "driftctl ") {
			lines = append(lines, strings.TrimSpace(cmd))
		}
	}
	r := startCLIRig(t)
	fx := "../internal/surface/testdata/real/filesystem/"
	t0 := time.Now()
	publishVariant(t, r.srv, "fs", variantA, "o1", fx+"2026.1.14.json", t0)
	r.waitVariant("fs", variantA, "verified")
	live := publishVariant(t, r.srv, "fs", variantA, "o2", fx+"2026.8.31.json", t0.Add(time.Second))
	r.waitVariant("fs", variantA, "changed")
	ran := 0
	for _, line := range lines {
		args := shellWords(t, strings.TrimPrefix(line, "driftctl "))
		if args[0] == "tail" || args[0] == "bus-setup" {
			continue // a stream, and a command against NATS (TestBusSetup)
		}
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "sha256:<live>", live)
			if strings.HasPrefix(a, "docs/") { // a file of the repository, from its root
				args[i] = "../../" + a
			}
		}
		t.Run(strings.ReplaceAll(strings.Join(args[:1], "_"), "-", "_"), func(t *testing.T) {
			out, errOut, code := r.cli(args...)
			if code != 0 {
				t.Fatalf("README's %q: exit %d\n%s%s", line, code, out, errOut)
			}
		})
		ran++
	}
	if ran < 6 {
		t.Fatalf("ran %d of the README's commands (%q), want status, show, diff --live, history, approve and quarantine", ran, lines)
	}
}

// shellWords splits a command line as sh would for the simple quoting the
// README uses.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	quote, in := byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}
