package canonjson

import (
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
		for i := range n {
			ki, _ := d.Member(obj, i)
			for j := i + 1; j < n; j++ {
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
	if nd.flags&flagEscaped == 0 && ascii(raw) {
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
	if na.flags&flagEscaped == 0 && nb.flags&flagEscaped == 0 && ascii(ra) && ascii(rb) {
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

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// simpleFold is unicode.SimpleFold, named here so that foldRune reads as
// what it does.
var simpleFold = unicode.SimpleFold
