package surface

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"os"
	"strings"
	"testing"
)

// TestSHA512: a surface hashed with SHA-512 has the same canonical bytes,
// items and names as with SHA-256, every hash tagged sha512 and equal to
// the SHA-512 of what SHA-256 hashed; the two never compare equal.
func TestSHA512(t *testing.T) {
	raw, err := os.ReadFile("testdata/real/everything/2025.11.25.json")
	if err != nil {
		t.Fatal(err)
	}
	s256, err := Parse(raw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s512, err := Parse(raw, Options{Hash: SHA512})
	if err != nil {
		t.Fatal(err)
	}
	if len(s256.Items) != len(s512.Items) {
		t.Fatalf("%d items with sha256, %d with sha512", len(s256.Items), len(s512.Items))
	}
	if got, want := s512.Hash.Sum(), sha512.Sum512(s512.SurfaceDocument()); !bytes.Equal(got, want[:]) || s512.Hash.Alg() != SHA512 {
		t.Fatalf("surface hash %s is not the sha512 of its document", s512.Hash)
	}
	if got, want := s256.Hash.Sum(), sha256.Sum256(s256.SurfaceDocument()); !bytes.Equal(got, want[:]) {
		t.Fatalf("surface hash %s is not the sha256 of its document", s256.Hash)
	}
	for i, it := range s512.Items {
		a := s256.Items[i]
		if it.Name != a.Name || !bytes.Equal(it.Canonical, a.Canonical) {
			t.Fatalf("item %d: %s %q vs %s %q, or canonical bytes differ", i, it.Kind, it.Name, a.Kind, a.Name)
		}
		want := sha512.Sum512(it.Canonical)
		if !bytes.Equal(it.Hash.Sum(), want[:]) || !strings.HasPrefix(it.Hash.String(), "sha512:") || len(it.Hash.String()) != 7+128 {
			t.Fatalf("item %s: hash %s", it.Name, it.Hash)
		}
		if it.Hash == a.Hash {
			t.Fatalf("item %s: a sha512 digest equals a sha256 one", it.Name)
		}
	}
	// The items' hashes make up the surface hash under their algorithm
	// only.
	listed := []Kind{KindTool, KindPrompt, KindResource, KindResourceTemplate}
	var kinds []Kind
	for _, k := range listed {
		if s512.Listed(k) {
			kinds = append(kinds, k)
		}
	}
	if got, err := HashItems(SHA512, s512.Items, kinds); err != nil || got != s512.Hash {
		t.Fatalf("HashItems(sha512) = %s, %v; want %s", got, err, s512.Hash)
	}
	if _, err := HashItems(SHA256, s512.Items, kinds); err == nil {
		t.Fatal("HashItems(sha256) of sha512 items: no error")
	}
	// Builder pages hash like Parse.
	b := NewBuilder(Options{Hash: SHA512})
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}`)); err != nil {
		t.Fatal(err)
	}
	page := b.LastPage()
	s, err := b.Surface()
	if err != nil || len(page) != 1 || page[0].Hash != s.Items[0].Hash || page[0].Hash.Alg() != SHA512 {
		t.Fatalf("builder: %v %+v", err, page)
	}
}

// TestSHA256Unchanged pins one SHA-256 surface hash: the default's bytes
// never move (fixtures and stored baselines hold them).
func TestSHA256Unchanged(t *testing.T) {
	s := mustParse(t, `{"tools":[]}`, Options{})
	want := sha256.Sum256([]byte(`{"surface":"mcpdrift/v1","tools":{}}`))
	if !bytes.Equal(s.Hash.Sum(), want[:]) || s.Hash.Alg() != SHA256 || !strings.HasPrefix(s.Hash.String(), "sha256:") || len(s.Hash.String()) != 7+64 {
		t.Fatalf("empty tools: %s", s.Hash)
	}
}

func TestAlgNamed(t *testing.T) {
	for name, want := range map[string]Alg{"": SHA256, "sha256": SHA256, "sha512": SHA512} {
		if got, ok := AlgNamed(name); !ok || got != want {
			t.Errorf("AlgNamed(%q) = %v, %v", name, got, ok)
		}
	}
	for _, bad := range []string{"SHA256", "md5", "sha-512", "xxh64"} {
		if _, ok := AlgNamed(bad); ok {
			t.Errorf("AlgNamed(%q) accepted", bad)
		}
	}
}

// FuzzParseDigest: whatever ParseDigest accepts prints back to exactly the
// input, and the tagged sums of both algorithms round-trip.
func FuzzParseDigest(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("0a", 32))
	f.Add("sha512:" + strings.Repeat("ff", 64))
	f.Add("sha512:" + strings.Repeat("ff", 32))
	f.Add("sha256:" + strings.Repeat("ff", 64))
	f.Add("sha384:" + strings.Repeat("ff", 48))
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDigest(s)
		if err != nil {
			return
		}
		if d.String() != s {
			t.Fatalf("ParseDigest(%q) prints as %q", s, d.String())
		}
		for _, a := range []Alg{SHA256, SHA512} {
			h := a.Sum([]byte(s))
			back, err := ParseDigest(h.String())
			if err != nil || back != h || back.Alg() != a {
				t.Fatalf("%s round trip of %s: %v", a, h, err)
			}
		}
	})
}
