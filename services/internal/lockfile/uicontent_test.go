package lockfile

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// TestRoundTripUIContent: a surface with the read contents of a UI
// resource (form v2) goes through a lockfile and comes back the same
// surface: the definition of a UI content is a read result that hashes to
// itself, HTML and all (encoding/json writes <, > and & escaped).
func TestRoundTripUIContent(t *testing.T) {
	html := `<!DOCTYPE html><html><body><script>if(a<b&&c>d){document.body.textContent="\u2028 & done"}</script></body></html>`
	const uri = "ui://notes/view.html"
	capture := `{"tools":{"pages":[{"tools":[{"name":"view","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"` + uri + `"}}}]}]},` +
		`"resources":{"pages":[{"resources":[{"uri":"` + uri + `","name":"view","mimeType":"text/html;profile=mcp-app"}]}]},` +
		`"uiContents":{"` + uri + `":{"contents":[{"uri":"` + uri + `","mimeType":"text/html;profile=mcp-app","text":` + strconv.Quote(html) + `,"_meta":{"ui":{"csp":{"connectDomains":[]}}}}]}}}`
	roundTrip(t, capture, surface.KindUIContent, uri)
}

// roundTrip writes capture to a file, makes its lockfile, which must hold
// the item kind:name, and requires the lockfile to come back, signed,
// written and read again, as the same surface with verified item hashes.
func roundTrip(t *testing.T, capture string, kind surface.Kind, name string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "capture.json")
	if err := os.WriteFile(path, []byte(capture), 0o600); err != nil {
		t.Fatal(err)
	}
	f, sf := lockOf(t, path, status.DefaultHashing)
	if _, ok := sf.Find(kind, name); !ok {
		t.Fatalf("no %s %s in the surface", kind, name)
	}
	key := testKey(1)
	if err := f.Sign(key); err != nil {
		t.Fatal(err)
	}
	data, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := got.Verify([]ed25519.PublicKey{pub(key)}); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	again, err := got.Variants[0].Surface()
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash != sf.Hash {
		t.Fatalf("the definitions make %s, the capture %s", again.Hash, sf.Hash)
	}
	if _, err := got.Variants[0].ItemHashes().Verify(); err != nil {
		t.Fatalf("item hashes: %v", err)
	}
}
