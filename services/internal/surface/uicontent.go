package surface

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// UIScheme is the scheme of the resources MCP Apps hosts render (SEP-1865):
// the read contents of a listed resource whose uri starts with it are an
// item of the surface in form v2 (KindUIContent).
const UIScheme = "ui://"

// IsUIResource reports whether uri names an MCP Apps UI resource: its
// scheme is ui, in any case (RFC 3986 schemes are case-insensitive, and a
// host may read "UI://" as "ui://").
func IsUIResource(uri string) bool {
	return len(uri) >= len(UIScheme) && strings.EqualFold(uri[:len(UIScheme)], UIScheme)
}

// contentFields are the members of one content of a resources/read result
// that a UI content item covers, with the JSON kind each must have: what
// a host renders (text or blob, as its mime type says) and how it
// sandboxes it (_meta.ui: csp, permissions, domain, prefersBorder). _meta
// is covered but for its volatile keys (VolatileMetaKeys), as everywhere in
// form v2.
var contentFields = map[string]canonjson.Kind{
	"uri": canonjson.String, "mimeType": canonjson.String, "text": canonjson.String,
	"blob": canonjson.String, "_meta": canonjson.Object,
}

var contentNames = []string{"uri", "mimeType", "text", "blob", "_meta"}

// AddReadResult adds the contents of the ui:// resource uri, as a
// resources/read result the server returned for it (the result object
// exactly as a client reads it, never unwrapped, as AddPage), as the item
// KindUIContent named uri: its contents array, each content's uri,
// mimeType, text or blob and _meta (its volatile keys left out). In form
// v1 it adds nothing. A result that is not an object with a contents array
// of objects, or that reads two ways, fails as a page does.
func (b *Builder) AddReadResult(uri string, raw []byte) error {
	return b.namedResult(KindUIContent, uri, raw, nil, 0, (*Builder).addReadResult)
}

// AddReadResultIn is AddReadResult for a result the caller has parsed
// already, as the value n of d (see AddPageIn).
func (b *Builder) AddReadResultIn(uri string, d *canonjson.Doc, n canonjson.NodeID) error {
	if b.lim.MaxDepth < canonjson.DefaultLimits.MaxDepth-1 || !b.readsInPlace(d) {
		return b.namedResult(KindUIContent, uri, d.Raw(n), nil, 0, (*Builder).addReadResult)
	}
	return b.namedResult(KindUIContent, uri, d.Raw(n), d, n, (*Builder).addReadResult)
}

// namedResult adds the result raw (read as n of d, or parsed by b when d
// is nil) as the item of kind named name, written by add: the shell every
// result a proxy reads or gets on its own account shares (form v2 only,
// the byte budget, the strict parse, errors labelled with the item).
func (b *Builder) namedResult(kind Kind, name string, raw []byte, d *canonjson.Doc, n canonjson.NodeID,
	add func(b *Builder, name string, n canonjson.NodeID) *Error) error {
	if b.opt.Form < FormV2 {
		return b.take(0) // v1 surfaces never carry them
	}
	if err := b.take(len(raw)); err != nil {
		return err
	}
	d, n, err := b.readIn(raw, d, n)
	if err != nil {
		e := jsonFail(err)
		e.Kind, e.Item = kind, name
		b.err = e
		return e
	}
	b.d = d
	defer func() { b.d = &b.doc }()
	b.lastFrom = len(b.pending)
	if e := add(b, name, n); e != nil {
		e.Kind, e.Item = kind, name
		b.err = e
		return e
	}
	return nil
}

// addReadResult writes the canonical form of a read result:
// {"contents":[<content>, ...]}, each content with its covered members.
func (b *Builder) addReadResult(uri string, n canonjson.NodeID) *Error {
	d := b.d
	if uri == "" {
		return &Error{Code: CodeMissingName, Msg: "a UI content with no uri"}
	}
	r, perr := resultOf(d, n, false)
	if perr != nil {
		return perr
	}
	if d.Kind(r) != canonjson.Object {
		return &Error{Code: CodeUnknownFormat, Msg: "the read result is a " + d.Kind(r).String() + ", want an object"}
	}
	if err := foldedMembers(d, r, "contents"); err != nil {
		return err
	}
	arr, ok := d.Get(r, "contents")
	if !ok || d.Kind(arr) != canonjson.Array {
		return &Error{Code: CodeUnknownFormat, Msg: "the read result has no contents array"}
	}
	if b.kinds[KindUIContent].items >= b.lim.MaxItems {
		return &Error{Code: CodeTooManyItems, Msg: "more than the limit of " + itoa(b.lim.MaxItems) + " UI contents"}
	}
	off := len(b.arena)
	b.arena = append(b.arena, `{"contents":[`...)
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		if d.Kind(el) != canonjson.Object {
			return &Error{Code: CodeItemNotObject, Msg: "a content is a " + d.Kind(el).String() + ", want an object"}
		}
		if err := foldedMembers(d, el, contentNames...); err != nil {
			return err
		}
		if i > 0 {
			b.arena = append(b.arena, ',')
		}
		if err := b.appendCovered(el, contentFields, "a content's "); err != nil {
			return err
		}
	}
	b.arena = append(b.arena, "]}"...)
	b.kinds[KindUIContent].items++
	b.pending = append(b.pending, pending{kind: KindUIContent, name: uri, off: off, end: len(b.arena),
		start: int32(d.Offset(n)), stop: int32(d.Offset(n) + len(d.Raw(n))), hash: b.opt.Hash.Sum(b.arena[off:])})
	return nil
}

// appendCovered writes the object obj with the members fields covers,
// each checked to be of its kind and to read one way only (whose names the
// caller has checked with foldedMembers), in canonical order: a null
// member is absent, and a _meta member keeps its members but the volatile
// ones (absent when none is left). what begins a message about a member.
func (b *Builder) appendCovered(obj canonjson.NodeID, fields map[string]canonjson.Kind, what string) *Error {
	d := b.d
	b.arena = append(b.arena, '{')
	wrote := false
	for j := range d.Len(obj) {
		k, v := d.Member(obj, j)
		want, covered := fields[string(d.Decoded(k))]
		if !covered || d.Kind(v) == canonjson.Null {
			continue
		}
		if got := d.Kind(v); got != want {
			return &Error{Code: CodeInvalidField, Msg: what + d.Text(k) + " is a " + got.String() + ", want a " + want.String()}
		}
		if err := foldedDeep(d, v); err != nil {
			return err
		}
		mark := len(b.arena)
		if wrote {
			b.arena = append(b.arena, ',')
		}
		b.arena = d.Append(b.arena, k)
		b.arena = append(b.arena, ':')
		if d.StringIs(k, "_meta") {
			var kept bool
			if b.arena, kept = appendKept(b.arena, d, v, func(k, _ canonjson.NodeID) bool { return volatileMeta(d, k) }); !kept {
				b.arena = b.arena[:mark] // nothing but volatile members: as absent
				continue
			}
		} else {
			b.arena = d.Append(b.arena, v)
		}
		wrote = true
	}
	b.arena = append(b.arena, '}')
	return nil
}

// HashReadResult hashes the read result raw of the ui:// resource uri as
// the item KindUIContent with opt: what a proxy compares with the approved
// item before it passes the contents on. ok is false in form v1, which
// pins no contents.
func HashReadResult(opt Options, uri string, raw []byte) (h Digest, ok bool, err error) {
	if opt.Form < FormV2 {
		return Digest{}, false, nil
	}
	b := NewBuilder(opt)
	if err := b.AddReadResult(uri, raw); err != nil {
		return Digest{}, false, err
	}
	items := b.LastPage()
	if len(items) != 1 {
		return Digest{}, false, &Error{Code: CodeUnknownFormat, Kind: KindUIContent, Item: uri, Msg: "no UI content was read"}
	}
	return items[0].Hash, true, nil
}

// uiContentText drops what a host renders (text, blob) from a decoded UI
// content item, for the marker scan: the HTML and script of an app are
// code a browser runs, not text the model reads, and ordinary markup
// (long inline data, "system" in a class name) would raise markers on
// every app. A change of them is a drift of its own (ui_content_changed).
func uiContentText(v any) any {
	m := asMap(v)
	list, _ := m["contents"].([]any)
	out := make([]any, 0, len(list))
	for _, c := range list {
		cm := asMap(c)
		kept := map[string]any{}
		for k, x := range cm {
			if k != "text" && k != "blob" {
				kept[k] = x
			}
		}
		out = append(out, kept)
	}
	return map[string]any{"contents": out}
}

// UILinksOfTool returns the UI links of one tool definition given as its
// raw JSON object (as a server sent it: a span of a tools/list page), each
// once, sorted: what UILinks returns for the tool's item, without hashing
// it. A definition that does not decode links nothing (the listing that
// carries it fails on its own).
func UILinksOfTool(raw []byte) []string {
	if !bytes.Contains(raw, []byte("resourceUri")) && !bytes.Contains(raw, []byte(metaOpenAITemplate)) && !bytes.Contains(raw, []byte(`\u`)) {
		return nil // most tools link nothing: no decode
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []string
	for _, l := range uiLinksOf(v) {
		out = append(out, l.uri)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
