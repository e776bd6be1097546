package canonjson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
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
	// LaxNumbers accepts numbers a double cannot carry (number_inexact,
	// number_out_of_range) for readers that only pass bytes on, such as a
	// proxy reading message ids; such a Doc must never be canonicalized.
	LaxNumbers bool
}

// DefaultLimits accept real-world MCP manifests with a wide margin.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxDepth: 128}

const (
	flagEscaped   = 1 << iota // string holds backslash escapes
	flagCanonical             // the source span is already in canonical form
	flagSet                   // array is written with its elements sorted
	flagHigh                  // string holds bytes from 0xEE up (UTF-16 order may differ from byte order)
	flagOpaque                // container parsed without nodes for its insides (see Lazy)
	flagNonASCII              // string holds a byte from 0x80 up (raw, not escaped)
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
	lazy     Lazy
	lazyLens uint64  // bit n set: a Sorted or Bail key has length n
	lax      []int32 // offsets of the numbers only LaxNumbers let through, in order
}

// parser is the state of one Parse. It lives on the stack, so that storing
// its slices needs no write barrier; Parse hands its buffers back to the Doc.
type parser struct {
	src      []byte
	nodes    []node // len is capacity in use; n counts the nodes
	n        int
	order    []int32
	stack    []int32
	ka, kb   []byte
	maxDepth int
	lax      bool
	lazy     *Lazy
	lazyLens uint64
	laxAt    []int32
}

// Parse parses src strictly, replacing what d held.
func (d *Doc) Parse(src []byte, lim Limits) error {
	d.src = src
	d.dirty = d.dirty[:0]
	maxBytes := lim.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultLimits.MaxBytes
	}
	if len(src) > maxBytes || len(src) >= math.MaxInt32 {
		d.nodes, d.lax = d.nodes[:0], d.lax[:0]
		return errAt(CodeTooLarge, 0, "input is %d bytes, over the limit of %d", len(src), maxBytes)
	}
	p := parser{src: src, nodes: d.nodes[:cap(d.nodes)], order: d.order[:0], stack: d.stack[:0],
		ka: d.ka, kb: d.kb, maxDepth: lim.MaxDepth, lazy: &d.lazy, lazyLens: d.lazyLens, lax: lim.LaxNumbers, laxAt: d.lax[:0]}
	if p.maxDepth <= 0 {
		p.maxDepth = DefaultLimits.MaxDepth
	}
	if len(p.nodes) == 0 {
		p.nodes = make([]node, len(src)/8+16)
	}
	i, err := p.value(skipWS(src, 0), 1)
	if err == nil {
		if i = skipWS(src, i); i != len(src) {
			err = errAt(CodeTrailingData, i, "unexpected data after the top-level value")
		}
	}
	if err != nil {
		p.n = 0
	}
	d.nodes, d.order, d.stack, d.ka, d.kb, d.lax = p.nodes[:p.n], p.order, p.stack, p.ka, p.kb, p.laxAt
	return err
}

func skipWS(src []byte, i int) int {
	if i < len(src) && src[i] > ' ' {
		return i
	}
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

func (p *parser) add(k Kind, start int) int32 {
	n := p.n
	if n == len(p.nodes) {
		p.nodes = append(p.nodes, make([]node, n+64)...)
	}
	p.nodes[n] = node{kind: k, start: int32(start)}
	p.n++
	return int32(n)
}

func (p *parser) value(i, depth int) (int, error) {
	src := p.src
	if i >= len(src) {
		return i, errAt(CodeInvalidJSON, i, "unexpected end of input")
	}
	switch c := src[i]; c {
	case '{':
		return p.object(i, depth)
	case '[':
		return p.array(i, depth)
	case '"':
		id := p.add(String, i)
		j, flags, err := scanString(src, i)
		if err != nil {
			return j, err
		}
		nd := &p.nodes[id]
		nd.end, nd.next, nd.flags = int32(j), id+1, flags
		return j, nil
	case 't':
		return p.literal(i, "true", True)
	case 'f':
		return p.literal(i, "false", False)
	case 'n':
		return p.literal(i, "null", Null)
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return p.number(i)
		}
		return i, errAt(CodeInvalidJSON, i, "unexpected character %q", c)
	}
}

func (p *parser) literal(i int, lit string, k Kind) (int, error) {
	if len(p.src)-i < len(lit) || string(p.src[i:i+len(lit)]) != lit {
		return i, errAt(CodeInvalidJSON, i, "invalid literal, expected %s", lit)
	}
	id := p.add(k, i)
	nd := &p.nodes[id]
	nd.end, nd.next, nd.flags = int32(i+len(lit)), id+1, flagCanonical
	return i + len(lit), nil
}

func (p *parser) array(i, depth int) (int, error) {
	if depth > p.maxDepth {
		return i, errAt(CodeTooDeep, i, "nesting deeper than %d", p.maxDepth)
	}
	src := p.src
	id := p.add(Array, i)
	start := i
	n := int32(0)
	canon, size := true, 2 // canonical so far, and the span a canonical array would have
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == ']' {
		i++
	} else {
		for {
			var err error
			el := int32(p.n)
			if i, err = p.value(i, depth+1); err != nil {
				return i, err
			}
			en := &p.nodes[el]
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
	nd := &p.nodes[id]
	nd.end, nd.next, nd.n = int32(i), int32(p.n), n
	if canon && i-start == size {
		nd.flags = flagCanonical
	}
	return i, nil
}

func (p *parser) object(i, depth int) (int, error) {
	if depth > p.maxDepth {
		return i, errAt(CodeTooDeep, i, "nesting deeper than %d", p.maxDepth)
	}
	src := p.src
	id := p.add(Object, i)
	start := i
	base := len(p.stack)
	canon, size := true, 2
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == '}' {
		i++
	} else {
		for {
			if i >= len(src) || src[i] != '"' {
				return i, errAt(CodeInvalidJSON, i, "expected a string key in object")
			}
			key := p.add(String, i)
			j, flags, err := scanString(src, i)
			if err != nil {
				return j, err
			}
			kn := &p.nodes[key]
			kn.end, kn.next, kn.flags = int32(j), key+1, flags
			p.stack = append(p.stack, key)
			i = skipWS(src, j)
			if i >= len(src) || src[i] != ':' {
				return i, errAt(CodeInvalidJSON, i, "expected ':' after object key")
			}
			i = skipWS(src, i+1)
			lazy := false
			if len(p.lazy.Keys) > 0 && i < len(src) && (src[i] == '{' || src[i] == '[') && flags&flagEscaped == 0 &&
				inList(p.lazy.Keys, src[p.nodes[key].start+1:j-1]) {
				i, lazy = p.opaque(i, depth+1)
			}
			if !lazy {
				if i, err = p.value(i, depth+1); err != nil {
					return i, err
				}
			}
			kn, vn := &p.nodes[key], &p.nodes[key+1]
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
	keys := p.stack[base:]
	if len(keys) > 0 {
		size--
	}
	if !p.increasing(keys) {
		// Not strictly increasing: out of order, or a key repeats.
		canon = false
		p.sortKeys(keys)
		for k := 1; k < len(keys); k++ {
			if p.cmpKeys(keys[k-1], keys[k]) == 0 {
				later := max(p.nodes[keys[k-1]].start, p.nodes[keys[k]].start)
				return int(later), errAt(CodeDuplicateKey, int(later), "duplicate object key %q", p.keyText(keys[k]))
			}
		}
	}
	nd := &p.nodes[id]
	nd.first, nd.n = int32(len(p.order)), int32(len(keys))
	nd.end, nd.next = int32(i), int32(p.n)
	if canon && i-start == size {
		nd.flags = flagCanonical
	}
	p.order = append(p.order, keys...)
	p.stack = p.stack[:base]
	return i, nil
}

// increasing reports whether keys are in strictly increasing order, which is
// both canonical order and proof that no key repeats.
func (p *parser) increasing(keys []int32) bool {
	for k := 1; k < len(keys); k++ {
		if p.cmpKeys(keys[k-1], keys[k]) >= 0 {
			return false
		}
	}
	return true
}

func (p *parser) sortKeys(keys []int32) {
	if len(keys) <= 12 {
		for i := 1; i < len(keys); i++ {
			for j := i; j > 0 && p.cmpKeys(keys[j-1], keys[j]) > 0; j-- {
				keys[j-1], keys[j] = keys[j], keys[j-1]
			}
		}
		return
	}
	slices.SortFunc(keys, p.cmpKeys)
}

// cmpKeys orders two string nodes by the UTF-16 code units of their decoded
// values, as RFC 8785 section 3.2.3 requires.
func (p *parser) cmpKeys(a, b int32) int {
	na, nb := &p.nodes[a], &p.nodes[b]
	if (na.flags|nb.flags)&flagEscaped == 0 {
		x, y := p.src[na.start+1:na.end-1], p.src[nb.start+1:nb.end-1]
		if (na.flags|nb.flags)&flagHigh == 0 {
			// No bytes where UTF-16 order differs. Most keys differ in their
			// first 8 bytes, compared as one word as in keyBefore.
			if cap(x) >= 8 && cap(y) >= 8 {
				wx := binary.BigEndian.Uint64(x[:8]) & prefixMask(len(x))
				wy := binary.BigEndian.Uint64(y[:8]) & prefixMask(len(y))
				switch {
				case wx < wy:
					return -1
				case wx > wy:
					return 1
				case len(x) <= 8 || len(y) <= 8:
					return len(x) - len(y)
				}
			}
			return bytes.Compare(x, y)
		}
		return CompareUTF16(x, y)
	}
	p.ka = appendDecoded(p.ka[:0], p.src[na.start+1:na.end-1])
	p.kb = appendDecoded(p.kb[:0], p.src[nb.start+1:nb.end-1])
	return CompareUTF16(p.ka, p.kb)
}

func (p *parser) keyText(k int32) string {
	nd := &p.nodes[k]
	s := string(appendDecoded(nil, p.src[nd.start+1:nd.end-1]))
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

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// unsafe8 returns a mask with the high bit set in each byte of x that is
// not strSafe: 0x80 and up, a control character, '"' or '\\' (SWAR "has
// less than" and "has zero byte" bit tricks). Borrows can only set bits
// above a byte that is truly unsafe, so the lowest set bit is exact.
func unsafe8(x uint64) uint64 {
	lt20 := (x - ones*0x20) &^ x
	y := x ^ (ones * '"')
	z := x ^ (ones * '\\')
	return (lt20 | (y-ones)&^y | (z-ones)&^z | x) & highs
}

// scanString validates the string starting at src[i] == '"' and returns the
// offset after its closing quote, and its flags: escaped when it holds
// escapes, canonical when those are all as RFC 8785 writes them.
func scanString(src []byte, i int) (end int, flags uint8, err error) {
	j := i + 1
	escaped, canon, high, nonASCII := false, true, false, false
	for {
		for j+8 <= len(src) {
			if m := unsafe8(binary.LittleEndian.Uint64(src[j:])); m != 0 {
				j += bits.TrailingZeros64(m) >> 3 // the first byte that needs a look
				break
			}
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
			if nonASCII {
				flags |= flagNonASCII
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
			nonASCII = true
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

func (p *parser) number(i int) (int, error) {
	j, flags, err := scanNumber(p.src, i, p.lax)
	if err != nil {
		var e *Error
		if !p.lax || !errors.As(err, &e) || (e.Code != CodeNumberInexact && e.Code != CodeNumberOutOfRange) {
			return j, err
		}
		j, flags = skipNumber(p.src, i), 0
		p.laxAt = append(p.laxAt, int32(i))
	}
	id := p.add(Number, i)
	nd := &p.nodes[id]
	nd.end, nd.next, nd.flags = int32(j), id+1, flags
	return j, nil
}

// skipNumber returns the end of the number at src[i], which scanNumber has
// found well formed.
func skipNumber(src []byte, i int) int {
	for i < len(src) && (src[i] == '-' || src[i] == '+' || src[i] == '.' || src[i] == 'e' || src[i] == 'E' || (src[i] >= '0' && src[i] <= '9')) {
		i++
	}
	return i
}

// scanNumber validates the number at src[i] and returns the offset after it
// and its flags (canonical when the literal is as ES6 would write it). A
// literal is accepted only when it is exact: its exact decimal value is
// that of the shortest form of the double it converts to, which is what
// RFC 8785 writes (number_inexact otherwise; docs/canonical-form.md). The
// comparison runs only for a literal that is not that form byte for byte.
func scanNumber(src []byte, i int, lax bool) (end int, flags uint8, err error) {
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
		return i, 0, errAt(CodeInvalidJSON, i, "invalid number")
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
			return i, 0, errAt(CodeInvalidJSON, i, "invalid number: no digits after '.'")
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
			return i, 0, errAt(CodeInvalidJSON, i, "invalid number: no digits in exponent")
		}
	}
	lit := src[start:i]
	if string(lit) == "-0" {
		return i, 0, nil // written as 0, like every zero (see below)
	}
	if isInt && intDigits <= 15 {
		// Every integer below 10^15 is an exact double, and ES6 prints it as is.
		return i, flagCanonical, nil
	}
	if belowNormal(lit) {
		// Told from the digits, before ParseFloat: converting a subnormal
		// takes strconv's slow path, hundreds of times the cost of any
		// other literal, which a hostile server would send by the million.
		return start, 0, numberErr(lax, CodeNumberOutOfRange, start, "number %s is below the smallest normal double, 2.2250738585072014e-308", lit)
	}
	f, _ := strconv.ParseFloat(unsafe.String(unsafe.SliceData(lit), len(lit)), 64)
	if math.IsInf(f, 0) {
		return start, 0, numberErr(lax, CodeNumberOutOfRange, start, "number %s overflows a double", lit)
	}
	var buf [32]byte
	short := AppendNumber(buf[:0], f)
	switch {
	case string(short) == string(lit):
		// The fast path: the literal is the canonical form itself.
		flags = flagCanonical
	case f == 0:
		if hasNonZeroMantissa(lit) {
			return start, 0, numberErr(lax, CodeNumberOutOfRange, start, "number %s underflows to zero", lit)
		}
		// A zero written otherwise (-0.0, 0e10, 0.000): written 0. Zero and
		// negative zero compare equal in every reader's arithmetic and in
		// JSON Schema, and RFC 8785 writes both as 0.
	case !sameDecimal(lit, short):
		// The literal names another number than the double every reader
		// that uses doubles reads (and RFC 8785 writes), so readers that
		// keep numbers exact (Python's int and Decimal, Go's json.Number,
		// BigInt and BigDecimal parsers) and readers that use doubles
		// would disagree about what the hashed form means.
		if lax {
			return start, 0, errLaxInexact
		}
		return start, 0, errAt(CodeNumberInexact, start, "number %s is not exactly the double it reads as, %s", clip(lit), string(short))
	}
	return i, flags, nil
}

// sameDecimal reports whether two decimal numbers in JSON's notation (b may
// also have a '+' after its 'e', as ES6 writes) have the same exact value,
// by their digit strings alone: the significant digits (from the first
// non-zero digit to the last, the '.' skipped) must be the same, and so must
// the sign and the power of ten of the first of them. Neither may be zero.
func sameDecimal(a, b []byte) bool {
	x, y := readDecimal(a), readDecimal(b)
	if x.neg != y.neg || x.exp != y.exp || x.first < 0 || y.first < 0 {
		return false
	}
	i, j := x.first, y.first
	for {
		if a[i] == '.' {
			i++
		}
		if b[j] == '.' {
			j++
		}
		if a[i] != b[j] {
			return false
		}
		if i == x.last || j == y.last {
			return i == x.last && j == y.last
		}
		i, j = i+1, j+1
	}
}

// A decimalView is a decimal number string read as ±d.ddd × 10^exp, where
// the digits are s[first..last] without a '.', and neither the first nor
// the last of them is 0; first is -1 when the number is zero.
type decimalView struct {
	neg         bool
	first, last int
	exp         int
}

func readDecimal(s []byte) decimalView {
	v := decimalView{first: -1, last: -1}
	i := 0
	if i < len(s) && s[i] == '-' {
		v.neg = true
		i++
	}
	mantEnd, exp := len(s), 0
	for j := i; j < len(s); j++ {
		if s[j] == 'e' || s[j] == 'E' {
			mantEnd, exp = j, readExponent(s[j+1:])
			break
		}
	}
	point := mantEnd // where the '.' is, or the end of the digits before the exponent
	for j := i; j < mantEnd; j++ {
		switch c := s[j]; {
		case c == '.':
			point = j
		case c != '0':
			if v.first < 0 {
				v.first = j
			}
			v.last = j
		}
	}
	if v.first < 0 {
		return v
	}
	// The power of ten of the first significant digit: the digits between
	// it and the point.
	if v.first < point {
		v.exp = point - v.first - 1 + exp
	} else {
		v.exp = point - v.first + exp
	}
	return v
}

// readExponent reads an exponent's digits with an optional sign. It stops
// growing at 1<<40: the input is under 2^31 bytes, so a literal whose
// exponent is that large overflows or underflows a double whatever its
// digits, and never reaches sameDecimal.
func readExponent(s []byte) int {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	e := 0
	for _, c := range s {
		if e < 1<<40 {
			e = e*10 + int(c-'0')
		}
	}
	if neg {
		return -e
	}
	return e
}

// errLaxInexact and errLaxOutOfRange are what scanNumber returns for a
// literal LaxNumbers lets through: the parse records where it is and goes
// on (StrictIn scans it again for the message), so a page of a million of
// them costs no message each.
var (
	errLaxInexact    = &Error{Code: CodeNumberInexact}
	errLaxOutOfRange = &Error{Code: CodeNumberOutOfRange}
)

// numberErr is a number_out_of_range error, the shared one when lax.
func numberErr(lax bool, code Code, off int, format string, lit []byte) error {
	if lax {
		return errLaxOutOfRange
	}
	return errAt(code, off, format, clip(lit))
}

// minNormal is the significant digits of the smallest normal double's
// shortest form, 2.2250738585072014e-308.
const minNormal = "22250738585072014"

// belowNormal reports whether the decimal literal lit is not zero and its
// magnitude is below 2.2250738585072014e-308, read from its digits alone: a
// subnormal, or a number that underflows to zero. (Between the smallest
// normal double's exact value and its shortest form lie only literals that
// are not the shortest form of the double they read as, which are refused
// anyway.)
func belowNormal(lit []byte) bool {
	v := readDecimal(lit)
	switch {
	case v.first < 0 || v.exp > -308:
		return false
	case v.exp < -308:
		return true
	}
	k := 0
	for i := v.first; i <= v.last; i++ {
		c := lit[i]
		if c == '.' {
			continue
		}
		if k == len(minNormal) {
			return false // the same digits and more: above
		}
		if c != minNormal[k] {
			return c < minNormal[k]
		}
		k++
	}
	return k < len(minNormal) // a prefix of them: below
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
