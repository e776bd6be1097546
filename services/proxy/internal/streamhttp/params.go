package streamhttp

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// paramBinding is one tool parameter that a 2026-07-28 client mirrors into
// an Mcp-Param-<Header> HTTP header: a property of the tool's input schema
// annotated with x-mcp-header, reached from the schema root through
// "properties" alone.
type paramBinding struct {
	Path   []string // property names, from the arguments object down
	Header string   // the header's name after "Mcp-Param-"
}

// paramBook keeps the x-mcp-header bindings of the tools a session that
// judges calls (a Streamable HTTP session, a monitor) was listed last, by
// tool: what paramMismatch checks a call's Mcp-Param-* headers against. It
// is fed every page of tools the session judges (session.Config.ToolsPage).
type paramBook struct {
	mu     lockorder.Mutex[lockorder.ParamBookMu]
	byTool map[string][]paramBinding
}

// note records the bindings of the tools of one page (names: every tool on
// it, whose earlier bindings it replaces). It is called with the session's
// lock held: it locks nothing else.
func (b *paramBook) note(names []string, page []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range names {
		delete(b.byTool, n)
	}
	if !bytes.Contains(page, []byte("x-mcp-header")) {
		return // the common case: nothing to read
	}
	d := new(canonjson.Doc)
	if d.Parse(page, canonjson.Limits{LaxNumbers: true}) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return
	}
	tools, ok := d.Get(canonjson.Root, "tools")
	if !ok || d.Kind(tools) != canonjson.Array || d.Len(tools) == 0 {
		return
	}
	for t, i := d.First(tools), 0; i < d.Len(tools); t, i = d.Next(t), i+1 {
		if d.Kind(t) != canonjson.Object {
			continue
		}
		n, ok := d.Get(t, "name")
		schema, ok2 := d.Get(t, "inputSchema")
		if !ok || !ok2 || d.Kind(n) != canonjson.String {
			continue
		}
		if bs := paramBindings(d, schema, nil, nil); len(bs) > 0 {
			if b.byTool == nil {
				b.byTool = map[string][]paramBinding{}
			}
			b.byTool[d.Text(n)] = bs
		}
	}
}

// bindings returns the bindings of tool as last listed (none when it has
// none, or was not listed: ask the session whether it was first).
func (b *paramBook) bindings(tool string) []paramBinding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byTool[tool]
}

// paramBindings collects the x-mcp-header annotations under schema's
// "properties", recursively.
func paramBindings(d *canonjson.Doc, schema canonjson.NodeID, path []string, out []paramBinding) []paramBinding {
	if d.Kind(schema) != canonjson.Object {
		return out
	}
	props, ok := d.Get(schema, "properties")
	if !ok || d.Kind(props) != canonjson.Object {
		return out
	}
	for i := range d.Len(props) {
		k, v := d.Member(props, i)
		if d.Kind(v) != canonjson.Object {
			continue
		}
		p := append(slices.Clip(path), d.Text(k))
		if h, ok := d.Get(v, "x-mcp-header"); ok && d.Kind(h) == canonjson.String {
			out = append(out, paramBinding{Path: p, Header: d.Text(h)})
		}
		out = paramBindings(d, v, p, out)
	}
	return out
}

// syncParams makes the Mcp-Param-* headers of a tools/call (msg, its
// bytes as forwarded) that its tool's x-mcp-header bindings name agree
// with its arguments again, after the proxy changed them (a sanitize
// rule): an argument present and not null gets its header (a string as it
// is, or in the Base64 sentinel form when a header cannot carry it; an
// integer or a boolean as written), one that is absent or null has none,
// and one whose value a header cannot mirror (an object, say: a redacted
// parent) loses its header. Headers no binding names stay as they came.
func syncParams(h http.Header, msg []byte, book *paramBook) {
	d := new(canonjson.Doc)
	if d.Parse(msg, canonjson.Limits{LaxNumbers: true}) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return
	}
	params, ok := d.Get(canonjson.Root, "params")
	if !ok || d.Kind(params) != canonjson.Object {
		return
	}
	n, ok := d.Get(params, "name")
	if !ok || d.Kind(n) != canonjson.String {
		return
	}
	args, hasArgs := d.Get(params, "arguments")
	for _, b := range book.bindings(d.Text(n)) {
		header := paramPrefix + b.Header
		had := len(h.Values(header)) > 0
		h.Del(header)
		var at canonjson.NodeID
		present := hasArgs
		if present {
			at, present = argument(d, args, b.Path)
		}
		if !present {
			continue
		}
		switch d.Kind(at) {
		case canonjson.String:
			h.Set(header, headerValue(d.Text(at)))
		case canonjson.True:
			h.Set(header, "true")
		case canonjson.False:
			h.Set(header, "false")
		case canonjson.Number:
			if had {
				h.Set(header, string(d.Raw(at)))
			}
		}
	}
}

// stringsTrim trims the spaces and tabs a header value loses on the wire.
func stringsTrim(v string) string {
	i, j := 0, len(v)
	for i < j && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	for j > i && (v[j-1] == ' ' || v[j-1] == '\t') {
		j--
	}
	return v[i:j]
}

// headerValue is v as a request metadata header carries it (Mcp-Name,
// Mcp-Param-*): as it is when it is visible ASCII without white space at
// its ends, else in the Base64 sentinel form =?base64?...?=.
func headerValue(v string) string {
	if !headerSafe(v) || v != stringsTrim(v) {
		return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
	}
	return v
}
