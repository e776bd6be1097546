package lockfile

import (
	"testing"

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
	roundTrip(t, capture, surface.KindPromptMessages, "hello")
}
