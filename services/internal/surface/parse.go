package surface

import (
	"strconv"
	"unicode/utf8"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Parse reads a surface from raw bytes in any of the accepted shapes:
//
//   - a list result: a tools/list, prompts/list, resources/list or
//     resources/templates/list result object, or the JSON-RPC response
//     carrying one (one page: it must not have a nextCursor);
//   - an initialize or server/discover result (or its response), for the
//     instructions alone;
//   - a capture: {"initialize": R, "tools": {"pages": [R, ...]},
//     "prompts": {...}, "resources": {...}, "resourceTemplates": {...},
//     "uiContents": {"ui://...": R, ...}, "promptMessages": {"name": R, ...}},
//     every key but "tools" optional,
//     each R a result object exactly as
//     a client read it (never a response: a result carrying a "jsonrpc"
//     member is refused, CodeAmbiguousEnvelope).
func Parse(raw []byte, opt Options) (*Surface, error) {
	return NewBuilder(opt).Parse(raw)
}

// Parse is the package's Parse with b's options, reusing b's buffers: a
// service that parses many surfaces keeps a Builder per worker. It resets b.
func (b *Builder) Parse(raw []byte) (*Surface, error) {
	b.Reset()
	if err := b.take(0); err != nil {
		return nil, err // an unknown form
	}
	d := &b.doc
	if err := d.Parse(raw, b.opt.jsonLimits()); err != nil {
		return nil, jsonFail(err)
	}
	root := canonjson.Root
	if d.Kind(root) != canonjson.Object {
		return nil, fail(CodeUnknownFormat, "the input is a JSON %s; want a list result, a JSON-RPC response or a capture", d.Kind(root))
	}
	b.reserve(len(raw))
	if isCapture(d, root) {
		if err := b.addCapture(root); err != nil {
			return nil, err
		}
		return b.Surface()
	}
	r, perr := unwrapResponse(d, root)
	if perr != nil {
		return nil, perr
	}
	if d.Kind(r) == canonjson.Object {
		for k := KindTool; k <= KindResourceTemplate; k++ {
			if v, ok := d.Get(r, k.ListKey()); ok && d.Kind(v) == canonjson.Array {
				if _, err := b.addPage(k, root, true); err != nil {
					return nil, err
				}
				return b.Surface()
			}
		}
		for _, key := range []string{"instructions", "protocolVersion", "serverInfo", "capabilities"} {
			if _, ok := d.Get(r, key); ok {
				if err := b.addInitialize(root, true); err != nil {
					return nil, err
				}
				return b.Surface()
			}
		}
	}
	return nil, fail(CodeUnknownFormat, "the input is neither a list result, an initialize result, a JSON-RPC response carrying one, nor a capture")
}

// isCapture tells a capture from a result: a capture has an initialize member,
// or a listing member whose value is an object ({"pages": [...]}) rather than
// an array of items.
func isCapture(d *canonjson.Doc, root canonjson.NodeID) bool {
	if _, ok := d.Get(root, "jsonrpc"); ok {
		return false
	}
	if _, ok := d.Get(root, "initialize"); ok {
		return true
	}
	for k := KindTool; k <= KindResourceTemplate; k++ {
		if v, ok := d.Get(root, k.ListKey()); ok && d.Kind(v) == canonjson.Object {
			return true
		}
	}
	return false
}

func (b *Builder) addCapture(root canonjson.NodeID) error {
	d := &b.doc
	for i := range d.Len(root) {
		k, v := d.Member(root, i)
		key := string(d.Decoded(k))
		if key == "initialize" {
			if err := b.addInitialize(v, false); err != nil {
				return err
			}
			continue
		}
		if key == KindUIContent.ListKey() {
			if err := b.addNamedResults(v, KindUIContent, `{"<uri>": <read result>, ...}`, (*Builder).addReadResult); err != nil {
				return err
			}
			continue
		}
		if key == KindPromptMessages.ListKey() {
			if err := b.addNamedResults(v, KindPromptMessages, `{"<name>": <prompts/get result>, ...}`, (*Builder).addGetResult); err != nil {
				return err
			}
			continue
		}
		kind := Kind(0)
		for c := KindTool; c <= KindResourceTemplate; c++ {
			if c.ListKey() == key {
				kind = c
			}
		}
		if kind == 0 {
			return fail(CodeInvalidCapture, "unknown capture member %s; want initialize, tools, prompts, resources, resourceTemplates, uiContents or promptMessages", quote(key))
		}
		pages, ok := canonjson.NodeID(0), false
		if d.Kind(v) == canonjson.Object {
			pages, ok = d.Get(v, "pages")
		}
		if !ok || d.Kind(pages) != canonjson.Array || d.Len(pages) == 0 {
			return &Error{Code: CodeInvalidCapture, Kind: kind, Msg: "want {\"pages\": [<list result>, ...]} with at least one page"}
		}
		for p, j := d.First(pages), 0; j < d.Len(pages); p, j = d.Next(p), j+1 {
			cursor, err := b.addPage(kind, p, false)
			if err != nil {
				return err
			}
			if cursor == "" && j < d.Len(pages)-1 {
				return &Error{Code: CodeInvalidCapture, Kind: kind, Page: j + 1, Msg: "a page without a nextCursor is followed by more pages"}
			}
		}
	}
	if !b.kinds[KindTool].listed {
		return fail(CodeMissingTools, "the capture has no tools listing")
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// quote quotes s for a message, clipped so that hostile input cannot flood logs.
func quote(s string) string { return strconv.Quote(clipText(s)) }

func clipText(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// addNamedResults adds a capture member of results by name (uiContents:
// each ui:// resource's uri to the resources/read result the server
// returned for it; promptMessages: each argument-less prompt's name to its
// prompts/get result), each written by add as an item of kind (form v2; a
// v1 surface carries none, and the member is ignored).
func (b *Builder) addNamedResults(v canonjson.NodeID, kind Kind, want string, add func(b *Builder, name string, n canonjson.NodeID) *Error) error {
	d := b.d
	if d.Kind(v) != canonjson.Object {
		return &Error{Code: CodeInvalidCapture, Kind: kind, Msg: "want " + want}
	}
	if b.opt.Form < FormV2 {
		return nil
	}
	for i := range d.Len(v) {
		k, r := d.Member(v, i)
		if err := add(b, d.Text(k), r); err != nil {
			err.Kind, err.Item = kind, d.Text(k)
			return err
		}
	}
	return nil
}
