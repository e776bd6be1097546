package canonjson

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
)

// Lazy makes Parse keep some values opaque: when the value of an object
// member named in Keys is an object or array that is already in canonical
// form, Parse validates it as strictly as ever but makes no nodes for its
// insides. Append copies its bytes; navigation sees it as empty (Len 0) and
// Opaque reports it. A value qualifies only if, in addition, every array
// under a member named in Sorted is already sorted as MarkSet would sort it,
// and no member anywhere inside is named in Bail: so a caller that would
// mark such arrays as sets loses nothing by not seeing them.
type Lazy struct {
	Keys   []string
	Sorted []string
	Bail   []string
}

// LazySettings returns what SetLazy last set: the laziness of the Doc's
// parse, for a reader of that parse that must know what it may not see.
func (d *Doc) LazySettings() Lazy { return d.lazy }

// SetLazy configures the laziness of later parses.
func (d *Doc) SetLazy(l Lazy) {
	d.lazy = l
	d.lazyLens = 0
	for _, k := range append(slices.Clone(l.Sorted), l.Bail...) {
		d.lazyLens |= 1 << min(len(k), 63)
	}
}

// Opaque reports whether n is a container whose insides Parse skipped.
func (d *Doc) Opaque(n NodeID) bool { return d.nodes[n].flags&flagOpaque != 0 }

func inList(list []string, key []byte) bool {
	for _, k := range list {
		if string(key) == k {
			return true
		}
	}
	return false
}

// opaque tries to take the container at src[i] as an opaque node. It returns
// false when the value is not canonical, not sorted where it must be, or not
// valid at all: the full parser then takes over and reports any error.
func (p *parser) opaque(i, depth int) (int, bool) {
	end, ok := p.skim(i, depth, false)
	if !ok {
		return i, false
	}
	kind := Object
	if p.src[i] == '[' {
		kind = Array
	}
	id := p.add(kind, i)
	nd := &p.nodes[id]
	nd.end, nd.next, nd.flags = int32(end), id+1, flagCanonical|flagOpaque
	return end, true
}

// skim checks, without making nodes, that the value at src[i] is valid,
// canonical, and sorted where p.lazy asks; set says the value is an array
// whose elements must be in MarkSet order.
func (p *parser) skim(i, depth int, set bool) (int, bool) {
	src := p.src
	if i >= len(src) {
		return i, false
	}
	switch c := src[i]; {
	case c == '{':
		if depth > p.maxDepth {
			return i, false
		}
		i++
		if i < len(src) && src[i] == '}' {
			return i + 1, true
		}
		var prev []byte
		prevHigh := false
		for {
			if i >= len(src) || src[i] != '"' {
				return i, false
			}
			j, ascii := plainString(src, i)
			high := false
			if !ascii {
				var flags uint8
				var err error
				j, flags, err = scanString(src, i)
				if err != nil || flags&(flagCanonical|flagEscaped) != flagCanonical {
					return i, false
				}
				high = flags&flagHigh != 0
			}
			key := src[i+1 : j-1]
			if prev != nil && !keyBefore(src, prev, key, high || prevHigh) {
				return i, false // out of order, or a duplicate
			}
			prev, prevHigh = key, high
			if j >= len(src) || src[j] != ':' {
				return j, false
			}
			set := false
			if p.lazyLens&(1<<min(len(key), 63)) != 0 {
				if inList(p.lazy.Bail, key) {
					return j, false
				}
				set = inList(p.lazy.Sorted, key)
			}
			var ok bool
			if i = j + 1; i < len(src) && src[i] == '"' {
				if i, ok = plainString(src, i); !ok {
					i, ok = p.skim(j+1, depth+1, false)
				}
			} else {
				i, ok = p.skim(i, depth+1, set)
			}
			if !ok || i >= len(src) {
				return i, false
			}
			switch src[i] {
			case ',':
				i++
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		if depth > p.maxDepth {
			return i, false
		}
		i++
		if i < len(src) && src[i] == ']' {
			return i + 1, true
		}
		prevStart, prevEnd := -1, -1
		for {
			start := i
			var ok bool
			if i, ok = p.skim(i, depth+1, false); !ok || i >= len(src) {
				return i, false
			}
			if set && prevStart >= 0 && bytes.Compare(src[prevStart:prevEnd], src[start:i]) > 0 {
				return i, false
			}
			prevStart, prevEnd = start, i
			switch src[i] {
			case ',':
				i++
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '"':
		if j, ok := plainString(src, i); ok {
			return j, true
		}
		j, flags, err := scanString(src, i)
		return j, err == nil && flags&flagCanonical != 0
	case c == 't':
		return i + 4, len(src)-i >= 4 && string(src[i:i+4]) == "true"
	case c == 'f':
		return i + 5, len(src)-i >= 5 && string(src[i:i+5]) == "false"
	case c == 'n':
		return i + 4, len(src)-i >= 4 && string(src[i:i+4]) == "null"
	default:
		// Fast path: a plain integer of 1 to 15 digits, no leading zero, is canonical.
		j := i
		for j < len(src) && j-i < 16 && src[j] >= '0' && src[j] <= '9' {
			j++
		}
		if n := j - i; n > 0 && n <= 15 && (src[i] != '0' || n == 1) &&
			(j == len(src) || (src[j] != '.' && src[j] != 'e' && src[j] != 'E' && (src[j] < '0' || src[j] > '9'))) {
			return j, true
		}
		j, flags, err := scanNumber(src, i, true)
		return j, err == nil && flags&flagCanonical != 0
	}
}

// plainString scans the string at src[i] == '"' fast when it is plain
// printable ASCII without escapes (then valid and canonical); ok is false
// as soon as it is anything else, and scanString must decide.
func plainString(src []byte, i int) (end int, ok bool) {
	j := i + 1
	for j+8 <= len(src) {
		if m := unsafe8(binary.LittleEndian.Uint64(src[j:])); m != 0 {
			j += bits.TrailingZeros64(m) >> 3
			return j + 1, src[j] == '"'
		}
		j += 8
	}
	for j < len(src) && strSafe[src[j]] {
		j++
	}
	return j + 1, j < len(src) && src[j] == '"'
}

// keyBefore reports whether key a sorts strictly before key b; both are
// unescaped string bodies inside src, so neither holds a NUL byte. Most keys
// differ in their first 8 bytes, which are compared as one big-endian word
// with the bytes past each key's end masked to zero.
func keyBefore(src, a, b []byte, high bool) bool {
	if high {
		return CompareUTF16(a, b) < 0
	}
	if cap(a) >= 8 && cap(b) >= 8 { // cap reaches to the end of src: 8 bytes can be loaded
		x := binary.BigEndian.Uint64(a[:8]) & prefixMask(len(a))
		y := binary.BigEndian.Uint64(b[:8]) & prefixMask(len(b))
		if x != y {
			return x < y
		}
		if len(a) <= 8 || len(b) <= 8 {
			return len(a) < len(b)
		}
	}
	return bytes.Compare(a, b) < 0
}

// prefixMask keeps the first n (up to 8) bytes of a big-endian word.
func prefixMask(n int) uint64 {
	if n >= 8 {
		return ^uint64(0)
	}
	return ^(^uint64(0) >> (8 * n))
}
