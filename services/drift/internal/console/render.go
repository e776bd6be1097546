package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// This file turns two versions of an item into rows a template draws side
// by side. It produces data, never markup: the templates escape every
// string, so that attacker-written text can only ever be text.

// Run is a piece of text as drawn: plain text, or one invisible or control
// character drawn as its code point (⟦U+202E⟧).
type Run struct {
	Text      string
	Invisible bool
	Name      string // what the invisible character is, for its title
}

// Frag is a stretch of text with one look: Op is "" (unchanged), "ins"
// (live only) or "del" (approved only); Marker names the marker kind that
// matched there, "" when none.
type Frag struct {
	Op     string
	Marker string
	Runs   []Run
}

// Text is one string as drawn.
type Text []Frag

// Row is one line of the side by side view: a member of the item (its
// path and depth in the tree) with its approved and live values.
type Row struct {
	Depth int
	Key   string
	Path  string
	// Mark is "added", "removed", "changed" or "" (same).
	Mark        string
	Left, Right *Cell
}

// Cell is one side of a row: a node (an object or array, drawn as its
// members' rows below it) or a value.
type Cell struct {
	Node  string // "{…}", "[…]", "" for a value
	Value Text
}

// invisibleName names the characters drawn as code points.
func invisibleName(r rune) string {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return "bidirectional control character"
	case r == 0x200B, r == 0x200C, r == 0x200D, r == 0x2060, r == 0xFEFF:
		return "zero-width character"
	case r >= 0xE0000 && r <= 0xE007F:
		return "tag character (hidden ASCII)"
	case r == 0x00AD:
		return "soft hyphen"
	}
	return "invisible or control character"
}

// shownAsCode reports the characters drawn as their code point: those the
// marker scan calls invisible, every other format (Cf) character, and
// control characters other than tab and newline.
func shownAsCode(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r == utf8.RuneError:
		return true
	case unicode.IsControl(r), surface.Invisible(r):
		return true
	}
	return false
}

// runs splits s into plain text and characters drawn as code points.
func runs(s string) []Run {
	var out []Run
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !shownAsCode(r) {
			i += size
			continue
		}
		if i > start {
			out = append(out, Run{Text: s[start:i]})
		}
		out = append(out, Run{Text: fmt.Sprintf("U+%04X", r), Invisible: true, Name: invisibleName(r)})
		i += size
		start = i
	}
	if start < len(s) {
		out = append(out, Run{Text: s[start:]})
	}
	return out
}

// span is a byte range of a string with a look.
type span struct {
	lo, hi int
	op     string
	marker string
}

// build draws s with diff ops and marker ranges (which may overlap the
// ops) laid over it.
func build(s string, ops []span, markers []span) Text {
	cuts := []int{0, len(s)}
	for _, sp := range ops {
		cuts = append(cuts, sp.lo, sp.hi)
	}
	for _, sp := range markers {
		cuts = append(cuts, sp.lo, sp.hi)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out Text
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		if lo >= hi {
			continue
		}
		f := Frag{}
		for _, sp := range ops {
			if sp.lo <= lo && hi <= sp.hi {
				f.Op = sp.op
			}
		}
		for _, sp := range markers {
			if sp.lo <= lo && hi <= sp.hi {
				f.Marker = sp.marker
			}
		}
		f.Runs = runs(s[lo:hi])
		if n := len(out); n > 0 && out[n-1].Op == f.Op && out[n-1].Marker == f.Marker {
			out[n-1].Runs = append(out[n-1].Runs, f.Runs...)
			continue
		}
		out = append(out, f)
	}
	return out
}

// plain draws s unchanged, with its markers.
func plain(s string, markers []span) Text { return build(s, nil, markers) }

// whole draws s entirely as op (an added or removed value).
func whole(s, op string, markers []span) Text {
	return build(s, []span{{0, len(s), op, ""}}, markers)
}

// words splits s into words and the runs of space between them, with their
// byte offsets.
func words(s string) (toks []string, at []int) {
	start := 0
	for start < len(s) {
		r, n := utf8.DecodeRuneInString(s[start:])
		space := unicode.IsSpace(r)
		end := start + n
		for end < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[end:])
			if unicode.IsSpace(r2) != space {
				break
			}
			end += n2
		}
		toks, at = append(toks, s[start:end]), append(at, start)
		start = end
	}
	return toks, at
}

// maxLCSCells bounds the word diff's table; beyond it the strings are shown
// as replaced whole.
const maxLCSCells = 4 << 20

// wordDiff returns the spans of old that were removed and of new that were
// added, word by word (longest common subsequence).
func wordDiff(old, new string) (del, ins []span) {
	a, aAt := words(old)
	b, bAt := words(new)
	// Trim the common prefix and suffix: most edits are local.
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	sa, sb := len(a), len(b)
	for sa > p && sb > p && a[sa-1] == b[sb-1] {
		sa, sb = sa-1, sb-1
	}
	n, m := sa-p, sb-p
	offA := func(i int) int { // byte offset of token i of old, len at the end
		if i < len(aAt) {
			return aAt[i]
		}
		return len(old)
	}
	offB := func(j int) int {
		if j < len(bAt) {
			return bAt[j]
		}
		return len(new)
	}
	if n == 0 && m == 0 {
		return nil, nil
	}
	if n == 0 || m == 0 || n*m > maxLCSCells {
		if n > 0 {
			del = append(del, span{offA(p), offA(sa), "del", ""})
		}
		if m > 0 {
			ins = append(ins, span{offB(p), offB(sb), "ins", ""})
		}
		return del, ins
	}
	// lcs[i][j]: the longest common subsequence of a[p+i:sa] and b[p+j:sb].
	w := m + 1
	lcs := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[p+i] == b[p+j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	add := func(list []span, lo, hi int, op string) []span {
		if k := len(list); k > 0 && list[k-1].hi == lo {
			list[k-1].hi = hi
			return list
		}
		return append(list, span{lo, hi, op, ""})
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[p+i] == b[p+j]:
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i*w+j+1] >= lcs[(i+1)*w+j]):
			ins = add(ins, offB(p+j), offB(p+j+1), "ins")
			j++
		default:
			del = add(del, offA(p+i), offA(p+i+1), "del")
			i++
		}
	}
	return del, ins
}

// markerSpans finds where the markers reported at path occur in s. A
// marker's match is clipped ("...") and shows invisible characters as
// <U+XXXX>; it is looked for as it can be found.
func markerSpans(s, path string, markers []surface.Change) []span {
	var out []span
	for _, c := range markers {
		if c.Path != path {
			continue
		}
		kind := strings.TrimPrefix(c.Kind, surface.MarkerPrefix)
		if kind == surface.MarkerInvisibleChars {
			var r rune
			if _, err := fmt.Sscanf(c.Detail, "U+%X", &r); err == nil {
				for i, x := range s {
					if x == r {
						out = append(out, span{i, i + utf8.RuneLen(x), "", kind})
					}
				}
			}
			continue
		}
		needle := strings.TrimSuffix(c.Detail, "...")
		if k := strings.Index(needle, "<U+"); k >= 0 {
			needle = needle[:k]
		}
		if needle == "" {
			continue
		}
		for from := 0; from < len(s); {
			k := strings.Index(s[from:], needle)
			if k < 0 {
				break
			}
			out = append(out, span{from + k, from + k + len(needle), "", kind})
			from += k + len(needle)
		}
	}
	return out
}

// decodeItem decodes an item's canonical JSON (numbers kept as written).
func decodeItem(it surface.Item) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(it.Canonical))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding %s %q: %w", it.Kind, it.Name, err)
	}
	return v, nil
}

// maxRows bounds the rows of one item: an absurd schema is cut, and says so.
const maxRows = 2000

// tree lays out old and new (either may be absent) as aligned rows.
// Markers of the live side (the diff's marker_* changes) are highlighted on
// the right; markers already in the approved version are highlighted on
// the left from oldMarkers.
type tree struct {
	rows                  []Row
	newMarkers, oldMarker []surface.Change
	cut                   bool
}

func (t *tree) add(r Row) bool {
	if len(t.rows) >= maxRows {
		t.cut = true
		return false
	}
	t.rows = append(t.rows, r)
	return true
}

// keyPath joins a member name to a path as the marker scan does.
func keyPath(path, key string) string { return surface.KeyPath(path, key) }

func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return "null"
	case bool:
		if v {
			return "true"
		}
		return "false"
	case json.Number:
		return v.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func isNode(v any) (string, bool) {
	switch v.(type) {
	case map[string]any:
		return "{…}", true
	case []any:
		return "[…]", true
	}
	return "", false
}

// one is a cell of one side only: a node, or a value drawn whole as op
// ("" unchanged, "ins", "del") with the markers found at path.
func (t *tree) one(v any, op, path string, markers []surface.Change) *Cell {
	if n, ok := isNode(v); ok {
		return &Cell{Node: n}
	}
	s := scalar(v)
	ms := markerSpans(s, path, markers)
	if op == "" {
		return &Cell{Value: plain(s, ms)}
	}
	return &Cell{Value: whole(s, op, ms)}
}

// walk adds the rows of one member: o and n are its approved and live
// values, inO and inN whether it exists on each side.
func (t *tree) walk(depth int, key, path string, o, n any, inO, inN bool) {
	if t.cut {
		return
	}
	switch {
	case inO && !inN:
		if !t.add(Row{Depth: depth, Key: key, Path: path, Mark: "removed", Left: t.one(o, "del", path, t.oldMarker)}) {
			return
		}
		t.children(depth, path, o, nil, true, false)
		return
	case inN && !inO:
		if !t.add(Row{Depth: depth, Key: key, Path: path, Mark: "added", Right: t.one(n, "ins", path, t.newMarkers)}) {
			return
		}
		t.children(depth, path, nil, n, false, true)
		return
	}
	on, oNode := isNode(o)
	nn, nNode := isNode(n)
	if oNode && nNode && on == nn {
		mark := ""
		if !reflect.DeepEqual(o, n) {
			mark = "changed"
		}
		if !t.add(Row{Depth: depth, Key: key, Path: path, Mark: mark, Left: &Cell{Node: on}, Right: &Cell{Node: nn}}) {
			return
		}
		t.children(depth, path, o, n, true, true)
		return
	}
	if oNode || nNode { // a value became a node or the reverse
		if !t.add(Row{Depth: depth, Key: key, Path: path, Mark: "changed", Left: t.one(o, "del", path, t.oldMarker), Right: t.one(n, "ins", path, t.newMarkers)}) {
			return
		}
		t.children(depth, path, o, n, oNode, nNode)
		return
	}
	os, ns := scalar(o), scalar(n)
	if os == ns && reflect.TypeOf(o) == reflect.TypeOf(n) {
		t.add(Row{Depth: depth, Key: key, Path: path, Left: &Cell{Value: plain(os, markerSpans(os, path, t.oldMarker))},
			Right: &Cell{Value: plain(ns, markerSpans(ns, path, t.newMarkers))}})
		return
	}
	del, ins := wordDiff(os, ns)
	t.add(Row{Depth: depth, Key: key, Path: path, Mark: "changed",
		Left:  &Cell{Value: build(os, del, markerSpans(os, path, t.oldMarker))},
		Right: &Cell{Value: build(ns, ins, markerSpans(ns, path, t.newMarkers))}})
}

// children adds the members of o and n (nodes, or nil when absent on a
// side) one level deeper.
func (t *tree) children(depth int, path string, o, n any, inO, inN bool) {
	om, oIsMap := o.(map[string]any)
	nm, nIsMap := n.(map[string]any)
	if (oIsMap || !inO) && (nIsMap || !inN) && (oIsMap || nIsMap) {
		keys := map[string]bool{}
		for k := range om {
			keys[k] = true
		}
		for k := range nm {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return keyOrder(names[i], names[j]) })
		for _, k := range names {
			ov, inOk := om[k]
			nv, inNk := nm[k]
			t.walk(depth+1, k, keyPath(path, k), ov, nv, inOk, inNk)
		}
		return
	}
	oa, oIsArr := o.([]any)
	na, nIsArr := n.([]any)
	if !oIsArr && !nIsArr {
		return
	}
	if allScalars(oa) && allScalars(na) {
		// A set-like list (required, enum, type): matched by value.
		t.scalarList(depth+1, path+"[]", oa, na, inO && oIsArr, inN && nIsArr)
		return
	}
	for i := 0; i < max(len(oa), len(na)); i++ {
		t.walk(depth+1, fmt.Sprintf("[%d]", i), path+"[]", at(oa, i), at(na, i), i < len(oa), i < len(na))
	}
}

func at(l []any, i int) any {
	if i < len(l) {
		return l[i]
	}
	return nil
}

func allScalars(l []any) bool {
	for _, v := range l {
		if _, ok := isNode(v); ok {
			return false
		}
	}
	return true
}

// scalarList lays out a list of scalars matched by value: those on both
// sides first, in the live order, then the removed, then the added.
func (t *tree) scalarList(depth int, path string, oa, na []any, inO, inN bool) {
	inOld := map[string]bool{}
	for _, v := range oa {
		inOld[scalar(v)] = true
	}
	inNew := map[string]bool{}
	for _, v := range na {
		inNew[scalar(v)] = true
	}
	for _, v := range na {
		if inOld[scalar(v)] {
			t.walk(depth, "·", path, v, v, true, true)
		}
	}
	for _, v := range oa {
		if !inNew[scalar(v)] {
			t.walk(depth, "·", path, v, nil, true, false)
		}
	}
	for _, v := range na {
		if !inOld[scalar(v)] {
			t.walk(depth, "·", path, nil, v, false, true)
		}
	}
}

// keyOrder puts the members a reviewer reads first at the top of an
// object, the rest in name order.
func keyOrder(a, b string) bool {
	ra, rb := rank(a), rank(b)
	if ra != rb {
		return ra < rb
	}
	return a < b
}

var firstKeys = []string{"name", "uri", "uriTemplate", "title", "description", "type", "required", "properties", "inputSchema", "outputSchema", "arguments", "annotations"}

func rank(k string) int {
	if i := slices.Index(firstKeys, k); i >= 0 {
		return i
	}
	return len(firstKeys)
}

// itemRows lays out an item: old or new may be nil (added or removed).
// Markers already in the approved version are found again by scanning for
// the same detail in it (the report lists only new ones).
func itemRows(old, new *surface.Item, changes []surface.Change) (rows []Row, cut bool, err error) {
	var ov, nv any
	if old != nil {
		if ov, err = decodeItem(*old); err != nil {
			return nil, false, err
		}
	}
	if new != nil {
		if nv, err = decodeItem(*new); err != nil {
			return nil, false, err
		}
	}
	var markers []surface.Change
	for _, c := range changes {
		if strings.HasPrefix(c.Kind, surface.MarkerPrefix) {
			markers = append(markers, c)
		}
	}
	t := &tree{newMarkers: markers, oldMarker: markers}
	_, oNode := isNode(ov)
	_, nNode := isNode(nv)
	if (old == nil || oNode) && (new == nil || nNode) {
		t.children(-1, "", ov, nv, old != nil, new != nil)
	} else { // instructions: one string
		t.walk(0, "text", "", ov, nv, old != nil, new != nil)
	}
	return t.rows, t.cut, nil
}
