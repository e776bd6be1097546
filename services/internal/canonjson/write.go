package canonjson

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Kind reports the JSON type of n.
func (d *Doc) Kind(n NodeID) Kind { return d.nodes[n].kind }

// Len reports the members of an object or the elements of an array (0 for
// an opaque one).
func (d *Doc) Len(n NodeID) int { return int(d.nodes[n].n) }

// Offset reports where n starts in the source.
func (d *Doc) Offset(n NodeID) int { return int(d.nodes[n].start) }

// Raw returns the source bytes of n as they were sent.
func (d *Doc) Raw(n NodeID) []byte { return d.src[d.nodes[n].start:d.nodes[n].end] }

// Member returns the i-th member of an object, in canonical (sorted) order.
func (d *Doc) Member(obj NodeID, i int) (key, val NodeID) {
	k := d.order[int(d.nodes[obj].first)+i]
	return NodeID(k), NodeID(k + 1) // a key is a leaf, so its value follows it
}

// First returns the first element of a non-empty array.
func (d *Doc) First(arr NodeID) NodeID { return arr + 1 }

// Next returns the sibling after n inside its array.
func (d *Doc) Next(n NodeID) NodeID { return NodeID(d.nodes[n].next) }

// Get returns the value of the member named key in obj.
func (d *Doc) Get(obj NodeID, key string) (NodeID, bool) {
	for i := range d.Len(obj) {
		k, v := d.Member(obj, i)
		if d.StringIs(k, key) {
			return v, true
		}
	}
	return 0, false
}

// StringIs reports whether the string node n decodes to s, without allocating.
func (d *Doc) StringIs(n NodeID, s string) bool {
	nd := &d.nodes[n]
	if nd.flags&flagEscaped == 0 {
		return string(d.src[nd.start+1:nd.end-1]) == s
	}
	d.ka = d.AppendDecoded(d.ka[:0], n)
	return string(d.ka) == s
}

// Text returns the decoded value of the string node n.
func (d *Doc) Text(n NodeID) string {
	nd := &d.nodes[n]
	if nd.flags&flagEscaped == 0 {
		return string(d.src[nd.start+1 : nd.end-1])
	}
	return string(d.AppendDecoded(nil, n))
}

// MarkSet makes Append write the elements of arr sorted by their canonical
// bytes, so that their order does not matter.
func (d *Doc) MarkSet(arr NodeID) {
	nd := &d.nodes[arr]
	if nd.flags&flagSet != 0 {
		return
	}
	nd.flags |= flagSet
	if nd.flags&flagCanonical != 0 && !d.dirtyIn(arr) {
		// Already canonical: the set is canonical too if its elements are sorted.
		sorted := true
		var prev []byte
		for c, i := arr+1, int32(0); i < nd.n; c, i = NodeID(d.nodes[c].next), i+1 {
			cur := d.Raw(c)
			if i > 0 && bytes.Compare(prev, cur) > 0 {
				sorted = false
				break
			}
			prev = cur
		}
		if sorted {
			return
		}
	}
	// Its span (and every enclosing span) can no longer be copied as it is.
	at, _ := slices.BinarySearch(d.dirty, int32(arr))
	d.dirty = slices.Insert(d.dirty, at, int32(arr))
}

// dirtyIn reports whether the subtree of n holds a set that must be rewritten.
func (d *Doc) dirtyIn(n NodeID) bool {
	if len(d.dirty) == 0 {
		return false
	}
	at, _ := slices.BinarySearch(d.dirty, int32(n))
	return at < len(d.dirty) && d.dirty[at] < d.nodes[n].next
}

// AppendDecoded appends the decoded value of the string node n to dst.
func (d *Doc) AppendDecoded(dst []byte, n NodeID) []byte {
	nd := &d.nodes[n]
	return appendDecoded(dst, d.src[nd.start+1:nd.end-1])
}

// appendDecoded appends the decoded value of s, the validated body of a JSON
// string (without its quotes).
func appendDecoded(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := bytes.IndexByte(s[i:], '\\')
			if j < 0 {
				return append(dst, s[i:]...)
			}
			dst = append(dst, s[i:i+j]...)
			i += j
			continue
		}
		r, size := unescape(s[i:])
		dst = utf8.AppendRune(dst, r)
		i += size
	}
	return dst
}

// unescape decodes the escape at the start of s, which Parse has validated.
func unescape(s []byte) (rune, int) {
	switch s[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, _ := hex4(s, 2)
		if r >= 0xD800 && r <= 0xDBFF {
			lo, _ := hex4(s, 8)
			return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
		}
		return r, 6
	default: // '"', '\\', '/'
		return rune(s[1]), 2
	}
}

// Append appends the canonical form of n to dst.
func (d *Doc) Append(dst []byte, n NodeID) []byte {
	nd := &d.nodes[n]
	if nd.flags&flagCanonical != 0 && (len(d.dirty) == 0 || !d.dirtyIn(n)) {
		return append(dst, d.src[nd.start:nd.end]...)
	}
	switch nd.kind {
	case Null:
		return append(dst, "null"...)
	case True:
		return append(dst, "true"...)
	case False:
		return append(dst, "false"...)
	case Number:
		lit := d.src[nd.start:nd.end]
		f, _ := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
		return AppendNumber(dst, f)
	case String:
		return d.appendString(dst, n)
	case Array:
		if nd.flags&flagSet != 0 {
			return d.appendSet(dst, n)
		}
		dst = append(dst, '[')
		c := n + 1
		for i := range nd.n {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = d.Append(dst, c)
			c = NodeID(d.nodes[c].next)
		}
		return append(dst, ']')
	case Object:
		dst = append(dst, '{')
		first, count := int(nd.first), int(nd.n)
		for i := range count {
			if i > 0 {
				dst = append(dst, ',')
			}
			k := NodeID(d.order[first+i])
			dst = d.appendString(dst, k)
			dst = append(dst, ':')
			dst = d.Append(dst, k+1)
		}
		return append(dst, '}')
	}
	panic("canonjson: Append on a node of an unparsed Doc")
}

type span struct{ s, e int32 }

func (d *Doc) appendSet(dst []byte, n NodeID) []byte {
	nd := d.nodes[n]
	dst = append(dst, '[')
	start := len(dst)
	base := len(d.spans)
	c := n + 1
	for range nd.n {
		dst = d.Append(dst, c)
		d.spans = append(d.spans, int32(len(dst)))
		c = NodeID(d.nodes[c].next)
	}
	// spans holds end offsets; turn them into [start,end) pairs to sort. The
	// elements are complete by now, so pairs and tmp are free to use.
	ends := d.spans[base:]
	pairs := d.pairs[:0]
	prev := int32(start)
	for _, e := range ends {
		pairs = append(pairs, span{prev, e})
		prev = e
	}
	d.pairs = pairs
	d.spans = d.spans[:base]
	slices.SortFunc(pairs, func(a, b span) int { return bytes.Compare(dst[a.s:a.e], dst[b.s:b.e]) })
	d.tmp = append(d.tmp[:0], dst[start:]...)
	dst = dst[:start]
	for i, p := range pairs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, d.tmp[p.s-int32(start):p.e-int32(start)]...)
	}
	return append(dst, ']')
}

func (d *Doc) appendString(dst []byte, n NodeID) []byte {
	nd := &d.nodes[n]
	if nd.flags&flagCanonical != 0 {
		return append(dst, d.src[nd.start:nd.end]...)
	}
	s := d.src[nd.start+1 : nd.end-1]
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			j := bytes.IndexByte(s[i:], '\\')
			if j < 0 {
				dst = append(dst, s[i:]...)
				break
			}
			dst = append(dst, s[i:i+j]...)
			i += j
			continue
		}
		r, size := unescape(s[i:])
		dst = appendRune(dst, r)
		i += size
	}
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendRune writes r as RFC 8785 section 3.2.2.2 prescribes.
func appendRune(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// AppendString appends s, which must be valid UTF-8, as a canonical JSON string.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		// Copy the run that needs no escaping in one go.
		j := i
		for j < len(s) && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' {
			j++
		}
		dst = append(dst, s[i:j]...)
		if j == len(s) {
			break
		}
		dst = appendRune(dst, rune(s[j]))
		i = j + 1
	}
	return append(dst, '"')
}

// AppendNumber appends f as ECMAScript's Number.prototype.toString writes it
// (RFC 8785 section 3.2.2.3). f must be finite.
func AppendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// strconv writes e-07 where ECMAScript writes e-7.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// Canonicalize parses src with DefaultLimits and returns its canonical form.
func Canonicalize(src []byte) ([]byte, error) {
	var d Doc
	if err := d.Parse(src, DefaultLimits); err != nil {
		return nil, err
	}
	return d.Append(make([]byte, 0, len(src)), Root), nil
}

// Decoded returns the decoded bytes of the string node n. When the string has
// escapes the result lives in a scratch buffer of d, valid until the next
// call that decodes; otherwise it aliases the source.
func (d *Doc) Decoded(n NodeID) []byte {
	nd := &d.nodes[n]
	if nd.flags&flagEscaped == 0 {
		return d.src[nd.start+1 : nd.end-1]
	}
	d.ka = d.AppendDecoded(d.ka[:0], n)
	return d.ka
}
