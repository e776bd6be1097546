package streamhttp

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
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

// A call whose arguments a sanitize rule redacted is forwarded with its
// Mcp-Param-* headers made again from the new arguments: a redacted string
// mirrored as the redaction, a redacted parent's bound children without a
// header, the rest (Mcp-Method, Mcp-Name, unbound headers) as they came.
func TestSanitizedCallHeaders(t *testing.T) {
	var b paramBook
	sql := `{"name":"sql","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},` +
		`"token":{"type":"string","x-mcp-header":"Token"},` +
		`"target":{"type":"object","properties":{"zone":{"type":"string","x-mcp-header":"Zone"}}}}}}`
	b.note([]string{"sql"}, []byte(`{"tools":[`+sql+`]}`))
	in := http.Header{}
	in.Set("Mcp-Method", "tools/call")
	in.Set("Mcp-Name", "sql")
	in.Set("Mcp-Param-Region", "eu")
	in.Set("Mcp-Param-Token", "hunter2")
	in.Set("Mcp-Param-Zone", "z1")
	in.Set("Mcp-Param-Other", "kept")
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sql","arguments":{"region":"eu","token":"hunter2","target":{"zone":"z1"}}}}`)
	msgs, _, err := jsonrpc.Split(body, jsonrpc.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	forward := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sql","arguments":{"region":"eu","token":"[redacted by mcpdrift policy]","target":"[redacted by mcpdrift policy]"}}}`)
	h := outHeaders(in, body, forward, msgs, false, &b)
	for k, want := range map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "sql", "Mcp-Param-Region": "eu",
		"Mcp-Param-Token": "[redacted by mcpdrift policy]", "Mcp-Param-Zone": "", "Mcp-Param-Other": "kept"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	// The body as forwarded passes the proxy's own check of the headers.
	fm, _, err := jsonrpc.Split(forward, jsonrpc.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if text := headerMismatch(h, fm, false); text != "" {
		t.Errorf("the forwarded headers disagree with the forwarded body: %s", text)
	}
	// Unchanged bodies keep every header.
	if h := outHeaders(in, body, body, msgs, false, &b); h.Get("Mcp-Param-Token") != "hunter2" {
		t.Errorf("an unchanged call lost its headers: %v", h)
	}
}
