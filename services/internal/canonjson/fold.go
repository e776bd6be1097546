package canonjson

import (
	"encoding/binary"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FoldTwin returns two member names of the object obj that differ but are
// equal under Unicode simple case folding (strings.EqualFold): "name" and
// "Name", or "arguments" and "argumentſ" (U+017F folds to s). A reader that
// matches member names without regard to case, as Go's encoding/json does
// for struct fields, may take either, so such an object cannot be read one
// way only. Exact duplicates never get here: Parse refuses them.
func (d *Doc) FoldTwin(obj NodeID) (a, b string, found bool) {
	n := d.Len(obj)
	if n < 2 {
		return "", "", false
	}
	if n <= 16 {
		// A plain ASCII name (no escape, no byte above 0x7F) folds only to a
		// name of its length whose first bytes, with the 0x20 bit set (which
		// lower-cases ASCII letters), are the same: a signature per name
		// spares most pairs the full comparison.
		var sig [16]uint64
		var plain [16]bool
		for i := range n {
			k, _ := d.Member(obj, i)
			nd := &d.nodes[k]
			if nd.flags&(flagEscaped|flagNonASCII) == 0 {
				plain[i] = true
				sig[i] = foldSig(d.src, int(nd.start)+1, int(nd.end-nd.start)-2)
			}
		}
		for i := range n {
			ki, _ := d.Member(obj, i)
			for j := i + 1; j < n; j++ {
				if plain[i] && plain[j] && sig[i] != sig[j] {
					continue
				}
				kj, _ := d.Member(obj, j)
				if d.keysFold(ki, kj) {
					return d.Text(ki), d.Text(kj), true
				}
			}
		}
		return "", "", false
	}
	seen := make(map[string]NodeID, n)
	for i := range n {
		k, _ := d.Member(obj, i)
		f := FoldKey(d.Text(k))
		if other, ok := seen[f]; ok {
			return d.Text(other), d.Text(k), true
		}
		seen[f] = k
	}
	return "", "", false
}

// foldSig is the signature of the plain ASCII name of n bytes at src[i:]:
// its first 7 bytes with the 0x20 bit set, and its length. Two such names
// that fold to each other have the same signature.
func foldSig(src []byte, i, n int) uint64 {
	var w uint64
	if i+8 <= len(src) {
		w = binary.LittleEndian.Uint64(src[i:])
		if n < 7 {
			w &= 1<<(8*n) - 1
		}
	} else {
		for b, c := range src[i : i+min(n, 7)] {
			w |= uint64(c) << (8 * b)
		}
	}
	w |= 0x20202020202020 & (1<<(8*min(n, 7)) - 1)
	return w&(1<<56-1) | uint64(min(n, 255))<<56
}

// FoldsTo reports whether the member name k differs from want but equals it
// under Unicode simple case folding: a case-insensitive reader takes it for
// want.
func (d *Doc) FoldsTo(k NodeID, want string) bool {
	_, ok := d.FoldsToAny(k, []string{want})
	return ok
}

// FoldsToAny is FoldsTo for several names at once: it returns the first of
// names that the member name k differs from but equals under case folding.
// The name is read once, without allocating for a plain ASCII name.
func (d *Doc) FoldsToAny(k NodeID, names []string) (string, bool) {
	nd := &d.nodes[k]
	raw := d.src[nd.start+1 : nd.end-1]
	if nd.flags&(flagEscaped|flagNonASCII) == 0 {
		for _, name := range names {
			// An ASCII name folds only to a name of its length (the
			// non-ASCII folds of k and s are longer in UTF-8).
			if len(raw) == len(name) && string(raw) != name && strings.EqualFold(string(raw), name) {
				return name, true
			}
		}
		return "", false
	}
	text := d.Text(k)
	for _, name := range names {
		if text != name && strings.EqualFold(text, name) {
			return name, true
		}
	}
	return "", false
}

// keysFold reports whether two distinct member names are equal under case
// folding, without allocating for plain ASCII names.
func (d *Doc) keysFold(a, b NodeID) bool {
	na, nb := &d.nodes[a], &d.nodes[b]
	ra, rb := d.src[na.start+1:na.end-1], d.src[nb.start+1:nb.end-1]
	if (na.flags|nb.flags)&(flagEscaped|flagNonASCII) == 0 {
		return len(ra) == len(rb) && strings.EqualFold(string(ra), string(rb))
	}
	return strings.EqualFold(d.Text(a), d.Text(b))
}

// FoldKey maps s to one representative of its case-folding class: two
// strings have the same FoldKey exactly when strings.EqualFold holds.
func FoldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune returns the smallest rune of r's simple case-folding orbit.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		if r != 'k' && r != 's' {
			return r // k and s share orbits with U+212A and U+017F
		}
	}
	min := r
	for f := simpleFold(r); f != r; f = simpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// simpleFold is unicode.SimpleFold, named here so that foldRune reads as
// what it does.
var simpleFold = unicode.SimpleFold
