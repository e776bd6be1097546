package streamhttp

import (
	"fmt"
	"net/http"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// nameParam is the params member that Mcp-Name mirrors, per method.
var nameParam = map[string]string{
	"tools/call":            "name",
	"prompts/get":           "name",
	"resources/read":        "uri",
	"resources/subscribe":   "uri",
	"resources/unsubscribe": "uri",
}

// headerMismatch checks the 2026-07-28 routing headers against the body: a
// server or gateway that routes by Mcp-Method or Mcp-Name must see the same
// method and name the proxy judged, or a call the proxy approved could run
// another tool. Absent headers are fine (older clients send none); a header
// that disagrees with the body is refused with code header_mismatch.
func headerMismatch(h http.Header, m *jsonrpc.Message) (string, string) {
	if vs, ok := h["Mcp-Method"]; ok && (len(vs) != 1 || vs[0] != m.Method) {
		return "header_mismatch", fmt.Sprintf("the Mcp-Method header %q does not match the body's method %q", vs, m.Method)
	}
	vs, ok := h["Mcp-Name"]
	if !ok {
		return "", ""
	}
	key := nameParam[m.Method]
	name := ""
	if key != "" && len(m.Params) > 0 {
		d := new(canonjson.Doc)
		if d.Parse(m.Params, canonjson.Limits{LaxNumbers: true}) == nil && d.Kind(canonjson.Root) == canonjson.Object {
			if n, ok := d.Get(canonjson.Root, key); ok && d.Kind(n) == canonjson.String {
				name = d.Text(n)
			}
		}
	}
	if key == "" || len(vs) != 1 || vs[0] != name {
		return "header_mismatch", fmt.Sprintf("the Mcp-Name header %q does not match the body's %s %q", vs, key, name)
	}
	return "", ""
}
