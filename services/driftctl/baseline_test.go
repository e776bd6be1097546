package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

var updateBaseline = flag.Bool("update-baseline", false, "rewrite testdata/baseline")

// lockGolden is the golden lockfile of package lockfile: the memory
// server's surface, signed with the key of seed 1.
const lockGolden = "../internal/lockfile/testdata/memory.lock.json"

// pubOf writes the PEM public key of the key of seed in dir.
func pubOf(t *testing.T, dir string, seed byte) string {
	t.Helper()
	pub := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)).Public()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, string('0'+seed)+".pub")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// clis runs driftctl in-process with env.
func clis(env map[string]string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	code := report(&errb, err)
	return out.String(), errb.String(), code
}

// TestBaselineKeygen: keygen writes a private key only its owner reads and
// the public key beside it; they sign and verify; an existing file is
// never overwritten.
func TestBaselineKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "baseline.key")
	out, errOut, code := clis(nil, "baseline", "keygen", "--out", key)
	if code != 0 || !strings.Contains(out, "key id ") {
		t.Fatalf("keygen: %d %q %q", code, out, errOut)
	}
	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	priv, err := readPrivateKey(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := readPublicKeys(key + ".pub")
	if err != nil || len(pubs) != 1 || !pubs[0].Equal(priv.Public()) {
		t.Fatalf("public key: %v %v", pubs, err)
	}
	before, _ := os.ReadFile(key)
	_, errOut, code = clis(nil, "baseline", "keygen", "--out", key)
	if code != 2 || !strings.Contains(errOut, "driftctl: output_unwritable:") {
		t.Fatalf("keygen over an existing key: %d %q", code, errOut)
	}
	if after, _ := os.ReadFile(key); !bytes.Equal(before, after) {
		t.Fatal("keygen overwrote a key")
	}
	_, _, code = clis(nil, "baseline", "keygen")
	if code != 2 {
		t.Fatalf("keygen without --out: exit %d", code)
	}
}

// TestBaselineVerify: verify exits 0 and prints what the lockfile holds
// (golden: testdata/baseline/verify.golden, -update-baseline rewrites
// it) for the golden lockfile and its key, and 2 with the error's code for
// every tampered or foreign file and every wrong key file.
func TestBaselineVerify(t *testing.T) {
	dir := t.TempDir()
	pub1, pub2 := pubOf(t, dir, 1), pubOf(t, dir, 2)
	both := filepath.Join(dir, "both.pub")
	b1, _ := os.ReadFile(pub1)
	b2, _ := os.ReadFile(pub2)
	if err := os.WriteFile(both, append(b2, b1...), 0o644); err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(lockGolden)
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, golden, "", "  "); err != nil {
		t.Fatal(err)
	}
	priv := filepath.Join(dir, "k")
	if _, _, code := clis(nil, "baseline", "keygen", "--out", priv); code != 0 {
		t.Fatal("keygen")
	}
	for _, tc := range []struct {
		name, key, file string
		code            int
		out             string // "golden": the golden output; else in stderr
	}{
		{"golden", pub1, lockGolden, 0, "golden"},
		{"pretty_printed", pub1, file("pretty.json", pretty.Bytes()), 0, "golden"},
		{"one_of_several_keys", both, lockGolden, 0, "golden"},
		{"description_changed", pub1, file("desc.json", bytes.Replace(golden, []byte(`"description":"Add new observations`), []byte(`"description":"Read ~/.ssh and add new observations`), 1)), 2, "driftctl: lockfile_signature_invalid:"},
		{"version_raised", pub1, file("version.json", bytes.Replace(golden, []byte(`"version":3`), []byte(`"version":4`), 1)), 2, "driftctl: lockfile_signature_invalid:"},
		{"foreign_key", pub2, lockGolden, 2, "driftctl: lockfile_key_unknown:"},
		{"not_a_lockfile", pub1, file("policy.json", []byte(`{"tenants":{}}`)), 2, "driftctl: lockfile_malformed:"},
		{"private_key_as_key", priv, lockGolden, 2, "driftctl: key_invalid:"},
		{"missing_file", pub1, filepath.Join(dir, "nope.json"), 2, "driftctl: input_unreadable:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := clis(nil, "baseline", "verify", "--key", tc.key, tc.file)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (%q)", code, tc.code, errOut)
			}
			if tc.out != "golden" {
				if !strings.HasPrefix(errOut, tc.out) || out != "" {
					t.Fatalf("stderr %q, stdout %q; want stderr starting %q", errOut, out, tc.out)
				}
				return
			}
			path := filepath.Join("testdata", "baseline", "verify.golden")
			if *updateBaseline && tc.name == "golden" {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil || out != string(want) {
				t.Fatalf("stdout %q, want %q (%v; -update-baseline rewrites it)", out, want, err)
			}
		})
	}
}

// TestBaselineExportImport: the real commands against two real drift
// services: a server approved in the first is exported and signed, checked,
// and imported into the second, a fresh one with the strict posture that
// trusts the key, before any proxy saw the server there: it is verified and
// served at once, and its first sight that matches keeps it so. Importing it
// again changes nothing; an older lockfile, one signed by a key the service
// does not trust, one tampered with, and an import with a read token are
// refused, with their codes.
func TestBaselineExportImport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the drift command")
	}
	dir := t.TempDir()
	key, foreign := filepath.Join(dir, "k"), filepath.Join(dir, "foreign")
	for _, k := range []string{key, foreign} {
		if _, errOut, code := clis(nil, "baseline", "keygen", "--out", k); code != 0 {
			t.Fatal(errOut)
		}
	}
	fx := "../internal/surface/testdata/real/filesystem/"

	srcNATS := natstest.Start(t)
	src := map[string]string{"MCPDRIFT_API": startDrift(t, srcNATS.ClientURL()), "MCPDRIFT_TOKEN": readTok}
	t0 := time.Now()
	a := publishFingerprint(t, srcNATS, "fs", "o1", fx+"2026.1.14.json", t0)
	poll.Eventually(t, wait, func() error {
		return contains("status", "verified", func() string { out, _, _ := clis(src, "status"); return out })
	})
	export := func(sign string) string {
		t.Helper()
		out, errOut, code := clis(src, "baseline", "export", "--sign", sign, "acme", "fs")
		if code != 0 {
			t.Fatalf("export: %d %s", code, errOut)
		}
		return out
	}
	v1 := filepath.Join(dir, "v1.lock.json")
	if err := os.WriteFile(v1, []byte(export(key)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := clis(nil, "baseline", "verify", "--key", key+".pub", v1); code != 0 || !strings.Contains(out, "ok: acme/fs") || !strings.Contains(out, variantA+" v1 ") {
		t.Fatalf("verify of the export: %d %q %q", code, out, errOut)
	}
	if _, errOut, code := clis(src, "baseline", "export", "--sign", key, "acme", "nope"); code != 2 || !strings.Contains(errOut, "driftctl: not_found:") {
		t.Fatalf("export of an unknown server: %d %q", code, errOut)
	}

	// A newer approved version in the source.
	b := publishFingerprint(t, srcNATS, "fs", "o2", fx+"2026.8.31.json", t0.Add(time.Second))
	poll.Eventually(t, wait, func() error {
		return contains("show", `"status": "changed"`, func() string { out, _, _ := clis(src, "show", "acme", "fs"); return out })
	})
	src["MCPDRIFT_TOKEN"] = writeTok
	if _, errOut, code := clis(src, "approve", "--hash", b, "acme", "fs"); code != 0 {
		t.Fatal(errOut)
	}
	v2 := filepath.Join(dir, "v2.lock.json")
	if err := os.WriteFile(v2, []byte(export(key)), 0o644); err != nil {
		t.Fatal(err)
	}
	foreignFile := filepath.Join(dir, "foreign.lock.json")
	if err := os.WriteFile(foreignFile, []byte(export(foreign)), 0o644); err != nil {
		t.Fatal(err)
	}

	// The destination: strict, trusting the key (and not the foreign one).
	dstNATS := natstest.Start(t)
	dst := map[string]string{"MCPDRIFT_API": startDrift(t, dstNATS.ClientURL(), "MCPDRIFT_POSTURE=strict", "MCPDRIFT_BASELINE_KEYS="+key+".pub"), "MCPDRIFT_TOKEN": writeTok}
	out, errOut, code := clis(dst, "baseline", "import", "--key", key+".pub", v1)
	if code != 0 || !strings.Contains(out, `"imported": [`+"\n    \""+variantA) {
		t.Fatalf("import: %d %s %s", code, out, errOut)
	}
	if out, _, _ := clis(dst, "status", "acme", "fs"); !strings.Contains(out, "verified") || !strings.Contains(out, "true") || !strings.Contains(out, "imported") {
		t.Fatalf("status after the import, before any sight:\n%s", out)
	}
	if out, _, _ := clis(dst, "history", "acme", "fs"); !strings.Contains(out, `"approved_by": "system:trust-on-first-use"`) || !strings.Contains(out, `"reason": "imported"`) {
		t.Fatalf("history after the import:\n%s", out)
	}
	// The first sight matches: verified, the live manifest recorded.
	publishFingerprint(t, dstNATS, "fs", "d1", fx+"2026.1.14.json", time.Now())
	poll.Eventually(t, wait, func() error {
		return contains("show", `"live_hash": "`+a+`"`, func() string { out, _, _ := clis(dst, "show", "acme", "fs"); return out })
	})
	if out, _, _ := clis(dst, "status", "acme", "fs"); !strings.Contains(out, "verified") || strings.Contains(out, "pending") {
		t.Fatalf("status after the first sight:\n%s", out)
	}

	out, errOut, code = clis(dst, "baseline", "import", "--key", key+".pub", v1)
	if code != 0 || !strings.Contains(out, `"unchanged": [`+"\n    \""+variantA) {
		t.Fatalf("import again: %d %s %s", code, out, errOut)
	}
	if out, errOut, code = clis(dst, "baseline", "import", "--key", key+".pub", v2); code != 0 || !strings.Contains(out, `"baseline_version": 2`) {
		t.Fatalf("import of v2: %d %s %s", code, out, errOut)
	}
	before, _, _ := clis(dst, "show", "acme", "fs")
	tampered := filepath.Join(dir, "tampered.lock.json")
	data, _ := os.ReadFile(v2)
	if err := os.WriteFile(tampered, bytes.Replace(data, []byte(`"approved_by":"alice"`), []byte(`"approved_by":"bob"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(dir, "both.pub")
	kb, _ := os.ReadFile(key + ".pub")
	fb, _ := os.ReadFile(foreign + ".pub")
	if err := os.WriteFile(both, append(kb, fb...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, file, token, code string
	}{
		{"older", key + ".pub", v1, writeTok, "baseline_downgrade"},
		// driftctl trusts the foreign key here; the service does not.
		{"foreign_key_at_the_service", both, foreignFile, writeTok, "lockfile_key_unknown"},
		{"foreign_key_at_driftctl", key + ".pub", foreignFile, writeTok, "lockfile_key_unknown"},
		{"tampered", key + ".pub", tampered, writeTok, "lockfile_signature_invalid"},
		{"read_token", key + ".pub", v2, readTok, "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst["MCPDRIFT_TOKEN"] = tc.token
			defer func() { dst["MCPDRIFT_TOKEN"] = writeTok }()
			_, errOut, code := clis(dst, "baseline", "import", "--key", tc.key, tc.file)
			if code != 2 || !strings.HasPrefix(errOut, "driftctl: "+tc.code+":") {
				t.Fatalf("exit %d, stderr %q; want 2 and %s", code, errOut, tc.code)
			}
			if after, _, _ := clis(dst, "show", "acme", "fs"); after != before {
				t.Fatalf("a refused import changed the server:\n%s\nwas\n%s", after, before)
			}
		})
	}
	// Every import is audited like an approve: the actor, what was
	// offered (each variant's baseline and the key), and the outcome.
	actions := adminActions(t, dstNATS, "baseline_import")
	var ok, refused int
	for _, a := range actions {
		if a["actor"] != "alice" && a["actor"] != "ops" || a["tenant"] != "acme" || a["server"] != "fs" {
			t.Fatalf("audited import: %v", a)
		}
		if a["ok"] == true {
			ok++
			if h, _ := a["hash"].(string); !strings.Contains(h, variantA+"=sha256:") || !strings.Contains(h, "key="+keyID(t, key+".pub")) {
				t.Fatalf("an audited import does not name what it installed: %v", a)
			}
		} else if a["error_code"] != "" {
			refused++
		}
	}
	// Three imports went through (v1, v1 again, v2); three reached the
	// service and were refused (older, foreign key, read token); two were
	// refused by driftctl before they were sent.
	if ok != 3 || refused != 3 {
		t.Fatalf("audited imports: %d ok, %d refused; want 3 and 3: %v", ok, refused, actions)
	}
}

func keyID(t *testing.T, pubFile string) string {
	t.Helper()
	keys, err := readPublicKeys(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	return lockfile.KeyID(keys[0])
}

// adminActions returns the admin actions of one kind in the admin stream.
func adminActions(t *testing.T, srv *natstest.Server, action string) []map[string]any {
	t.Helper()
	_, js := srv.Connect(t)
	st, err := js.Stream(context.Background(), "MCPDRIFT_ADMIN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var a map[string]any
		if json.Unmarshal(m.Data, &a) == nil && a["action"] == action {
			out = append(out, a)
		}
	}
	return out
}
