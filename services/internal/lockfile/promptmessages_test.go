package lockfile

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// TestRoundTripPromptMessages: a surface with the got messages of an
// argument-less prompt (form v2), beside UI contents, goes through a
// lockfile and comes back the same surface.
func TestRoundTripPromptMessages(t *testing.T) {
	const uri = "ui://notes/view.html"
	capture := `{"tools":{"pages":[{"tools":[{"name":"view","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"` + uri + `"}}}]}]},` +
		`"prompts":{"pages":[{"prompts":[{"name":"hello"},{"name":"greet","arguments":[{"name":"who"}]}]}]},` +
		`"resources":{"pages":[{"resources":[{"uri":"` + uri + `","name":"view","mimeType":"text/html;profile=mcp-app"}]}]},` +
		`"uiContents":{"` + uri + `":{"contents":[{"uri":"` + uri + `","mimeType":"text/html;profile=mcp-app","text":"<p>a & b</p>"}]}},` +
		`"promptMessages":{"hello":{"description":"Hi <there>","messages":[{"role":"user","content":{"type":"text","text":"Say hello & smile."}}]}}}`
	path := filepath.Join(t.TempDir(), "prompts.json")
	if err := os.WriteFile(path, []byte(capture), 0o600); err != nil {
		t.Fatal(err)
	}
	f, sf := lockOf(t, path, status.DefaultHashing)
	if _, ok := sf.Find(surface.KindPromptMessages, "hello"); !ok {
		t.Fatal("no prompt messages in the surface")
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
