package streamhttp

import (
	"encoding/json"
	"testing"
)

// The x-mcp-header bindings of each listed tool, from the last page that
// listed it (nested properties included, other places not).
func TestParamBook(t *testing.T) {
	var b paramBook
	read := `{"name":"read","inputSchema":{"type":"object"}}`
	sql := `{"name":"sql","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},` +
		`"target":{"type":"object","properties":{"zone":{"type":"string","x-mcp-header":"Zone"}}},` +
		`"list":{"type":"array","items":{"type":"object","properties":{"x":{"type":"string","x-mcp-header":"X"}}}}}}}`
	if got := b.bindings("sql"); got != nil {
		t.Fatalf("a tool never listed has bindings %v", got)
	}
	b.note([]string{"read", "sql"}, []byte(`{"tools":[`+read+`,`+sql+`]}`))
	got, _ := json.Marshal(b.bindings("sql"))
	if want := `[{"Path":["region"],"Header":"Region"},{"Path":["target","zone"],"Header":"Zone"}]`; string(got) != want {
		t.Fatalf("bindings %s, want %s", got, want)
	}
	if got := b.bindings("read"); len(got) != 0 {
		t.Fatalf("read: %v", got)
	}
	// A later page without the annotation replaces it.
	b.note([]string{"sql"}, []byte(`{"tools":[{"name":"sql","inputSchema":{"type":"object"}}]}`))
	if got := b.bindings("sql"); len(got) != 0 {
		t.Fatalf("after the annotation went: %v", got)
	}
}
