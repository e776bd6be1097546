package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const lockAdminToken = "lock-write-token-0123456789"

// lockStack is NATS, the fingerprint and drift commands with an admin API
// (a write token), and how driftctl reaches it.
type lockStack struct {
	natsURL  string
	adminURL string
	driftctl string
}

func startLockStack(t *testing.T, driftEnv ...string) *lockStack {
	t.Helper()
	b := natstest.StartBus(t)
	admin := "127.0.0.1:" + freePort(t)
	env := []string{"MCPDRIFT_NATS_URL=" + b.Server.ClientURL(), "MCPDRIFT_LOG_LEVEL=info"}
	runService(t, "fingerprint", env...)
	runService(t, "drift", append(append(env, "MCPDRIFT_ADMIN_ADDR="+admin, "MCPDRIFT_ADMIN_TOKENS=ops:write:"+lockAdminToken), driftEnv...)...)
	return &lockStack{natsURL: b.Server.ClientURL(), adminURL: "http://" + admin, driftctl: buildDriftctl(t)}
}

// ctl runs driftctl against the stack's admin API; it returns stdout,
// stderr and the exit status.
func (s *lockStack) ctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.driftctl, args...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_API="+s.adminURL, "MCPDRIFT_TOKEN="+lockAdminToken)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("driftctl %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errOut.String(), code
}

// status returns the status of every variant of a server, from driftctl show.
func (s *lockStack) statuses(t *testing.T, tenant, server string) []string {
	t.Helper()
	out, _, code := s.ctl(t, "show", tenant, server)
	if code != 0 {
		return nil
	}
	var v struct {
		Variants []struct {
			Record struct{ Status string }
		}
	}
	if json.Unmarshal([]byte(out), &v) != nil {
		return nil
	}
	var st []string
	for _, x := range v.Variants {
		st = append(st, x.Record.Status)
	}
	return st
}

// TestBaselineLockServesAtFirstSight: baselines as code, through the real
// commands, NATS, the proxy and the TypeScript SDK agent.
//
// A first stack (discovery) trusts server-filesystem on first use; driftctl
// exports its approved baseline as a lockfile signed with a key made by
// driftctl baseline keygen, and verify accepts it. A second stack, fresh,
// runs the strict posture and trusts only that key: after driftctl baseline
// import, the agent's very first session through a proxy that never saw the
// server is served its tools and its calls, with no approval (no trust on
// first use, no click). A second lockfile, imported for a server id that
// fronts another server there, leaves that server pending, withheld from the
// agent, with the diff against the imported baseline. A lockfile tampered
// with is refused by verify and by import (exit 2, coded), and nothing
// changes: the agent is still served.
func TestBaselineLockServesAtFirstSight(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real MCP servers and clients from npm, and the service commands")
	}
	n := requirePeers(t)
	agent := tsClient{n}
	dir := t.TempDir()
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	roots := []string{"file://" + dir}
	fsServer := func() endpoint { return filesystem.start(t, n, dir) }
	everythingServer := func() endpoint { return everything.start(t, n, dir) }
	steps := []step{
		{Method: "tools/list"},
		{Method: "tools/call", Params: params(map[string]any{"name": "list_allowed_directories", "arguments": map[string]any{}})},
	}
	through := func(s *lockStack, serverID string, up endpoint) endpoint {
		return proxyRouteTo(s.natsURL, serverID, t.TempDir()).reach(t, up)
	}

	// The source: trust on first use of the server, under two ids.
	src := startLockStack(t)
	for _, id := range []string{"files", "notes"} {
		poll.Eventually(t, 60*time.Second, func() error {
			tr := agent.run(t, through(src, id, fsServer()), roots, steps[:1])
			if got := toolNames(tr.Steps[0]); !slices.Contains(got, "list_allowed_directories") {
				return fmt.Errorf("the source stack does not serve %s yet: listed %q", id, got)
			}
			return nil
		})
	}

	keys := t.TempDir()
	key, foreign := filepath.Join(keys, "ops"), filepath.Join(keys, "foreign")
	for _, k := range []string{key, foreign} {
		if _, errOut, code := src.ctl(t, "baseline", "keygen", "--out", k); code != 0 {
			t.Fatalf("keygen: %s", errOut)
		}
	}
	lock := func(server, sign string) string {
		t.Helper()
		out, errOut, code := src.ctl(t, "baseline", "export", "--sign", sign, "default", server)
		if code != 0 {
			t.Fatalf("export of %s: %d %s", server, code, errOut)
		}
		f := filepath.Join(t.TempDir(), server+".lock.json")
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	files, notes, foreignFiles := lock("files", key), lock("notes", key), lock("files", foreign)
	if out, errOut, code := src.ctl(t, "baseline", "verify", "--key", key+".pub", files); code != 0 || !strings.Contains(out, "ok: default/files") {
		t.Fatalf("verify of the export: %d %q %q", code, out, errOut)
	}
	data, err := os.ReadFile(files)
	if err != nil {
		t.Fatal(err)
	}
	// An approved definition changed after signing: a description the
	// agent would read.
	tampered := filepath.Join(t.TempDir(), "tampered.lock.json")
	if !bytes.Contains(data, []byte("Read the complete contents")) {
		t.Fatalf("the lockfile does not hold server-filesystem's read_text_file definition:\n%.600s", data)
	}
	if err := os.WriteFile(tampered, bytes.Replace(data, []byte("Read the complete contents"), []byte("Read and upload the contents"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := src.ctl(t, "baseline", "verify", "--key", key+".pub", tampered); code != 2 || !strings.HasPrefix(errOut, "driftctl: lockfile_signature_invalid:") {
		t.Fatalf("verify of a tampered lockfile: exit %d, %q; want 2, lockfile_signature_invalid", code, errOut)
	}

	// The destination: fresh, strict, trusting the ops key only.
	dst := startLockStack(t, "MCPDRIFT_POSTURE=strict", "MCPDRIFT_BASELINE_KEYS="+key+".pub")
	for _, f := range []string{files, notes} {
		if out, errOut, code := dst.ctl(t, "baseline", "import", "--key", key+".pub", f); code != 0 {
			t.Fatalf("import of %s: %d %s %s", f, code, out, errOut)
		}
	}
	// The first session of the first agent, through a proxy that never
	// saw the server: served at once, no retry.
	tr := agent.run(t, through(dst, "files", fsServer()), roots, steps)
	if got := toolNames(tr.Steps[0]); !slices.Contains(got, "read_text_file") || !slices.Contains(got, "list_allowed_directories") {
		t.Fatalf("the imported baseline is not served at first sight: listed %q (%+v)", got, tr.Steps[0].Error)
	}
	if r := tr.Steps[1]; r.Error != nil || !strings.Contains(string(r.Result), dir) || strings.Contains(string(r.Result), `"isError":true`) {
		t.Fatalf("a call at first sight was not served: %s %v", r.Result, r.Error)
	}
	poll.Eventually(t, wait, func() error {
		st := dst.statuses(t, "default", "files")
		return awaiting(len(st) > 0 && !slices.ContainsFunc(st, func(s string) bool { return s != "verified" }), "files verified after its first sight", fmt.Sprint(st))
	})

	// Another server behind the id "notes": it does not match the imported
	// baseline, so it is pending, withheld, with the diff against it.
	tr = agent.run(t, through(dst, "notes", everythingServer()), roots, steps[:1])
	if got := toolNames(tr.Steps[0]); len(got) != 0 {
		t.Fatalf("a server that does not match its imported baseline was served: %q", got)
	}
	poll.Eventually(t, wait, func() error {
		st := dst.statuses(t, "default", "notes")
		return awaiting(slices.Contains(st, "pending"), "notes pending", fmt.Sprint(st))
	})
	out, errOut, code := dst.ctl(t, "diff", "--live", "default", "notes")
	if code != 0 || !strings.Contains(out, "get-sum") || !strings.Contains(out, "read_text_file") {
		t.Fatalf("diff --live of notes against its imported baseline: %d %s %s", code, out, errOut)
	}

	// Refused imports change nothing.
	before, _, _ := dst.ctl(t, "show", "default", "files")
	for _, tc := range []struct{ name, file, code string }{
		{"tampered", tampered, "lockfile_signature_invalid"},
		{"foreign_key", foreignFiles, "lockfile_key_unknown"},
	} {
		if _, errOut, code := dst.ctl(t, "baseline", "import", "--key", key+".pub", tc.file); code != 2 || !strings.HasPrefix(errOut, "driftctl: "+tc.code+":") {
			t.Fatalf("%s import: exit %d, %q; want 2, %s", tc.name, code, errOut, tc.code)
		}
	}
	if after, _, _ := dst.ctl(t, "show", "default", "files"); after != before {
		t.Fatalf("a refused import changed the server:\n%s\nwas\n%s", after, before)
	}
	tr = agent.run(t, through(dst, "files", fsServer()), roots, steps[:1])
	if got := toolNames(tr.Steps[0]); !slices.Contains(got, "read_text_file") {
		t.Fatalf("after refused imports the server is no longer served: %q", got)
	}
}
