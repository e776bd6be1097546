package canonjson

import "sync"

// docs keeps parsed Docs for reuse: a Doc's buffers are most of what
// parsing allocates, and a proxy parses every message it relays.
var docs = sync.Pool{New: func() any { return new(Doc) }}

// maxPooledNodes: a Doc that grew larger than this for one big document is
// let go rather than kept.
const maxPooledNodes = 1 << 14

// Borrow returns a Doc from a pool. Give it back with Return once nothing
// will read it again; slices from Raw point into the parsed source, not
// into the Doc, and stay valid after.
func Borrow() *Doc { return docs.Get().(*Doc) }

// Return gives back a Doc from Borrow; d must not be used after.
func Return(d *Doc) {
	if d == nil || cap(d.nodes) > maxPooledNodes {
		return
	}
	d.src, d.nodes, d.dirty, d.lax = nil, d.nodes[:0], d.dirty[:0], d.lax[:0] // forget the source
	if d.lazyLens != 0 || d.lazy.Keys != nil {
		d.SetLazy(Lazy{}) // the next borrower parses eagerly unless it asks
	}
	docs.Put(d)
}
