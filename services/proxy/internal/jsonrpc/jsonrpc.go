// Package jsonrpc reads JSON-RPC 2.0 messages as the MCP proxy sees them on
// the wire, without decoding them into structs and encoding them again: it
// finds what the proxy needs (kind, method, id, the result) as spans of the
// original bytes, and rewrites only what it must. A filtered list result
// keeps every byte of the original except the array it filters; a refusal
// echoes the request's id exactly as the client wrote it.
//
// Parsing is strict (package canonjson): a message with duplicate members,
// invalid UTF-8 or absurd nesting is refused rather than guessed at, since
// two readers that disagree about a message are how a proxy is bypassed.
package jsonrpc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Kind is what a message is.
type Kind uint8

// Message kinds.
const (
	KindRequest      Kind = iota + 1 // method and id
	KindNotification                 // method, no id
	KindResponse                     // result or error, and id
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	}
	return "invalid"
}

// ErrInvalid is wrapped by every error about a message that is not a valid
// JSON-RPC 2.0 message; canonjson's codes pass through for JSON problems.
var ErrInvalid = errors.New("invalid_message")

// ErrAmbiguous is wrapped by every error about a message that parses but
// reads two ways: envelope members that differ only in case ("result" and
// "Result"), which Go's encoding/json matches without regard to case.
var ErrAmbiguous = errors.New("ambiguous_message")

// envelope are the member names of a JSON-RPC message.
var envelope = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// Message is one JSON-RPC message, as spans of its raw bytes.
type Message struct {
	Raw    []byte
	Kind   Kind
	Method string // requests and notifications
	ID     []byte // requests and responses: the id exactly as written (a JSON string or number)
	// Result is the result member of a successful response; Error the
	// error member of a failed one; Params the params of a request.
	Result, Error, Params []byte
	// resultOff is where Result starts in Raw, paramsOff where Params does.
	resultOff, paramsOff int
	// off is where Raw starts in the source the message was split from.
	off int
	// doc is the parse the message came from when the caller kept it
	// (SplitIn); result and params are its nodes (0 when absent).
	doc            *canonjson.Doc
	result, params canonjson.NodeID
}

// Span is a byte range [Start, End) in the source a message was split from.
type Span struct{ Start, End int }

// Limits for messages; zero fields take canonjson's defaults.
type Limits = canonjson.Limits

// Parse reads one message (not a batch; see Split).
func Parse(raw []byte, lim Limits) (*Message, error) {
	var d canonjson.Doc
	lim.LaxNumbers = true // ids and params are passed on, never canonicalized
	if err := d.Parse(raw, lim); err != nil {
		return nil, err
	}
	m := new(Message)
	if err := m.read(&d, canonjson.Root); err != nil {
		return nil, err
	}
	return m, nil
}

// read fills m, zero, with the message at node n of d.
func (m *Message) read(d *canonjson.Doc, n canonjson.NodeID) error {
	if d.Kind(n) != canonjson.Object {
		return fmt.Errorf("%w: a JSON-RPC message is an object, not a %s", ErrInvalid, d.Kind(n))
	}
	m.Raw, m.off, m.doc = d.Raw(n), d.Offset(n), d
	if a, b, twin := d.FoldTwin(n); twin {
		return fmt.Errorf("%w: members %q and %q differ only in case", ErrAmbiguous, a, b)
	}
	for i := range d.Len(n) {
		k, _ := d.Member(n, i)
		if name, ok := d.FoldsToAny(k, envelope); ok {
			return fmt.Errorf("%w: member %q reads as %q to a case-insensitive reader", ErrAmbiguous, d.Text(k), name)
		}
	}
	v, ok := d.Get(n, "jsonrpc")
	if !ok || d.Kind(v) != canonjson.String || !d.StringIs(v, "2.0") {
		return fmt.Errorf("%w: jsonrpc must be \"2.0\"", ErrInvalid)
	}
	method, hasMethod := d.Get(n, "method")
	id, hasID := d.Get(n, "id")
	result, hasResult := d.Get(n, "result")
	rpcErr, hasError := d.Get(n, "error")
	if hasID {
		switch d.Kind(id) {
		case canonjson.String, canonjson.Number:
			m.ID = d.Raw(id)
		case canonjson.Null:
			if hasMethod {
				return fmt.Errorf("%w: a request id must not be null", ErrInvalid)
			}
			m.ID = d.Raw(id) // a response to a request whose id could not be read
		default:
			return fmt.Errorf("%w: id must be a string or a number", ErrInvalid)
		}
	}
	switch {
	case hasMethod:
		if d.Kind(method) != canonjson.String {
			return fmt.Errorf("%w: method must be a string", ErrInvalid)
		}
		if hasResult || hasError {
			return fmt.Errorf("%w: a message with a method has no result or error", ErrInvalid)
		}
		m.Method = d.Text(method)
		if p, ok := d.Get(n, "params"); ok {
			if k := d.Kind(p); k != canonjson.Object && k != canonjson.Array {
				return fmt.Errorf("%w: params must be an object or an array", ErrInvalid)
			}
			m.Params, m.params = d.Raw(p), p
			m.paramsOff = d.Offset(p) - d.Offset(n)
		}
		m.Kind = KindNotification
		if hasID {
			m.Kind = KindRequest
		}
	case hasResult == hasError:
		return fmt.Errorf("%w: a response has exactly one of result and error", ErrInvalid)
	case !hasID:
		return fmt.Errorf("%w: a response has an id", ErrInvalid)
	default:
		m.Kind = KindResponse
		if hasResult {
			m.Result, m.result = d.Raw(result), result
			m.resultOff = d.Offset(result) - d.Offset(n)
		} else {
			if d.Kind(rpcErr) != canonjson.Object {
				return fmt.Errorf("%w: error must be an object", ErrInvalid)
			}
			m.Error = d.Raw(rpcErr)
		}
	}
	return nil
}

// Split reads a message that may be a 2025-03-26 batch (a JSON array of
// messages) and returns its messages; batch reports whether it was one.
func Split(raw []byte, lim Limits) (msgs []*Message, batch bool, err error) {
	d := canonjson.Borrow()
	defer canonjson.Return(d) // a Message holds slices of raw, never of d
	msgs, batch, err = split(d, raw, lim)
	for _, m := range msgs {
		m.doc = nil
	}
	return msgs, batch, err
}

// SplitIn is Split into the caller's d, which the messages keep: whoever
// reads them further (the engine hashing a list result, a rewrite of the
// result or the params) reads this parse rather than parsing again. d
// belongs to the messages until the caller is done with all of them.
func SplitIn(d *canonjson.Doc, raw []byte, lim Limits) (msgs []*Message, batch bool, err error) {
	return split(d, raw, lim)
}

func split(d *canonjson.Doc, raw []byte, lim Limits) (msgs []*Message, batch bool, err error) {
	lim.LaxNumbers = true // ids and params are passed on, never canonicalized
	if err := d.Parse(raw, lim); err != nil {
		return nil, false, err
	}
	if d.Kind(canonjson.Root) != canonjson.Array {
		// The message and the slice that holds it in one allocation.
		one := new(struct {
			m Message
			s [1]*Message
		})
		if err := one.m.read(d, canonjson.Root); err != nil {
			return nil, false, err
		}
		one.s[0] = &one.m
		return one.s[:], false, nil
	}
	if d.Len(canonjson.Root) == 0 {
		return nil, true, fmt.Errorf("%w: an empty batch", ErrInvalid)
	}
	all := make([]Message, d.Len(canonjson.Root))
	msgs = make([]*Message, len(all))
	for el, i := d.First(canonjson.Root), 0; i < len(all); el, i = d.Next(el), i+1 {
		if err := all[i].read(d, el); err != nil {
			return nil, true, fmt.Errorf("batch element %d: %w", i+1, err)
		}
		msgs[i] = &all[i]
	}
	return msgs, true, nil
}

// Parsed returns the parse m was split in (SplitIn) and the node of its
// result, when it has both.
func (m *Message) Parsed() (d *canonjson.Doc, result canonjson.NodeID, ok bool) {
	if m.doc == nil || m.Result == nil {
		return nil, 0, false
	}
	return m.doc, m.result, true
}

// ParamsObject returns m's params as a parsed object: in the parse m was
// split in when it kept one (SplitIn), else in a parse of the params
// alone. ok is false when m has no params or they are not an object.
func (m *Message) ParamsObject() (d *canonjson.Doc, n canonjson.NodeID, ok bool) {
	return m.object(m.params, m.Params, m.paramsOff)
}

// ResultObject is ParamsObject for m's result.
func (m *Message) ResultObject() (d *canonjson.Doc, n canonjson.NodeID, ok bool) {
	return m.object(m.result, m.Result, m.resultOff)
}

func (m *Message) object(node canonjson.NodeID, raw []byte, rawOff int) (*canonjson.Doc, canonjson.NodeID, bool) {
	if raw == nil {
		return nil, 0, false
	}
	d, n, _, err := m.value(node, raw, rawOff)
	if err != nil || d.Kind(n) != canonjson.Object {
		return nil, 0, false
	}
	return d, n, true
}

// Forget drops the parse m keeps: its owner is giving it back to a pool.
func (m *Message) Forget() { m.doc = nil }

// Detach makes m independent of the buffer it was split from, which its
// reader may reuse: its bytes are copied once and the parse it keeps is
// pointed at the copy, never parsed again.
func (m *Message) Detach() {
	if m.doc == nil {
		src := bytes.Clone(m.Raw)
		m.reslice(src, 0)
		return
	}
	src := bytes.Clone(m.doc.Source())
	m.doc.Rebase(src)
	m.reslice(src, m.off)
}

func (m *Message) reslice(src []byte, off int) {
	n := len(m.Raw)
	m.Raw = src[off : off+n : off+n]
	if m.Result != nil {
		m.Result = m.Raw[m.resultOff : m.resultOff+len(m.Result)]
	}
	if m.Params != nil {
		m.Params = m.Raw[m.paramsOff : m.paramsOff+len(m.Params)]
	}
	if m.ID != nil {
		// The id is compared and echoed, never rewritten: a copy of its own.
		m.ID = bytes.Clone(m.ID)
	}
	if m.Error != nil {
		m.Error = bytes.Clone(m.Error)
	}
	if m.doc == nil {
		m.off = 0
	}
}

// Splice returns m's bytes with only some elements of one array kept: list
// is the array's span and elems its elements' spans, in the source m was
// split from, as the engine reports them for a list result it hashed
// (surface.Builder.AddPageIn); keep says which to keep. Every other byte of
// the message is as it came. It returns the message as it was (the same
// slice) when every element is kept.
func (m *Message) Splice(list Span, elems []Span, keep func(i int) bool) (out []byte, removed int, err error) {
	lo, hi := m.off, m.off+len(m.Raw)
	if list.Start < lo || list.End > hi || list.Start >= list.End {
		return nil, 0, fmt.Errorf("%w: the list span %v is not inside the message", ErrInvalid, list)
	}
	kept := make([]Span, 0, len(elems))
	for i, e := range elems {
		if e.Start <= list.Start || e.End >= list.End || e.Start >= e.End || (len(kept) > 0 && e.Start < kept[len(kept)-1].End) {
			return nil, 0, fmt.Errorf("%w: element span %v is not inside the list %v", ErrInvalid, e, list)
		}
		if keep(i) {
			kept = append(kept, e)
		} else {
			removed++
		}
	}
	if removed == 0 {
		return m.Raw, 0, nil
	}
	raw, base := m.Raw, m.off
	out = make([]byte, 0, len(raw))
	out = append(out, raw[:list.Start-base]...)
	out = append(out, '[')
	for i, e := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, raw[e.Start-base:e.End-base]...)
	}
	out = append(out, ']')
	return append(out, raw[list.End-base:]...), removed, nil
}

// ToolError returns a tools/call response that reports a refusal as an MCP
// tool error (isError: true) with a stable code, echoing the request's id
// exactly.
func ToolError(id []byte, code, text string) []byte {
	var b []byte
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":{"content":[{"type":"text","text":`...)
	b = canonjson.AppendString(b, text)
	b = append(b, `}],"isError":true,"`+MetaKey+`":{"`+MetaCode+`":`...)
	b = canonjson.AppendString(b, code)
	b = append(b, `}}}`...)
	return b
}

// ErrorResponse returns a JSON-RPC error response with the request's id.
func ErrorResponse(id []byte, code int, message string) []byte {
	return ErrorResponseData(id, code, message, "")
}

// ErrorResponseData is ErrorResponse with a stable mcpdrift code in the
// error's data ({"mcpdrift/code": ...}) when stable is not empty.
func ErrorResponseData(id []byte, code int, message, stable string) []byte {
	if len(id) == 0 {
		id = []byte("null")
	}
	var b []byte
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"error":{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":`...)
	b = canonjson.AppendString(b, message)
	if stable != "" {
		b = append(b, `,"data":{"`+MetaCode+`":`...)
		b = canonjson.AppendString(b, stable)
		b = append(b, '}')
	}
	b = append(b, `}}`...)
	return b
}

// RemoveResultMember rewrites a successful response without the member key
// of its result object, keeping every other byte; removed is false (and the
// message returned as it was) when the result has no such member.
func RemoveResultMember(m *Message, key string) (out []byte, removed bool, err error) {
	if m.Kind != KindResponse || m.Result == nil {
		return nil, false, fmt.Errorf("%w: not a successful response", ErrInvalid)
	}
	d, root, shift, err := m.value(m.result, m.Result, m.resultOff)
	if err != nil {
		return nil, false, err
	}
	if d.Kind(root) != canonjson.Object {
		return nil, false, fmt.Errorf("%w: the result is not an object", ErrInvalid)
	}
	var k, v canonjson.NodeID
	found := false
	for i := range d.Len(root) {
		if k, v = d.Member(root, i); d.StringIs(k, key) {
			found = true
			break
		}
	}
	if !found {
		return m.Raw, false, nil
	}
	res := m.Result
	start, end := d.Offset(k)+shift-m.resultOff, d.Offset(v)+len(d.Raw(v))+shift-m.resultOff
	// Take the comma after the member, or, for the last one, the one before.
	j := end
	for j < len(res) && isSpace(res[j]) {
		j++
	}
	if j < len(res) && res[j] == ',' {
		end = j + 1
	} else {
		i := start - 1
		for i >= 0 && isSpace(res[i]) {
			i--
		}
		if i >= 0 && res[i] == ',' {
			start = i
		}
	}
	var b bytes.Buffer
	b.Grow(len(m.Raw))
	b.Write(m.Raw[:m.resultOff+start])
	b.Write(m.Raw[m.resultOff+end:])
	return b.Bytes(), true, nil
}

// EditResult rewrites a successful response's result object member by
// member: a member named in edits is removed (a nil value) or given the
// value (valid JSON the caller made); every other member keeps its bytes,
// and so do the id and the rest of the response. Only the white space
// between the result's members may change. A name in edits the result does
// not have adds nothing.
func EditResult(m *Message, edits map[string][]byte) ([]byte, error) {
	if m.Kind != KindResponse || m.Result == nil {
		return nil, fmt.Errorf("%w: not a successful response", ErrInvalid)
	}
	d, root, shift, err := m.value(m.result, m.Result, m.resultOff)
	if err != nil {
		return nil, err
	}
	if d.Kind(root) != canonjson.Object {
		return nil, fmt.Errorf("%w: the result is not an object", ErrInvalid)
	}
	start := shift + d.Offset(root)
	end := start + len(d.Raw(root))
	b := make([]byte, 0, len(m.Raw))
	b = append(b, m.Raw[:start]...)
	b = append(b, '{')
	// The parse keeps members sorted by name; write them in the order the
	// server did.
	members := make([][2]canonjson.NodeID, d.Len(root))
	for i := range members {
		members[i][0], members[i][1] = d.Member(root, i)
	}
	slices.SortFunc(members, func(a, b [2]canonjson.NodeID) int { return d.Offset(a[0]) - d.Offset(b[0]) })
	first := true
	for _, kv := range members {
		k, v := kv[0], kv[1]
		value, edited := edits[string(d.Decoded(k))]
		if edited && value == nil {
			continue
		}
		if !edited {
			value = d.Raw(v)
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, d.Raw(k)...)
		b = append(b, ':')
		b = append(b, value...)
	}
	b = append(b, '}')
	return append(b, m.Raw[end:]...), nil
}

// ReplaceParamsMember returns m's bytes with the value of the member key
// of its params object replaced by value (which the caller made valid
// JSON): everything else, the id and the other members among them, stays
// byte for byte as the client wrote it. A request without that member is
// an error: nothing is added.
func ReplaceParamsMember(m *Message, key string, value []byte) ([]byte, error) {
	if m.Kind != KindRequest || m.Params == nil {
		return nil, fmt.Errorf("%w: not a request with params", ErrInvalid)
	}
	d, root, shift, err := m.value(m.params, m.Params, m.paramsOff)
	if err != nil {
		return nil, err
	}
	if d.Kind(root) != canonjson.Object {
		return nil, fmt.Errorf("%w: params are not an object", ErrInvalid)
	}
	v, ok := d.Get(root, key)
	if !ok {
		return nil, fmt.Errorf("%w: params have no member %q", ErrInvalid, key)
	}
	start := shift + d.Offset(v)
	end := start + len(d.Raw(v))
	out := make([]byte, 0, len(m.Raw)-len(d.Raw(v))+len(value))
	out = append(out, m.Raw[:start]...)
	out = append(out, value...)
	return append(out, m.Raw[end:]...), nil
}

// value returns a parse of one of m's members (node in the kept parse,
// raw its bytes, rawOff their offset in m.Raw) and what to add to the
// parse's offsets to make them offsets in m.Raw: the kept parse when m has
// one, else a parse of raw alone.
func (m *Message) value(node canonjson.NodeID, raw []byte, rawOff int) (*canonjson.Doc, canonjson.NodeID, int, error) {
	if m.doc != nil {
		return m.doc, node, -m.off, nil
	}
	d := new(canonjson.Doc)
	if err := d.Parse(raw, Limits{MaxBytes: len(raw) + 1, LaxNumbers: true}); err != nil {
		return nil, 0, 0, err
	}
	return d, canonjson.Root, rawOff, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
