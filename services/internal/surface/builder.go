package surface

import (
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Builder assembles a Surface from pages as they arrive: a proxy feeds it
// each tools/list page it forwards, and asks for the Surface when the last
// page is in. A Builder is not safe for concurrent use; Reset reuses it.
type Builder struct {
	opt      Options
	lim      Limits
	doc      canonjson.Doc
	d        *canonjson.Doc // the Doc being read: &doc, or the caller's (AddPageIn)
	list     [2]int32       // source span of the last page's list array
	arena    []byte         // canonical bytes of every item so far
	pending  []pending
	kinds    [numKinds + 1]listing
	scratch  []byte // the surface document being hashed
	total    int    // raw bytes fed since Reset
	lastFrom int    // index in pending of the first item of the last page
	err      error  // the first error since Reset: it sticks, so no surface comes of a failed page
}

type pending struct {
	kind        Kind
	name        string
	off, end    int   // canonical bytes in the arena
	start, stop int32 // the item's source span in the Doc it was read from
	hash        Digest
}

type listing struct {
	listed bool
	pages  int
	items  int
	more   bool // the last page added had a nextCursor
}

// lazyValues lets the parser skip building nodes inside a schema or an
// annotations object that arrives already canonical, with its set-valued
// keywords already in order: such a value is hashed as its bytes stand, which
// is exactly what markSchema and Append would produce for it. (The
// dependency keywords hold sets under arbitrary names, so a schema using one
// is walked in full.)
var lazyValues = canonjson.Lazy{
	Keys:   []string{"inputSchema", "outputSchema", "annotations"},
	Sorted: []string{"required", "type"},
	Bail:   []string{"dependencies", "dependentRequired"},
}

// lazyValuesV2 leaves annotations out: in form v2 a resource's annotations
// lose a member (lastModified) and an empty annotations object counts as
// absent, which needs their members.
var lazyValuesV2 = canonjson.Lazy{
	Keys:   []string{"inputSchema", "outputSchema"},
	Sorted: lazyValues.Sorted,
	Bail:   lazyValues.Bail,
}

// NewBuilder returns an empty Builder.
func NewBuilder(opt Options) *Builder {
	b := &Builder{opt: opt, lim: opt.limits()}
	if opt.Form >= FormV2 {
		b.doc.SetLazy(lazyValuesV2)
	} else {
		b.doc.SetLazy(lazyValues)
	}
	b.d = &b.doc
	return b
}

// Reset empties b for a new surface, keeping its buffers.
func (b *Builder) Reset() {
	b.arena = b.arena[:0]
	b.pending = b.pending[:0]
	b.kinds = [numKinds + 1]listing{}
	b.total, b.err, b.lastFrom = 0, nil, 0
}

// take accounts for n more raw bytes and reports the sticky error, if any.
func (b *Builder) take(n int) error {
	if b.err != nil {
		return b.err
	}
	if b.opt.Form >= numForms {
		b.err = fail(CodeUnknownFormat, "unknown canonical form %s: nothing is hashed by a form this engine does not know", b.opt.Form)
		return b.err
	}
	if b.total += n; b.total > b.lim.MaxTotalBytes {
		b.err = fail(canonjson.CodeTooLarge, "the pages add up to more than the limit of %d bytes", b.lim.MaxTotalBytes)
	}
	return b.err
}

// AddPage adds one page of a tools/list, prompts/list, resources/list or
// resources/templates/list result (kind says which), given as the result
// object exactly as a client reads it: never unwrapped, and refused when it
// carries a JSON-RPC envelope of its own (CodeAmbiguousEnvelope). It
// returns the page's nextCursor, "" on the last page.
func (b *Builder) AddPage(kind Kind, raw []byte) (nextCursor string, err error) {
	if kind < KindTool || kind > KindResourceTemplate {
		return "", fail(CodeUnknownFormat, "AddPage takes a list kind, not %s", kind)
	}
	if err := b.take(len(raw)); err != nil {
		return "", err
	}
	if err := b.doc.Parse(raw, b.opt.jsonLimits()); err != nil {
		e := jsonFail(err)
		e.Kind, e.Page = kind, b.kinds[kind].pages+1
		b.err = e
		return "", e
	}
	b.reserve(len(raw))
	b.lastFrom = len(b.pending)
	cursor, err := b.addPage(kind, canonjson.Root, false)
	if err != nil {
		b.err = err
	}
	return cursor, err
}

// LazyValues are the parse settings a Doc given to AddPageIn should have
// been parsed with (Doc.SetLazy) for the engine to skip what it can in
// every canonical form; a Doc parsed without them is read in full, with the
// same hashes. (A Doc parsed lazier than a form allows is not read in
// place: AddPageIn parses the bytes again.)
var LazyValues = lazyValuesV2

// lazySettings are the parse settings of b's form.
func (b *Builder) lazySettings() canonjson.Lazy {
	if b.opt.Form >= FormV2 {
		return lazyValuesV2
	}
	return lazyValues
}

// readsInPlace reports whether b may read d's parse as it stands: it was
// parsed no lazier than b's form allows (every key it kept opaque is one
// the form may keep opaque, every array the form sorts was checked sorted,
// every key that stops the form's laziness stopped the parse's).
func (b *Builder) readsInPlace(d *canonjson.Doc) bool {
	got, want := d.LazySettings(), b.lazySettings()
	for _, k := range got.Keys {
		if !slices.Contains(want.Keys, k) {
			return false
		}
	}
	if len(got.Keys) == 0 {
		return true // nothing was kept opaque
	}
	for _, k := range want.Sorted {
		if !slices.Contains(got.Sorted, k) {
			return false
		}
	}
	for _, k := range want.Bail {
		if !slices.Contains(got.Bail, k) {
			return false
		}
	}
	return true
}

// AddPageIn is AddPage for a result that the caller has parsed already, as
// the value n of d: a proxy parses each message it relays once, and hashes
// the list result inside that parse. d may have been parsed with
// LaxNumbers: a number a strict parse would refuse fails the page as it
// would in AddPage. The item spans LastPage reports are offsets in
// d.Source(). d must not change until the page's items have been read.
func (b *Builder) AddPageIn(kind Kind, d *canonjson.Doc, n canonjson.NodeID) (nextCursor string, err error) {
	if kind < KindTool || kind > KindResourceTemplate {
		return "", fail(CodeUnknownFormat, "AddPageIn takes a list kind, not %s", kind)
	}
	raw := d.Raw(n)
	if b.lim.MaxDepth < canonjson.DefaultLimits.MaxDepth-1 || !b.readsInPlace(d) {
		// Depth is checked where a Doc is parsed, against the limit the
		// parse was given: a builder bound tighter than the usual bound
		// reads its own parse; and so does a builder whose form must see
		// inside what the parse kept opaque. The spans it reports are
		// still offsets in d.Source().
		cursor, err := b.AddPage(kind, raw)
		if err == nil {
			base := int32(d.Offset(n))
			for i := b.lastFrom; i < len(b.pending); i++ {
				b.pending[i].start += base
				b.pending[i].stop += base
			}
			b.list[0] += base
			b.list[1] += base
		}
		return cursor, err
	}
	if err := b.take(len(raw)); err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		e := jsonFail(err)
		e.Kind, e.Page = kind, b.kinds[kind].pages+1
		b.err = e
		return "", e
	}
	if len(raw) > b.lim.MaxBytes {
		return fail(&canonjson.Error{Code: canonjson.CodeTooLarge, Msg: "the page is " + itoa(len(raw)) + " bytes, over the limit of " + itoa(b.lim.MaxBytes)})
	}
	if err := d.StrictIn(n); err != nil {
		return fail(err)
	}
	b.d = d
	defer func() { b.d = &b.doc }()
	b.reserve(len(raw))
	b.lastFrom = len(b.pending)
	cursor, err := b.addPage(kind, n, false)
	if err != nil {
		b.err = err
	}
	return cursor, err
}

// PageItem is one item of the page last added.
type PageItem struct {
	Kind Kind
	Name string
	Hash Digest
	// Start and End are the item's span in the bytes the page was parsed
	// from (AddPage's raw, AddPageIn's d.Source()): exactly the bytes the
	// hash was made of, for a proxy that forwards some items of a page.
	Start, End int
}

// LastPage returns the items the last successful AddPage or AddInitialize
// added, in the order the server sent them: a proxy decides on each item of
// a page before the listing is complete.
func (b *Builder) LastPage() []PageItem {
	if b.err != nil || b.lastFrom > len(b.pending) {
		return nil
	}
	out := make([]PageItem, 0, len(b.pending)-b.lastFrom)
	for _, p := range b.pending[b.lastFrom:] {
		out = append(out, PageItem{Kind: p.kind, Name: p.name, Hash: p.hash, Start: int(p.start), End: int(p.stop)})
	}
	return out
}

// Options returns the options b hashes with.
func (b *Builder) Options() Options { return b.opt }

// LastList returns the span of the last page's list array (tools, prompts,
// ...) in the bytes the page was parsed from, as LastPage's item spans.
func (b *Builder) LastList() (start, end int) { return int(b.list[0]), int(b.list[1]) }

// reserve grows the arena once for a page of n raw bytes: canonical bytes
// are rarely longer than the input, so one allocation usually suffices.
func (b *Builder) reserve(n int) {
	if need := n + n/8 + 64; cap(b.arena)-len(b.arena) < need {
		b.arena = append(make([]byte, 0, len(b.arena)+need), b.arena...)
	}
}

// AddInitialize records the instructions of an initialize (or 2026-07-28
// server/discover) result, given as the result object as a client reads it
// (never unwrapped, as AddPage). A result without instructions adds nothing.
// It adds the instructions item only; AddServer adds the server item of the
// same result (form v2), and Parse adds both.
func (b *Builder) AddInitialize(raw []byte) error {
	return b.addResult(raw, KindInstructions)
}

// AddServer records the server item of an initialize (or server/discover)
// result in form v2: the covered members of its serverInfo (name, title,
// description, websiteUrl, icons; never version). A result without
// serverInfo adds nothing, and so does every result in form v1.
func (b *Builder) AddServer(raw []byte) error {
	return b.addResult(raw, KindServer)
}

func (b *Builder) addResult(raw []byte, kind Kind) error {
	if err := b.take(len(raw)); err != nil {
		return err
	}
	if err := b.doc.Parse(raw, b.opt.jsonLimits()); err != nil {
		e := jsonFail(err)
		e.Kind = kind
		b.err = e
		return e
	}
	b.lastFrom = len(b.pending)
	var err error
	if kind == KindServer {
		err = b.addServer(canonjson.Root, false)
	} else {
		err = b.addInstructions(canonjson.Root, false)
	}
	if err != nil {
		b.err = err
	}
	return err
}

// AddInitializeIn adds the items of an initialize result the caller has
// parsed already, as the value n of d (see AddPageIn): the instructions,
// and in form v2 the server item (AddInitialize and AddServer at once).
func (b *Builder) AddInitializeIn(d *canonjson.Doc, n canonjson.NodeID) error {
	if b.lim.MaxDepth < canonjson.DefaultLimits.MaxDepth-1 || !b.readsInPlace(d) {
		return b.initialize(d.Raw(n), nil, 0) // as in AddPageIn: its own parse
	}
	return b.initialize(d.Raw(n), d, n)
}

// AddInitializeResult is AddInitializeIn for a result given as its bytes:
// every item of it from one parse.
func (b *Builder) AddInitializeResult(raw []byte) error { return b.initialize(raw, nil, 0) }

// readIn returns the value a result is read from: raw parsed by b when d
// is nil (n is then its root), else n of d, the caller's parse of raw,
// checked as a parse of raw alone would be (its size, and numbers a lax
// parse let through).
func (b *Builder) readIn(raw []byte, d *canonjson.Doc, n canonjson.NodeID) (*canonjson.Doc, canonjson.NodeID, error) {
	var err error
	switch {
	case d == nil:
		err = b.doc.Parse(raw, b.opt.jsonLimits())
		d, n = &b.doc, canonjson.Root
	case len(raw) > b.lim.MaxBytes:
		err = &canonjson.Error{Code: canonjson.CodeTooLarge, Msg: "the result is " + itoa(len(raw)) + " bytes, over the limit of " + itoa(b.lim.MaxBytes)}
	default:
		err = d.StrictIn(n)
	}
	return d, n, err
}

// initialize adds every item of the initialize result raw, read as the
// value n of d, or parsed by b when d is nil.
func (b *Builder) initialize(raw []byte, d *canonjson.Doc, n canonjson.NodeID) error {
	if err := b.take(len(raw)); err != nil {
		return err
	}
	d, n, err := b.readIn(raw, d, n)
	if err != nil {
		e := jsonFail(err)
		e.Kind = KindInstructions
		b.err = e
		return e
	}
	b.d = d
	defer func() { b.d = &b.doc }()
	b.lastFrom = len(b.pending)
	if err := b.addInitialize(n, false); err != nil {
		b.err = err
		return err
	}
	return nil
}

// addInitialize adds every item of an initialize result: the instructions,
// and in form v2 the server item.
func (b *Builder) addInitialize(n canonjson.NodeID, unwrap bool) error {
	if err := b.addInstructions(n, unwrap); err != nil {
		return err
	}
	return b.addServer(n, unwrap)
}

// initResult returns the initialize result n stands for, checked as an
// object that reads one way for the members named.
func (b *Builder) initResult(n canonjson.NodeID, unwrap bool, kind Kind, names ...string) (canonjson.NodeID, *Error) {
	d := b.d
	r, err := resultOf(d, n, unwrap)
	if err != nil {
		err.Kind = kind
		return r, err
	}
	if d.Kind(r) != canonjson.Object {
		return r, &Error{Code: CodeUnknownFormat, Kind: kind, Msg: "the initialize result is not an object"}
	}
	if err := foldedMembers(d, r, names...); err != nil {
		err.Kind = kind
		return r, err
	}
	return r, nil
}

func (b *Builder) addInstructions(n canonjson.NodeID, unwrap bool) error {
	d := b.d
	r, err := b.initResult(n, unwrap, KindInstructions, "instructions")
	if err != nil {
		return err
	}
	ins, ok := d.Get(r, "instructions")
	if !ok || d.Kind(ins) == canonjson.Null {
		return nil
	}
	if d.Kind(ins) != canonjson.String {
		return &Error{Code: CodeInvalidField, Kind: KindInstructions, Msg: "instructions is a " + d.Kind(ins).String() + ", want a string"}
	}
	if b.kinds[KindInstructions].items > 0 {
		return &Error{Code: CodeDuplicateItem, Kind: KindInstructions, Msg: "instructions given twice"}
	}
	b.kinds[KindInstructions] = listing{listed: true, pages: 1, items: 1}
	off := len(b.arena)
	b.arena = d.Append(b.arena, ins)
	b.pending = append(b.pending, pending{kind: KindInstructions, off: off, end: len(b.arena), hash: b.opt.Hash.Sum(b.arena[off:])})
	return nil
}

// serverFields are the members of serverInfo the server item covers, with
// the JSON kind each must have; version is left out (it changes with every
// release, docs/adr/0015).
var serverFields = map[string]canonjson.Kind{
	"name": canonjson.String, "title": canonjson.String, "description": canonjson.String,
	"websiteUrl": canonjson.String, "icons": canonjson.Array,
}

var serverNames = []string{"name", "title", "description", "websiteUrl", "icons"}

// addServer adds the server item of an initialize result (form v2 only).
func (b *Builder) addServer(n canonjson.NodeID, unwrap bool) error {
	if b.opt.Form < FormV2 {
		return nil
	}
	d := b.d
	r, err := b.initResult(n, unwrap, KindServer, "serverInfo")
	if err != nil {
		return err
	}
	info, ok := d.Get(r, "serverInfo")
	if !ok || d.Kind(info) == canonjson.Null {
		return nil
	}
	if d.Kind(info) != canonjson.Object {
		return &Error{Code: CodeInvalidField, Kind: KindServer, Msg: "serverInfo is a " + d.Kind(info).String() + ", want an object"}
	}
	if err := foldedMembers(d, info, serverNames...); err != nil {
		err.Kind = KindServer
		return err
	}
	if b.kinds[KindServer].items > 0 {
		return &Error{Code: CodeDuplicateItem, Kind: KindServer, Msg: "serverInfo given twice"}
	}
	off := len(b.arena)
	b.arena = append(b.arena, '{')
	wrote := false
	for i := range d.Len(info) {
		k, v := d.Member(info, i)
		want, covered := serverFields[string(d.Decoded(k))]
		if !covered || d.Kind(v) == canonjson.Null {
			continue
		}
		if got := d.Kind(v); got != want {
			return &Error{Code: CodeInvalidField, Kind: KindServer, Msg: "serverInfo." + d.Text(k) + " is a " + got.String() + ", want a " + want.String()}
		}
		if err := foldedDeep(d, v); err != nil {
			err.Kind = KindServer
			return err
		}
		if want == canonjson.Array && d.Len(v) == 0 {
			continue // no icons, written out
		}
		if wrote {
			b.arena = append(b.arena, ',')
		}
		b.arena = d.Append(b.arena, k)
		b.arena = append(b.arena, ':')
		b.arena = d.Append(b.arena, v)
		wrote = true
	}
	b.arena = append(b.arena, '}')
	b.kinds[KindServer] = listing{listed: true, pages: 1, items: 1}
	b.pending = append(b.pending, pending{kind: KindServer, off: off, end: len(b.arena), hash: b.opt.Hash.Sum(b.arena[off:])})
	return nil
}

// resultOf returns the result object n stands for: n itself, which must
// not carry an envelope of its own, or, when unwrap is set (a whole file
// given to Parse), the result of the response n when it is one.
func resultOf(d *canonjson.Doc, n canonjson.NodeID, unwrap bool) (canonjson.NodeID, *Error) {
	if unwrap {
		return unwrapResponse(d, n)
	}
	if d.Kind(n) == canonjson.Object {
		for i := range d.Len(n) {
			if k, _ := d.Member(n, i); d.StringIs(k, "jsonrpc") || d.FoldsTo(k, "jsonrpc") {
				return n, &Error{Code: CodeAmbiguousEnvelope, Msg: "the result carries a JSON-RPC envelope of its own (a \"jsonrpc\" member): a reader might take its inner result for the result"}
			}
		}
	}
	return n, nil
}

// foldedMembers refuses an object two of whose member names differ only in
// case, or with a member a case-insensitive reader takes for one of names.
func foldedMembers(d *canonjson.Doc, obj canonjson.NodeID, names ...string) *Error {
	if a, b, ok := d.FoldTwin(obj); ok {
		return &Error{Code: CodeAmbiguousMember, Msg: "members " + quote(a) + " and " + quote(b) + " differ only in case"}
	}
	for i := range d.Len(obj) {
		k, _ := d.Member(obj, i)
		if name, ok := d.FoldsToAny(k, names); ok {
			return &Error{Code: CodeAmbiguousMember, Msg: "member " + quote(d.Text(k)) + " reads as " + quote(name) + " to a case-insensitive reader"}
		}
	}
	return nil
}

// foldedDeep refuses any object inside n (n included) two of whose member
// names differ only in case.
func foldedDeep(d *canonjson.Doc, n canonjson.NodeID) *Error {
	switch d.Kind(n) {
	case canonjson.Object:
		if err := foldedMembers(d, n); err != nil {
			return err
		}
		for i := range d.Len(n) {
			if _, v := d.Member(n, i); d.Kind(v) == canonjson.Object || d.Kind(v) == canonjson.Array {
				if err := foldedDeep(d, v); err != nil {
					return err
				}
			}
		}
	case canonjson.Array:
		for el, i := d.First(n), 0; i < d.Len(n); el, i = d.Next(el), i+1 {
			if err := foldedDeep(d, el); err != nil {
				return err
			}
		}
	}
	return nil
}

// unwrapResponse returns the result of a JSON-RPC response, or n itself when
// n is not a response.
func unwrapResponse(d *canonjson.Doc, n canonjson.NodeID) (canonjson.NodeID, *Error) {
	if d.Kind(n) != canonjson.Object {
		return n, nil
	}
	if _, ok := d.Get(n, "jsonrpc"); !ok {
		return n, nil
	}
	if e, ok := d.Get(n, "error"); ok {
		msg := "the server answered with an error"
		if d.Kind(e) == canonjson.Object {
			if m, ok := d.Get(e, "message"); ok && d.Kind(m) == canonjson.String {
				msg += ": " + clipText(d.Text(m))
			}
		}
		return n, &Error{Code: CodeJSONRPCError, Msg: msg}
	}
	r, ok := d.Get(n, "result")
	if !ok {
		return n, &Error{Code: CodeUnknownFormat, Msg: "a JSON-RPC message with neither result nor error"}
	}
	return r, nil
}

func (b *Builder) addPage(kind Kind, n canonjson.NodeID, unwrap bool) (string, error) {
	d := b.d
	st := &b.kinds[kind]
	page := st.pages + 1
	r, perr := resultOf(d, n, unwrap)
	if perr != nil {
		perr.Kind, perr.Page = kind, page
		return "", perr
	}
	if d.Kind(r) != canonjson.Object {
		return "", &Error{Code: CodeUnknownFormat, Kind: kind, Page: page, Msg: "the list result is not an object"}
	}
	if err := foldedMembers(d, r, kind.ListKey(), "nextCursor"); err != nil {
		err.Kind, err.Page = kind, page
		return "", err
	}
	arr, ok := d.Get(r, kind.ListKey())
	if !ok || d.Kind(arr) != canonjson.Array {
		return "", &Error{Code: CodeUnknownFormat, Kind: kind, Page: page, Msg: "the list result has no " + kind.ListKey() + " array"}
	}
	cursor := ""
	if c, ok := d.Get(r, "nextCursor"); ok {
		switch d.Kind(c) {
		case canonjson.String:
			cursor = d.Text(c)
		case canonjson.Null:
		default:
			return "", &Error{Code: CodeInvalidField, Kind: kind, Page: page, Msg: "nextCursor is a " + d.Kind(c).String() + ", want a string"}
		}
	}
	if st.items+d.Len(arr) > b.lim.MaxItems {
		return "", &Error{Code: CodeTooManyItems, Kind: kind, Page: page,
			Msg: "more than the limit of " + itoa(b.lim.MaxItems) + " items"}
	}
	st.listed, st.pages, st.more = true, page, cursor != ""
	b.list = [2]int32{int32(d.Offset(arr)), int32(d.Offset(arr) + len(d.Raw(arr)))}
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		if err := b.addItem(kind, el); err != nil {
			err.Kind, err.Page = kind, page
			return "", err
		}
	}
	st.items += d.Len(arr)
	return cursor, nil
}

// coveredNames are the member names coveredField can cover, by kind: an
// item member that differs from one of them only in case is refused.
var coveredNames = map[Kind][]string{
	KindTool:             {"name", "description", "title", "inputSchema", "outputSchema", "annotations"},
	KindPrompt:           {"name", "description", "title", "arguments"},
	KindResource:         {"name", "description", "title", "mimeType", "uri", "uriTemplate"},
	KindResourceTemplate: {"name", "description", "title", "mimeType", "uri", "uriTemplate"},
}

// coveredNamesV2 are coveredNames with the members form v2 adds.
var coveredNamesV2 = map[Kind][]string{
	KindTool:             append(slices.Clip(coveredNames[KindTool]), "icons", "execution", "_meta"),
	KindPrompt:           append(slices.Clip(coveredNames[KindPrompt]), "icons", "_meta"),
	KindResource:         append(slices.Clip(coveredNames[KindResource]), "annotations", "icons", "_meta"),
	KindResourceTemplate: append(slices.Clip(coveredNames[KindResourceTemplate]), "annotations", "icons", "_meta"),
}

// VolatileMetaKeys are the members of an item's _meta that form v2 leaves
// out: values of one response or one request (a progress token, trace
// context, the task a message belongs to), never what the item is
// (docs/adr/0015). Every other member of _meta is covered.
var VolatileMetaKeys = []string{"progressToken", "traceparent", "tracestate", "baggage", "io.modelcontextprotocol/related-task"}

// coveredField reports whether key is hashed for items of kind, and the
// JSON kind its value must have.
func coveredField(kind Kind, key []byte, opt *Options) (want canonjson.Kind, covered bool) {
	if opt.Form >= FormV2 {
		switch string(key) {
		case "icons":
			return canonjson.Array, true
		case "_meta":
			return canonjson.Object, true
		case "execution":
			return canonjson.Object, kind == KindTool
		case "annotations":
			if kind == KindResource || kind == KindResourceTemplate {
				return canonjson.Object, true
			}
		}
	}
	switch kind {
	case KindTool:
		switch string(key) {
		case "name", "description", "title":
			return canonjson.String, true
		case "inputSchema", "outputSchema":
			return canonjson.Object, true
		case "annotations":
			return canonjson.Object, !opt.ExcludeAnnotations
		}
	case KindPrompt:
		switch string(key) {
		case "name", "description", "title":
			return canonjson.String, true
		case "arguments":
			return canonjson.Array, true
		}
	case KindResource, KindResourceTemplate:
		switch string(key) {
		case "name", "description", "title", "mimeType":
			return canonjson.String, true
		case "uri":
			return canonjson.String, kind == KindResource
		case "uriTemplate":
			return canonjson.String, kind == KindResourceTemplate
		}
	}
	return 0, false
}

func (b *Builder) addItem(kind Kind, n canonjson.NodeID) *Error {
	d := b.d
	if d.Kind(n) != canonjson.Object {
		return &Error{Code: CodeItemNotObject, Msg: "an item is a " + d.Kind(n).String() + ", want an object"}
	}
	nameKey := kindInfo[kind].nameKey
	nameNode, ok := d.Get(n, nameKey)
	if !ok {
		return &Error{Code: CodeMissingName, Msg: "an item has no " + nameKey}
	}
	if d.Kind(nameNode) != canonjson.String {
		return &Error{Code: CodeMissingName, Msg: "an item's " + nameKey + " is a " + d.Kind(nameNode).String() + ", want a string"}
	}
	name := d.Text(nameNode)
	if name == "" {
		return &Error{Code: CodeMissingName, Msg: "an item has an empty " + nameKey}
	}
	names := coveredNames[kind]
	if b.opt.Form >= FormV2 {
		names = coveredNamesV2[kind]
	}
	if err := foldedMembers(d, n, names...); err != nil {
		err.Item = name
		return err
	}
	off := len(b.arena)
	b.arena = append(b.arena, '{')
	wrote := false
	for i := range d.Len(n) {
		k, v := d.Member(n, i)
		want, covered := coveredField(kind, d.Decoded(k), &b.opt)
		if !covered || d.Kind(v) == canonjson.Null {
			continue // a covered field that is null counts as absent, as clients read it (the name is not null: checked above)
		}
		if got := d.Kind(v); got != want {
			return &Error{Code: CodeInvalidField, Item: name, Msg: "field " + d.Text(k) + " is a " + got.String() + ", want a " + want.String()}
		}
		if err := foldedDeep(d, v); err != nil {
			err.Item = name
			return err
		}
		var drop func(k, v canonjson.NodeID) bool // members of an object value left out (form v2)
		switch {
		case kind == KindTool && (d.StringIs(k, "inputSchema") || d.StringIs(k, "outputSchema")):
			markSchema(d, v)
		case kind == KindPrompt && d.StringIs(k, "arguments"): // a set of argument objects
			if err := checkArguments(d, v); err != nil {
				err.Item = name
				return err
			}
			d.MarkSet(v)
		case b.opt.Form < FormV2:
		case d.StringIs(k, "_meta"):
			drop = func(k, _ canonjson.NodeID) bool { return volatileMeta(d, k) }
		case d.StringIs(k, "execution"):
			// taskSupport "forbidden" is the default: written out, it says nothing.
			drop = func(k, v canonjson.NodeID) bool {
				return d.StringIs(k, "taskSupport") && d.Kind(v) == canonjson.String && d.StringIs(v, "forbidden")
			}
		case d.StringIs(k, "annotations") && kind != KindTool:
			// lastModified moves with the resource's content, as size does.
			drop = func(k, _ canonjson.NodeID) bool { return d.StringIs(k, "lastModified") }
		case d.StringIs(k, "annotations"):
			drop = func(_, _ canonjson.NodeID) bool { return false } // {} as absent
		case d.StringIs(k, "icons") && d.Len(v) == 0:
			continue // no icons, written out
		}
		if wrote {
			b.arena = append(b.arena, ',')
		}
		mark := len(b.arena)
		b.arena = d.Append(b.arena, k)
		b.arena = append(b.arena, ':')
		if drop == nil {
			b.arena = d.Append(b.arena, v)
		} else if b.arena, ok = appendKept(b.arena, d, v, drop); !ok {
			// Nothing left but defaults and volatile members: as absent.
			b.arena = b.arena[:mark]
			if wrote {
				b.arena = b.arena[:mark-1]
			}
			continue
		}
		wrote = true
	}
	b.arena = append(b.arena, '}')
	b.pending = append(b.pending, pending{kind: kind, name: name, off: off, end: len(b.arena),
		start: int32(d.Offset(n)), stop: int32(d.Offset(n) + len(d.Raw(n))), hash: b.opt.Hash.Sum(b.arena[off:])})
	return nil
}

// appendKept writes the object obj in canonical form without the members
// drop names. When none is left it writes nothing and reports false: an
// object of defaults and volatile values counts as absent.
func appendKept(dst []byte, d *canonjson.Doc, obj canonjson.NodeID, drop func(k, v canonjson.NodeID) bool) ([]byte, bool) {
	first := true
	for i := range d.Len(obj) {
		k, v := d.Member(obj, i)
		if drop(k, v) {
			continue
		}
		if first {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		first = false
		dst = d.Append(dst, k)
		dst = append(dst, ':')
		dst = d.Append(dst, v)
	}
	if first {
		return dst, false
	}
	return append(dst, '}'), true
}

// volatileMeta drops the volatile members of _meta (VolatileMetaKeys).
func volatileMeta(d *canonjson.Doc, k canonjson.NodeID) bool {
	return slices.ContainsFunc(VolatileMetaKeys, func(name string) bool { return d.StringIs(k, name) })
}

func checkArguments(d *canonjson.Doc, arr canonjson.NodeID) *Error {
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		if d.Kind(el) != canonjson.Object {
			return &Error{Code: CodeInvalidField, Msg: "a prompt argument is a " + d.Kind(el).String() + ", want an object"}
		}
		if nm, ok := d.Get(el, "name"); !ok || d.Kind(nm) != canonjson.String {
			return &Error{Code: CodeMissingName, Msg: "a prompt argument has no string name"}
		}
	}
	return nil
}

// markSchema walks a JSON Schema and marks its set-valued keywords so that
// their order does not reach the canonical form. It follows only keywords
// whose values are schemas, so data ("default", "enum", "const", "examples")
// is never reordered, even where it holds a member named "required".
func markSchema(d *canonjson.Doc, n canonjson.NodeID) {
	if d.Kind(n) != canonjson.Object {
		return // true / false schemas and malformed ones are hashed as they are
	}
	for i := range d.Len(n) {
		k, v := d.Member(n, i)
		vk := d.Kind(v)
		switch string(d.Decoded(k)) {
		case "required", "type":
			if vk == canonjson.Array {
				d.MarkSet(v)
			}
		case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
			if vk == canonjson.Object {
				for j := range d.Len(v) {
					_, s := d.Member(v, j)
					markSchema(d, s)
				}
			}
		case "dependentRequired": // sets of property names
			if vk == canonjson.Object {
				for j := range d.Len(v) {
					if _, s := d.Member(v, j); d.Kind(s) == canonjson.Array {
						d.MarkSet(s)
					}
				}
			}
		case "dependencies": // draft 7: a schema, or a set of property names
			if vk == canonjson.Object {
				for j := range d.Len(v) {
					_, s := d.Member(v, j)
					if d.Kind(s) == canonjson.Array {
						d.MarkSet(s)
					} else {
						markSchema(d, s)
					}
				}
			}
		case "items", "allOf", "anyOf", "oneOf", "prefixItems":
			if vk == canonjson.Array {
				for el, j := d.First(v), 0; j < d.Len(v); el, j = d.Next(el), j+1 {
					markSchema(d, el)
				}
			} else {
				markSchema(d, v)
			}
		case "additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
			"unevaluatedProperties", "unevaluatedItems", "contentSchema":
			markSchema(d, v)
		}
	}
}

// Surface finishes the surface. It fails when a listing is incomplete (its
// last page had a nextCursor) or names an item twice. b may be reused after
// Reset; the Surface does not share memory with it.
func (b *Builder) Surface() (*Surface, error) {
	if b.err != nil {
		return nil, b.err
	}
	for k := KindTool; k <= KindResourceTemplate; k++ {
		if b.kinds[k].more {
			return nil, &Error{Code: CodeIncomplete, Kind: k, Page: b.kinds[k].pages,
				Msg: "the last page has a nextCursor: a partial listing is never a surface"}
		}
	}
	slices.SortFunc(b.pending, func(x, y pending) int {
		if x.kind != y.kind {
			return int(x.kind) - int(y.kind)
		}
		return canonjson.CompareUTF16(x.name, y.name)
	})
	s := &Surface{Items: make([]Item, len(b.pending)), form: b.opt.Form}
	arena := b.arena
	for i, p := range b.pending {
		if i > 0 && b.pending[i-1].kind == p.kind && b.pending[i-1].name == p.name {
			return nil, &Error{Code: CodeDuplicateItem, Kind: p.kind, Item: p.name,
				Msg: "two " + p.kind.ListKey() + " share the " + kindInfo[p.kind].nameKey + " " + quote(p.name)}
		}
		s.Items[i] = Item{Kind: p.kind, Name: p.name, Hash: p.hash, Canonical: arena[p.off:p.end:p.end]}
	}
	for k := range b.kinds {
		s.listed[k] = b.kinds[k].listed
	}
	b.scratch = appendSurfaceDoc(b.scratch[:0], s)
	s.Hash = b.opt.Hash.Sum(b.scratch)
	b.arena = nil // now owned by s
	b.pending = b.pending[:0]
	b.kinds = [numKinds + 1]listing{}
	return s, nil
}

// appendSurfaceDoc writes the surface document: a canonical JSON object with a
// member per listed kind mapping each item name to its hash, "instructions"
// and "server" mapping to the hash of those items, "uiContents" mapping each
// UI resource's uri to the hash of its read contents, "promptMessages"
// mapping each argument-less prompt's name to the hash of what its
// prompts/get returns, and "surface" naming the
// version of the form (Form.String), so that a change to the canonical form
// can never collide with an earlier one. Members and names are in RFC 8785
// order by construction.
func appendSurfaceDoc(dst []byte, s *Surface) []byte {
	dst = append(dst, '{')
	first := true
	member := func(key string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = canonjson.AppendString(dst, key)
		dst = append(dst, ':')
	}
	// RFC 8785 order of the member names: instructions < promptMessages <
	// prompts < resourceTemplates < resources < server < surface < tools <
	// uiContents.
	if ins := s.Of(KindInstructions); len(ins) == 1 {
		member("instructions")
		dst = append(dst, '"')
		dst = ins[0].Hash.AppendText(dst)
		dst = append(dst, '"')
	}
	// Form v2: the messages of the argument-less prompts, a member only
	// when there are some, so that a surface without any hashes as before.
	if pm := s.Of(KindPromptMessages); len(pm) > 0 {
		member(KindPromptMessages.ListKey())
		dst = appendHashes(dst, pm)
	}
	for _, k := range []Kind{KindPrompt, KindResourceTemplate, KindResource, KindServer, 0, KindTool} {
		if k == 0 {
			member("surface")
			dst = canonjson.AppendString(dst, s.form.String())
			continue
		}
		if k == KindServer {
			if srv := s.Of(KindServer); len(srv) == 1 {
				member("server")
				dst = append(dst, '"')
				dst = srv[0].Hash.AppendText(dst)
				dst = append(dst, '"')
			}
			continue
		}
		if !s.listed[k] {
			continue
		}
		member(k.ListKey())
		dst = appendHashes(dst, s.Of(k))
	}
	// Form v2: the read contents of the UI resources, a member only when
	// there are some, so that a surface without any hashes as before.
	if ui := s.Of(KindUIContent); len(ui) > 0 {
		member(KindUIContent.ListKey())
		dst = appendHashes(dst, ui)
	}
	return append(dst, '}')
}

// appendHashes writes items as the surface document lists a kind: an
// object of their hashes by name (items sorted by name, as Of returns
// them).
func appendHashes(dst []byte, items []Item) []byte {
	dst = append(dst, '{')
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = canonjson.AppendString(dst, it.Name)
		dst = append(dst, ':', '"')
		dst = it.Hash.AppendText(dst)
		dst = append(dst, '"')
	}
	return append(dst, '}')
}

// SurfaceDocument returns the canonical bytes whose hash is s.Hash, for
// anyone who wants to check the hash by hand.
func (s *Surface) SurfaceDocument() []byte { return appendSurfaceDoc(nil, s) }
