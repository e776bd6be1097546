package driftsvc

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/lockfile"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

func lockKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// exported exports server from svc as a signed lockfile, as driftctl
// baseline export writes it.
func exported(t *testing.T, svc *Service, server string, key ed25519.PrivateKey) []byte {
	t.Helper()
	f, err := svc.ExportBaseline(context.Background(), "acme", server, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sign(key); err != nil {
		t.Fatal(err)
	}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func importFile(svc *Service, data []byte) (*state.ImportResult, error) {
	f, err := lockfile.Read(data)
	if err != nil {
		return nil, err
	}
	return svc.ImportBaseline(context.Background(), f, "deploy")
}

// knows makes e's fingerprints of the capture at path carry its item
// hashes, as the fingerprint service's do, without storing the manifest.
func (e *env) knows(path string) string {
	e.t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{Form: surface.FormLatest})
	if err != nil {
		e.t.Fatal(err)
	}
	e.stored(sf)
	return sf.Hash.String()
}

// revision is the status bucket's revision of a variant's record (0: none).
func (e *env) revision(server string) uint64 {
	en, err := e.h.Status.Get(context.Background(), bus.StatusKey("acme", server, "v0"))
	if err != nil {
		return 0
	}
	return en.Revision()
}

// TestExportImport: a baseline approved in one deployment, exported and
// signed, is imported into a fresh one with the strict posture: the
// server is verified before it is seen, its first sight that matches stays
// verified (no pending, no click), and one that does not is pending with
// the diff against the imported baseline. The same lockfile again changes
// nothing; a tampered one, one signed by a key not trusted, and an older
// one are refused and change nothing.
func TestExportImport(t *testing.T) {
	key := lockKey(1)
	src := newEnv(t)
	a, b := src.manifest(fixA), src.manifest(fixB)
	from, _ := src.start(Config{})
	t0 := time.Now()
	src.publish("mem", "o1", a, "", t0, "")
	src.publish("other", "o2", a, "", t0, "")
	poll.Eventually(t, wait, src.hasRecord(from, "mem", "verified", func(r *state.Record) bool { return r.Status == state.Verified }))
	poll.Eventually(t, wait, src.hasRecord(from, "other", "verified", func(r *state.Record) bool { return r.Status == state.Verified }))
	v1 := exported(t, from, "mem", key)
	other := exported(t, from, "other", key)

	// A second approved version, later.
	src.publish("mem", "o3", b, "", t0.Add(time.Second), "")
	poll.Eventually(t, wait, src.hasRecord(from, "mem", "changed", func(r *state.Record) bool { return r.Status == state.Changed }))
	if _, _, err := from.Approve(context.Background(), "acme", "mem", "", b, "alice"); err != nil {
		t.Fatal(err)
	}
	v2 := exported(t, from, "mem", key)

	dst := newEnv(t)
	to, _ := dst.start(Config{Policy: state.Policy{Posture: state.Strict, OnDrift: state.Block},
		BaselineKeys: []ed25519.PublicKey{lockKey(9).Public().(ed25519.PublicKey), key.Public().(ed25519.PublicKey)}})

	res, err := importFile(to, v1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Imported) != 1 || res.Imported[0] != "v0" || res.KeyID != lockfile.KeyID(key.Public().(ed25519.PublicKey)) {
		t.Fatalf("import: %+v", res)
	}
	rec := dst.record(to, "mem")
	if rec == nil || rec.Status != state.Verified || !rec.Serve() || rec.BaselineHash != a || rec.BaselineVersion != 1 ||
		rec.ApprovedBy != state.ActorTOFU || rec.Reason != state.ReasonImported || rec.Actor != "deploy" || rec.LiveHash != "" {
		t.Fatalf("imported record: %+v", rec)
	}
	// The baseline version holds the item hashes proxies read, and the
	// approved manifest is stored under its hash.
	hist, err := to.History(context.Background(), "acme", "mem", "")
	if err != nil || len(hist) != 1 || len(hist[0].Baselines) != 1 || hist[0].Baselines[0].Items == nil || hist[0].Baselines[0].Reason != state.ReasonImported {
		t.Fatalf("history %+v, %v", hist, err)
	}
	if _, err := hist[0].Baselines[0].Items.Verify(); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.h.Manifests.GetInfo(context.Background(), bus.ManifestName(a)); err != nil {
		t.Fatalf("the approved manifest is not stored: %v", err)
	}

	// The first sight, strict: the live surface matches, stays verified.
	dst.knows(fixA)
	dst.publish("mem", "f1", a, "", time.Now(), "")
	poll.Eventually(t, wait, dst.hasRecord(to, "mem", "live a", func(r *state.Record) bool { return r.LiveHash == a }))
	if rec := dst.record(to, "mem"); rec.Status != state.Verified || !rec.Serve() {
		t.Fatalf("first sight of the imported baseline: %+v", rec)
	}

	// Another server, whose first sight does not match: pending, with the
	// diff against the imported baseline.
	if _, err := importFile(to, other); err != nil {
		t.Fatal(err)
	}
	dst.knows(fixB)
	dst.manifest(fixB)
	dst.publish("other", "f2", b, "", time.Now(), "")
	poll.Eventually(t, wait, dst.hasRecord(to, "other", "pending", func(r *state.Record) bool { return r.Status == state.Pending }))
	if rec := dst.record(to, "other"); rec.Serve() || rec.BaselineHash != a || rec.LiveHash != b || rec.Severity == "" {
		t.Fatalf("a first sight unlike its imported baseline: %+v", rec)
	}
	if _, rep, err := to.Diff(context.Background(), "acme", "other", ""); err != nil || rep == nil || len(rep.Changed)+len(rep.Added)+len(rep.Removed) == 0 {
		t.Fatalf("diff against the imported baseline: %+v, %v", rep, err)
	}

	// The same lockfile again: nothing changes.
	rev := dst.revision("mem")
	if res, err := importFile(to, v1); err != nil || len(res.Unchanged) != 1 || len(res.Imported) != 0 {
		t.Fatalf("import again: %+v, %v", res, err)
	}
	if got := dst.revision("mem"); got != rev {
		t.Fatalf("importing the same lockfile again wrote the record (revision %d, was %d)", got, rev)
	}

	// The newer version: baseline v2 here, a drift from the live a.
	if _, err := importFile(to, v2); err != nil {
		t.Fatal(err)
	}
	rec = dst.record(to, "mem")
	if rec.BaselineVersion != 2 || rec.BaselineHash != b || rec.ApprovedBy != "alice" || rec.Status != state.Changed || rec.Serve() {
		t.Fatalf("after importing v2: %+v", rec)
	}
	rev = dst.revision("mem")

	tampered := bytes.Replace(v1, []byte(`"approved_by":"system:trust-on-first-use"`), []byte(`"approved_by":"alice"`), 1)
	if bytes.Equal(tampered, v1) {
		t.Fatal("the tampering changed nothing")
	}
	otherKey := exported(t, from, "mem", lockKey(2))
	for _, tc := range []struct {
		name string
		data []byte
		code string
	}{
		{"older", v1, state.ErrDowngrade.Code},
		{"tampered", tampered, lockfile.CodeSignatureInvalid},
		{"foreign_key", otherKey, lockfile.CodeKeyUnknown},
		{"other_tenant", bytes.Replace(v2, []byte(`"tenant":"acme"`), []byte(`"tenant":"evil"`), 1), lockfile.CodeSignatureInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := importFile(to, tc.data)
			if coded.CodeOf(err) != tc.code {
				t.Fatalf("err %v, want %s", err, tc.code)
			}
			if got := dst.revision("mem"); got != rev {
				t.Fatalf("a refused import wrote the record (revision %d, was %d)", got, rev)
			}
		})
	}

	// A service that trusts no key refuses every import.
	none, _ := newEnv(t).start(Config{})
	if _, err := importFile(none, v1); coded.CodeOf(err) != lockfile.CodeKeyUnknown || !strings.Contains(err.Error(), "trusts no") {
		t.Fatalf("err %v, want %s", err, lockfile.CodeKeyUnknown)
	}
}

// TestImportHashingMismatch: a baseline hashed with other settings than
// the installed variant's is refused, and nothing changes.
func TestImportHashingMismatch(t *testing.T) {
	key := lockKey(1)
	e := newEnv(t)
	a := e.manifest(fixA)
	svc, _ := e.start(Config{BaselineKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}})
	e.publish("mem", "o1", a, "", time.Now(), "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "verified", func(r *state.Record) bool { return r.Status == state.Verified }))
	f, err := svc.ExportBaseline(context.Background(), "acme", "mem", "ci")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(fixA)
	h := status.Hashing{Hash: "sha512", Annotations: true}
	opt, _ := h.Options()
	sf, err := surface.Parse(raw, opt)
	if err != nil {
		t.Fatal(err)
	}
	b := f.Variants[0].Baseline
	v, err := lockfile.VariantOf("v0", h, status.Baseline{Version: 5, Hash: sf.Hash.String(), ApprovedAtMs: time.Now().Add(time.Hour).UnixMilli(), ApprovedBy: b.ApprovedBy, Reason: b.Reason}, sf)
	if err != nil {
		t.Fatal(err)
	}
	f.Variants[0] = v
	if err := f.Sign(key); err != nil {
		t.Fatal(err)
	}
	rev := e.revision("mem")
	if _, err := svc.ImportBaseline(context.Background(), f, "deploy"); coded.CodeOf(err) != state.ErrHashingMismatch.Code {
		t.Fatalf("err %v, want %s", err, state.ErrHashingMismatch.Code)
	}
	if got := e.revision("mem"); got != rev {
		t.Fatalf("a refused import wrote the record")
	}
}
