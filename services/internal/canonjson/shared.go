package canonjson

import (
	"fmt"
	"slices"
)

// A Doc parsed once can serve readers with different needs: a proxy parses
// each message it relays with LaxNumbers (ids and params are passed on as
// written), and the engine hashes a list result inside that same parse,
// which needs the numbers a strict parse would have refused. StrictIn and
// Rebase let the second reader use the first reader's parse.

// StrictIn returns the error a strict Parse would have reported for the
// first number inside the value n that only LaxNumbers let through, or nil
// when every number in n is one a double carries exactly.
func (d *Doc) StrictIn(n NodeID) error {
	start, end := d.nodes[n].start, d.nodes[n].end
	i, _ := slices.BinarySearch(d.lax, start)
	if i == len(d.lax) || d.lax[i] >= end {
		return nil
	}
	_, _, err := scanNumber(d.src, int(d.lax[i]), false)
	if err == nil { // cannot happen: the offset was recorded because it failed
		return errAt(CodeInvalidJSON, int(d.lax[i]), "a number the parse let through")
	}
	return err
}

// Source returns the bytes d was parsed from.
func (d *Doc) Source() []byte { return d.src }

// Rebase points d at src, a copy of the bytes it was parsed from (a reader
// that must keep a parse beyond the life of the buffer it came in copies
// the bytes, not the parse). It panics when src is not such a copy.
func (d *Doc) Rebase(src []byte) {
	if len(src) != len(d.src) {
		panic(fmt.Sprintf("canonjson: Rebase onto %d bytes of a Doc parsed from %d", len(src), len(d.src)))
	}
	d.src = src
}
