package canonjson

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Kind is the JSON type of a node.
type Kind uint8

// The JSON kinds.
const (
	Null Kind = iota + 1
	False
	True
	Number
	String
	Array
	Object
)

var kindNames = [...]string{"", "null", "false", "true", "number", "string", "array", "object"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// NodeID names a node of a Doc. The root is 0.
type NodeID int32

// Root is the top-level value of a parsed Doc.
const Root NodeID = 0

// Limits bound what Parse accepts.
type Limits struct {
	MaxBytes int // input size; at most 2 GiB - 1
	MaxDepth int // nesting of arrays and objects; the top-level value is depth 1
}

// DefaultLimits accept real-world MCP manifests with a wide margin.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxDepth: 128}

const (
	flagEscaped   = 1 << iota // string holds backslash escapes
	flagCanonical             // the source span is already in canonical form
	flagSet                   // array is written with its elements sorted
	flagHigh                  // string holds bytes from 0xEE up (UTF-16 order may differ from byte order)
)

type node struct {
	start, end int32 // source span of the value (strings include their quotes)
	next       int32 // index of the first node after this node's subtree
	first      int32 // objects: index in Doc.order of the first sorted key
	n          int32 // objects: members; arrays: elements
	kind       Kind
	flags      uint8
}

// Doc is a parsed JSON document. The zero Doc is ready to use; reuse it to
// keep its buffers. A Doc refers to the source bytes passed to Parse, which
// must not change while the Doc is in use.
type Doc struct {
	src      []byte
	nodes    []node
	order    []int32 // sorted key node ids of every object, object by object
	stack    []int32 // key ids of the objects being parsed
	dirty    []int32 // sorted ids of arrays marked as sets that were not already sorted
	spans    []int32 // element end offsets of the sets being written
	pairs    []span  // scratch for sorting a set's elements
	tmp      []byte  // scratch for rewriting sets
	ka, kb   []byte  // scratch for decoding escaped keys
	maxDepth int
}

// Parse parses src strictly, replacing what d held.
func (d *Doc) Parse(src []byte, lim Limits) error {
	d.src = src
	d.nodes = d.nodes[:0]
	d.order = d.order[:0]
	d.stack = d.stack[:0]
	d.dirty = d.dirty[:0]
	d.maxDepth = lim.MaxDepth
	if d.maxDepth <= 0 {
		d.maxDepth = DefaultLimits.MaxDepth
	}
	maxBytes := lim.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultLimits.MaxBytes
	}
	if len(src) > maxBytes || len(src) >= math.MaxInt32 {
		return errAt(CodeTooLarge, 0, "input is %d bytes, over the limit of %d", len(src), maxBytes)
	}
	if cap(d.nodes) == 0 {
		d.nodes = make([]node, 0, len(src)/16+8)
	}
	i, err := d.value(skipWS(src, 0), 1)
	if err != nil {
		d.nodes = d.nodes[:0]
		return err
	}
	if i = skipWS(src, i); i != len(src) {
		d.nodes = d.nodes[:0]
		return errAt(CodeTrailingData, i, "unexpected data after the top-level value")
	}
	return nil
}

func skipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (d *Doc) add(k Kind, start int) int32 {
	n := len(d.nodes)
	if n == cap(d.nodes) {
		d.nodes = slices.Grow(d.nodes, n+1)
	}
	d.nodes = d.nodes[:n+1]
	d.nodes[n] = node{kind: k, start: int32(start)}
	return int32(n)
}

func (d *Doc) value(i, depth int) (int, error) {
	src := d.src
	if i >= len(src) {
		return i, errAt(CodeInvalidJSON, i, "unexpected end of input")
	}
	switch c := src[i]; c {
	case '{':
		return d.object(i, depth)
	case '[':
		return d.array(i, depth)
	case '"':
		id := d.add(String, i)
		j, flags, err := scanString(src, i)
		if err != nil {
			return j, err
		}
		nd := &d.nodes[id]
		nd.end, nd.next, nd.flags = int32(j), id+1, flags
		return j, nil
	case 't':
		return d.literal(i, "true", True)
	case 'f':
		return d.literal(i, "false", False)
	case 'n':
		return d.literal(i, "null", Null)
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return d.number(i)
		}
		return i, errAt(CodeInvalidJSON, i, "unexpected character %q", c)
	}
}

func (d *Doc) literal(i int, lit string, k Kind) (int, error) {
	if len(d.src)-i < len(lit) || string(d.src[i:i+len(lit)]) != lit {
		return i, errAt(CodeInvalidJSON, i, "invalid literal, expected %s", lit)
	}
	id := d.add(k, i)
	nd := &d.nodes[id]
	nd.end, nd.next, nd.flags = int32(i+len(lit)), id+1, flagCanonical
	return i + len(lit), nil
}

func (d *Doc) array(i, depth int) (int, error) {
	if depth > d.maxDepth {
		return i, errAt(CodeTooDeep, i, "nesting deeper than %d", d.maxDepth)
	}
	src := d.src
	id := d.add(Array, i)
	start := i
	n := int32(0)
	canon, size := true, 2 // canonical so far, and the span a canonical array would have
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == ']' {
		i++
	} else {
		for {
			var err error
			el := int32(len(d.nodes))
			if i, err = d.value(i, depth+1); err != nil {
				return i, err
			}
			en := &d.nodes[el]
			canon = canon && en.flags&flagCanonical != 0
			size += int(en.end-en.start) + 1
			n++
			i = skipWS(src, i)
			if i >= len(src) {
				return i, errAt(CodeInvalidJSON, i, "unterminated array")
			}
			if src[i] == ',' {
				i = skipWS(src, i+1)
				continue
			}
			if src[i] == ']' {
				i++
				break
			}
			return i, errAt(CodeInvalidJSON, i, "expected ',' or ']' in array, found %q", src[i])
		}
	}
	if n > 0 {
		size-- // no comma after the last element
	}
	nd := &d.nodes[id]
	nd.end, nd.next, nd.n = int32(i), int32(len(d.nodes)), n
	if canon && i-start == size {
		nd.flags = flagCanonical
	}
	return i, nil
}

func (d *Doc) object(i, depth int) (int, error) {
	if depth > d.maxDepth {
		return i, errAt(CodeTooDeep, i, "nesting deeper than %d", d.maxDepth)
	}
	src := d.src
	id := d.add(Object, i)
	start := i
	base := len(d.stack)
	canon, size := true, 2
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == '}' {
		i++
	} else {
		for {
			if i >= len(src) || src[i] != '"' {
				return i, errAt(CodeInvalidJSON, i, "expected a string key in object")
			}
			key := d.add(String, i)
			j, flags, err := scanString(src, i)
			if err != nil {
				return j, err
			}
			kn := &d.nodes[key]
			kn.end, kn.next, kn.flags = int32(j), key+1, flags
			d.stack = append(d.stack, key)
			i = skipWS(src, j)
			if i >= len(src) || src[i] != ':' {
				return i, errAt(CodeInvalidJSON, i, "expected ':' after object key")
			}
			if i, err = d.value(skipWS(src, i+1), depth+1); err != nil {
				return i, err
			}
			kn, vn := &d.nodes[key], &d.nodes[key+1]
			canon = canon && kn.flags&vn.flags&flagCanonical != 0
			size += int(kn.end-kn.start) + int(vn.end-vn.start) + 2 // ':' and ','
			i = skipWS(src, i)
			if i >= len(src) {
				return i, errAt(CodeInvalidJSON, i, "unterminated object")
			}
			if src[i] == ',' {
				i = skipWS(src, i+1)
				continue
			}
			if src[i] == '}' {
				i++
				break
			}
			return i, errAt(CodeInvalidJSON, i, "expected ',' or '}' in object, found %q", src[i])
		}
	}
	keys := d.stack[base:]
	if len(keys) > 0 {
		size--
	}
	if !d.increasing(keys) {
		// Not strictly increasing: out of order, or a key repeats.
		canon = false
		d.sortKeys(keys)
		for k := 1; k < len(keys); k++ {
			if d.cmpKeys(keys[k-1], keys[k]) == 0 {
				later := max(d.nodes[keys[k-1]].start, d.nodes[keys[k]].start)
				return int(later), errAt(CodeDuplicateKey, int(later), "duplicate object key %q", d.keyText(keys[k]))
			}
		}
	}
	nd := &d.nodes[id]
	nd.first, nd.n = int32(len(d.order)), int32(len(keys))
	nd.end, nd.next = int32(i), int32(len(d.nodes))
	if canon && i-start == size {
		nd.flags = flagCanonical
	}
	d.order = append(d.order, keys...)
	d.stack = d.stack[:base]
	return i, nil
}

// increasing reports whether keys are in strictly increasing order, which is
// both canonical order and proof that no key repeats.
func (d *Doc) increasing(keys []int32) bool {
	for k := 1; k < len(keys); k++ {
		if d.cmpKeys(keys[k-1], keys[k]) >= 0 {
			return false
		}
	}
	return true
}

func (d *Doc) sortKeys(keys []int32) {
	if len(keys) <= 12 {
		for i := 1; i < len(keys); i++ {
			for j := i; j > 0 && d.cmpKeys(keys[j-1], keys[j]) > 0; j-- {
				keys[j-1], keys[j] = keys[j], keys[j-1]
			}
		}
		return
	}
	slices.SortFunc(keys, d.cmpKeys)
}

// cmpKeys orders two string nodes by the UTF-16 code units of their decoded
// values, as RFC 8785 section 3.2.3 requires.
func (d *Doc) cmpKeys(a, b int32) int {
	na, nb := &d.nodes[a], &d.nodes[b]
	if (na.flags|nb.flags)&flagEscaped == 0 {
		x, y := d.src[na.start+1:na.end-1], d.src[nb.start+1:nb.end-1]
		if (na.flags|nb.flags)&flagHigh == 0 {
			return bytes.Compare(x, y) // no bytes where UTF-16 order differs
		}
		return CompareUTF16(x, y)
	}
	d.ka = d.AppendDecoded(d.ka[:0], NodeID(a))
	d.kb = d.AppendDecoded(d.kb[:0], NodeID(b))
	return CompareUTF16(d.ka, d.kb)
}

func (d *Doc) keyText(k int32) string {
	s := string(d.AppendDecoded(nil, NodeID(k)))
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return s
}

// CompareUTF16 orders two valid UTF-8 strings as the sequences of UTF-16 code
// units they encode. It differs from byte order only where a character above
// U+FFFF meets one in U+E000..U+FFFF: UTF-16 puts the former first.
func CompareUTF16[S ~string | ~[]byte](a, b S) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		// Bytes from 0xEE up are lead bytes: 0xEE and 0xEF start U+E000..U+FFFF,
		// 0xF0 and up start supplementary characters (surrogate pairs in UTF-16).
		if x >= 0xEE && y >= 0xEE && (x >= 0xF0) != (y >= 0xF0) {
			if x >= 0xF0 {
				return -1
			}
			return 1
		}
		if x < y {
			return -1
		}
		return 1
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// strSafe marks the bytes a string can hold that need no attention: printable
// ASCII other than '"' and '\\'.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString validates the string starting at src[i] == '"' and returns the
// offset after its closing quote, and its flags: escaped when it holds
// escapes, canonical when those are all as RFC 8785 writes them.
func scanString(src []byte, i int) (end int, flags uint8, err error) {
	j := i + 1
	escaped, canon, high := false, true, false
	for {
		for j+8 <= len(src) && strSafe[src[j]] && strSafe[src[j+1]] && strSafe[src[j+2]] && strSafe[src[j+3]] &&
			strSafe[src[j+4]] && strSafe[src[j+5]] && strSafe[src[j+6]] && strSafe[src[j+7]] {
			j += 8
		}
		for j < len(src) && strSafe[src[j]] {
			j++
		}
		if j >= len(src) {
			return j, 0, errAt(CodeInvalidJSON, i, "unterminated string")
		}
		switch c := src[j]; {
		case c == '"':
			if escaped {
				flags = flagEscaped
			}
			if canon {
				flags |= flagCanonical
			}
			if high {
				flags |= flagHigh
			}
			return j + 1, flags, nil
		case c == '\\':
			escaped = true
			if j+1 >= len(src) {
				return j, 0, errAt(CodeInvalidJSON, j, "unterminated escape")
			}
			switch src[j+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				j += 2
			case '/':
				canon = false
				j += 2
			case 'u':
				r, ok := hex4(src, j+2)
				if !ok {
					return j, 0, errAt(CodeInvalidJSON, j, "invalid \\u escape")
				}
				switch {
				case r >= 0xDC00 && r <= 0xDFFF:
					return j, 0, errAt(CodeLoneSurrogate, j, "low surrogate \\u%04x without a high surrogate before it", r)
				case r >= 0xD800 && r <= 0xDBFF:
					lo, ok := rune(0), false
					if j+7 < len(src) && src[j+6] == '\\' && src[j+7] == 'u' {
						lo, ok = hex4(src, j+8)
					}
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return j, 0, errAt(CodeLoneSurrogate, j, "high surrogate \\u%04x without a low surrogate after it", r)
					}
					canon = false
					j += 12
				default:
					// RFC 8785 escapes only control characters this way, in lowercase.
					canon = canon && r < 0x20 && shortEscape[r] == 0 && lowerHex(src[j+2:j+6])
					j += 6
				}
			default:
				return j, 0, errAt(CodeInvalidJSON, j, "invalid escape \\%c", src[j+1])
			}
		case c < 0x20:
			return j, 0, errAt(CodeInvalidJSON, j, "control character 0x%02x in string", c)
		default:
			high = high || c >= 0xEE
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size <= 1 {
				return j, 0, errAt(CodeInvalidUTF8, j, "invalid UTF-8 byte 0x%02x in string", c)
			}
			j += size
		}
	}
}

// shortEscape maps the control characters RFC 8785 writes with a two-byte
// escape to the escape letter.
var shortEscape = [0x20]byte{'\b': 'b', '\t': 't', '\n': 'n', '\f': 'f', '\r': 'r'}

func lowerHex(h []byte) bool {
	for _, c := range h {
		if c >= 'A' && c <= 'F' {
			return false
		}
	}
	return true
}

func hex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (d *Doc) number(i int) (int, error) {
	src := d.src
	start := i
	if src[i] == '-' {
		i++
	}
	digitsStart := i
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && src[i] >= '1' && src[i] <= '9':
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
	default:
		return i, errAt(CodeInvalidJSON, i, "invalid number")
	}
	intDigits := i - digitsStart
	isInt := true
	if i < len(src) && src[i] == '.' {
		isInt = false
		i++
		j := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == j {
			return i, errAt(CodeInvalidJSON, i, "invalid number: no digits after '.'")
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		isInt = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		j := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == j {
			return i, errAt(CodeInvalidJSON, i, "invalid number: no digits in exponent")
		}
	}
	lit := src[start:i]
	var flags uint8
	switch {
	case string(lit) == "-0":
		// written as 0
	case isInt && intDigits <= 15:
		// Every integer below 10^15 is an exact double, and ES6 prints it as is.
		flags = flagCanonical
	case isInt:
		// A longer integer is accepted only when the double nearest to it is
		// written back as the very same integer; otherwise readers that keep
		// integers exact (Python, Go's json.Number) and readers that use
		// doubles would disagree about what the canonical form says.
		f, _ := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
		var buf [32]byte
		if math.IsInf(f, 0) || string(AppendNumber(buf[:0], f)) != string(lit) {
			return start, errAt(CodeNumberInexact, start, "integer %s cannot be carried exactly by a double", clip(lit))
		}
		flags = flagCanonical
	default:
		f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
		if math.IsInf(f, 0) || (err != nil && f != 0) {
			return start, errAt(CodeNumberOutOfRange, start, "number %s overflows a double", clip(lit))
		}
		if f == 0 && hasNonZeroMantissa(lit) {
			return start, errAt(CodeNumberOutOfRange, start, "number %s underflows to zero", clip(lit))
		}
	}
	id := d.add(Number, start)
	nd := &d.nodes[id]
	nd.end, nd.next, nd.flags = int32(i), id+1, flags
	return i, nil
}

func hasNonZeroMantissa(lit []byte) bool {
	for _, c := range lit {
		if c == 'e' || c == 'E' {
			return false
		}
		if c >= '1' && c <= '9' {
			return true
		}
	}
	return false
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
