package streamhttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// The 2026-07-28 request metadata headers mirror parts of the body so that
// servers and gateways can route on them without reading it. A component
// that routes by header and one that runs the body must see the same
// request, or a call the proxy approved could run as another tool, another
// prompt, or with other arguments. The proxy therefore refuses a request
// whose headers disagree with its body (HTTP 400, HeaderMismatch -32020: the
// registry's shape of header_mismatch), as the
// transport requires of any server that reads the body.

// paramPrefix begins the name of a Mcp-Param-<Name> header. The first
// protocol version with request metadata headers is
// jsonrpc.ProtocolStateless.
const paramPrefix = "Mcp-Param-"

// nameParam is the params member that Mcp-Name mirrors, per method.
var nameParam = map[string]string{
	jsonrpc.MethodToolsCall:            "name",
	jsonrpc.MethodPromptsGet:           "name",
	jsonrpc.MethodResourcesRead:        "uri",
	jsonrpc.MethodResourcesSubscribe:   "uri",
	jsonrpc.MethodResourcesUnsubscribe: "uri",
}

// nameRequired are the methods whose 2026-07-28 requests must carry Mcp-Name.
var nameRequired = map[string]bool{jsonrpc.MethodToolsCall: true, jsonrpc.MethodPromptsGet: true, jsonrpc.MethodResourcesRead: true}

// headerMismatch checks Mcp-Method, Mcp-Name and MCP-Protocol-Version
// against the body and returns why they disagree, or "". Headers a request
// of an older protocol version leaves out are fine (older clients send
// none); a 2026-07-28 request must carry Mcp-Method, and Mcp-Name where the
// method has a name. A batch (2025-03-26, before these headers) must carry
// none of the headers that describe one message. Mcp-Param-* headers are
// checked by paramMismatch, which needs the tool's definition.
func headerMismatch(h http.Header, msgs []*jsonrpc.Message, batch bool) string {
	if batch {
		for k := range h {
			if describesOne(k) {
				return fmt.Sprintf("the %s header describes a single message, and the body is a batch", k)
			}
		}
		return ""
	}
	m := msgs[0]
	required := m.Kind == jsonrpc.KindRequest && h.Get("Mcp-Protocol-Version") >= jsonrpc.ProtocolStateless
	if vs, ok := h["Mcp-Method"]; ok {
		if len(vs) != 1 || vs[0] != m.Method {
			return fmt.Sprintf("the Mcp-Method header %q does not match the body's method %q", vs, m.Method)
		}
	} else if required {
		return fmt.Sprintf("a %s request without the Mcp-Method header", jsonrpc.ProtocolStateless)
	}
	// The params as the message's one parse has them (params that are not
	// an object read as an empty one).
	params := func() (*canonjson.Doc, canonjson.NodeID) {
		if d, p, ok := m.ParamsObject(); ok {
			return d, p
		}
		d := new(canonjson.Doc)
		_ = d.Parse([]byte("{}"), canonjson.Limits{})
		return d, canonjson.Root
	}
	if v := h.Get("Mcp-Protocol-Version"); v != "" && bytes.Contains(m.Params, []byte(jsonrpc.MetaProtocolVersion)) {
		d, p := params()
		if body, ok := metaString(d, p, jsonrpc.MetaProtocolVersion); ok && body != v {
			return fmt.Sprintf("the MCP-Protocol-Version header %q does not match the protocol version %q in the body's _meta", v, body)
		}
	}
	vs, ok := h["Mcp-Name"]
	if !ok {
		if required && nameRequired[m.Method] {
			return fmt.Sprintf("a %s %s request without the Mcp-Name header", jsonrpc.ProtocolStateless, m.Method)
		}
		return ""
	}
	key := nameParam[m.Method]
	d, p := params()
	name := ""
	if key != "" {
		if n, ok := d.Get(p, key); ok && d.Kind(n) == canonjson.String {
			name = d.Text(n)
		}
	}
	if key == "" || len(vs) != 1 {
		return fmt.Sprintf("the Mcp-Name header %q does not match the body's method %q", vs, m.Method)
	}
	if got, ok := decodeHeader(vs[0]); !ok || got != name {
		return fmt.Sprintf("the Mcp-Name header %q does not match the body's %s %q", vs[0], key, name)
	}
	return ""
}

// describesOne reports a header that describes a single message.
func describesOne(key string) bool {
	k := http.CanonicalHeaderKey(key)
	return k == "Mcp-Method" || k == "Mcp-Name" || strings.HasPrefix(k, paramPrefix)
}

// paramMismatch checks the Mcp-Param-* headers of a tools/call against its
// arguments, by the x-mcp-header annotations of the tool's definition as
// the session that judges sess's calls was listed it (book), and returns
// why they disagree, or "":
//
//   - an annotated argument that is present (not null) must have its
//     header, equal to it once decoded (strings as they are, integers by
//     value, booleans as true or false), on a 2026-07-28 request; a header
//     for an argument that is absent or null is refused on any request;
//   - a header with characters a header value must not have, or with
//     broken Base64, is refused;
//   - Mcp-Param-* headers no annotation names pass (an intermediary must
//     forward what it does not recognize);
//   - when the proxy has not seen the tool's definition, Mcp-Param-*
//     headers cannot be checked: if no tools listing is complete yet (the
//     proxy's own listing of a stateless server is under way) it waits for
//     one for at most wait, or until ctx ends; a tool still unknown then is refused, and the
//     client lists the tools and tries again, as the transport tells it to
//     do after a HeaderMismatch.
//
// Only that wait has a deadline: the common request, with no Mcp-Param-*
// header, costs no timer.
func paramMismatch(ctx context.Context, wait time.Duration, h http.Header, m *jsonrpc.Message, sess *session.Session, book *paramBook) string {
	if m.Kind != jsonrpc.KindRequest || m.Method != jsonrpc.MethodToolsCall {
		return ""
	}
	var sent []string
	for k := range h {
		if strings.HasPrefix(k, paramPrefix) {
			sent = append(sent, k)
		}
	}
	required := h.Get("Mcp-Protocol-Version") >= jsonrpc.ProtocolStateless
	if len(sent) == 0 && !required {
		return "" // the common case: nothing to check
	}
	d, p, ok := m.ParamsObject()
	if !ok {
		if len(sent) > 0 {
			return "Mcp-Param headers on a tools/call whose params are not an object"
		}
		return ""
	}
	tool := ""
	if n, ok := d.Get(p, "name"); ok && d.Kind(n) == canonjson.String {
		tool = d.Text(n)
	}
	known := sess.ToolListed(tool)
	if !known && len(sent) > 0 {
		ctx, cancel := context.WithTimeout(ctx, wait)
		if sess.WaitToolsListed(ctx) {
			known = sess.ToolListed(tool)
		}
		cancel()
	}
	if !known {
		if len(sent) > 0 {
			return fmt.Sprintf("the proxy has not seen the definition of tool %q, so its Mcp-Param headers cannot be checked; list the tools and try again", tool)
		}
		return ""
	}
	args, hasArgs := d.Get(p, "arguments")
	for _, b := range book.bindings(tool) { // after ToolListed: at least as new as the listing that made it known
		header := paramPrefix + b.Header
		vs := h.Values(header)
		var at canonjson.NodeID
		present := hasArgs
		if present {
			at, present = argument(d, args, b.Path)
		}
		if !present || d.Kind(at) == canonjson.Null {
			if len(vs) > 0 {
				return fmt.Sprintf("the %s header is set, and argument %q is absent or null", header, strings.Join(b.Path, "."))
			}
			continue
		}
		switch {
		case len(vs) == 0 && required:
			return fmt.Sprintf("argument %q is in the body, and its %s header is missing", strings.Join(b.Path, "."), header)
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return fmt.Sprintf("the %s header is given %d times", header, len(vs))
		case !headerSafe(vs[0]):
			return fmt.Sprintf("the %s header has characters a header value must not have", header)
		}
		got, ok := decodeHeader(vs[0])
		if !ok {
			return fmt.Sprintf("the %s header is not valid Base64", header)
		}
		if !sameValue(d, at, got) {
			return fmt.Sprintf("the %s header %q does not match argument %q of the body", header, vs[0], strings.Join(b.Path, "."))
		}
	}
	return ""
}

// argument returns the value at path in the arguments object.
func argument(d *canonjson.Doc, args canonjson.NodeID, path []string) (canonjson.NodeID, bool) {
	at := args
	for _, p := range path {
		if d.Kind(at) != canonjson.Object {
			return 0, false
		}
		v, ok := d.Get(at, p)
		if !ok {
			return 0, false
		}
		at = v
	}
	return at, true
}

// sameValue compares a decoded header value with a body value: a string as
// it is, an integer (within the range JavaScript holds exactly) by value,
// a boolean as "true" or "false"; any other body value never matches.
func sameValue(d *canonjson.Doc, n canonjson.NodeID, header string) bool {
	switch d.Kind(n) {
	case canonjson.String:
		return d.Text(n) == header
	case canonjson.True:
		return header == "true"
	case canonjson.False:
		return header == "false"
	case canonjson.Number:
		body, ok := safeInteger(string(d.Raw(n)))
		if !ok {
			return false
		}
		hv, ok := safeInteger(header)
		return ok && hv == body
	}
	return false
}

const maxSafeInteger = 1<<53 - 1

func safeInteger(s string) (int64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// decodeHeader decodes the Base64 sentinel form =?base64?...?= of Mcp-Name
// and Mcp-Param-* values; other values are taken as they are.
func decodeHeader(v string) (string, bool) {
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok {
		return v, true
	}
	inner, ok = strings.CutSuffix(inner, "?=")
	if !ok {
		return v, true
	}
	b, err := base64.StdEncoding.DecodeString(inner)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// headerSafe reports a value of visible ASCII, spaces and tabs only.
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

// metaString returns a string member of the params' _meta.
func metaString(d *canonjson.Doc, params canonjson.NodeID, key string) (string, bool) {
	meta, ok := d.Get(params, jsonrpc.MetaKey)
	if !ok || d.Kind(meta) != canonjson.Object {
		return "", false
	}
	v, ok := d.Get(meta, key)
	if !ok || d.Kind(v) != canonjson.String {
		return "", false
	}
	return d.Text(v), true
}
