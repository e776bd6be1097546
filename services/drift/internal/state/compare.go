package state

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Item is one item of a manifest as the comparisons below see it: its
// kind ("tool", "prompt", ...), its name (empty for instructions) and its
// hash (status.Item, as the fingerprint event carries it).
type Item = status.Item

type itemKey struct{ kind, name string }

// ApprovedVariant is the current baseline of one other listing variant of
// the server.
type ApprovedVariant struct {
	Variant string
	Hash    string // the baseline's surface hash
	Items   []Item
}

// CompareVariant compares the items of a variant's first manifest with
// the approved baselines of the server's other variants: an item matches
// when some baseline holds an item of the same kind and name with the same
// hash. The reference is the baseline sharing the most items with the
// manifest (ties: the variant name first in order). The severity is left
// for the caller, who can diff the reference with the manifest.
func CompareVariant(live []Item, approved []ApprovedVariant) Comparison {
	if len(approved) == 0 {
		return Comparison{}
	}
	defs := map[itemKey]map[string]bool{}
	for _, av := range approved {
		for _, it := range av.Items {
			k := itemKey{it.Kind, it.Name}
			if defs[k] == nil {
				defs[k] = map[string]bool{}
			}
			defs[k][it.Hash] = true
		}
	}
	c := Comparison{Approved: true}
	for _, it := range live {
		if !defs[itemKey{it.Kind, it.Name}][it.Hash] {
			c.Unmatched = append(c.Unmatched, it.String())
		}
	}
	sorted := slices.Clone(approved)
	slices.SortFunc(sorted, func(a, b ApprovedVariant) int { return cmp.Compare(a.Variant, b.Variant) })
	best := -1
	for _, av := range sorted {
		have := make(map[Item]bool, len(av.Items))
		for _, it := range av.Items {
			have[it] = true
		}
		n := 0
		for _, it := range live {
			if have[it] {
				n++
			}
		}
		if n > best {
			best, c.ReferenceVariant, c.ReferenceHash = n, av.Variant, av.Hash
		}
	}
	return c
}

// HistoryNote says why a change that the diff alone calls benign is not,
// given every definition ever approved for the server (all baseline
// versions of all its variants): an item that was added but had been
// approved before (it was removed and comes back), or an item that changed
// and ever had another approved definition than its current baseline's.
// current maps the baseline's items to their hashes. "" means the history
// has nothing against the change.
func HistoryNote(added, changed []Item, current []Item, history []Item) string {
	ever := map[itemKey]map[string]bool{}
	for _, it := range history {
		k := itemKey{it.Kind, it.Name}
		if ever[k] == nil {
			ever[k] = map[string]bool{}
		}
		ever[k][it.Hash] = true
	}
	base := map[itemKey]string{}
	for _, it := range current {
		base[itemKey{it.Kind, it.Name}] = it.Hash
	}
	var notes []string
	for _, it := range added {
		if len(ever[itemKey{it.Kind, it.Name}]) > 0 {
			notes = append(notes, it.String()+" was approved before, removed, and comes back")
		}
	}
	for _, it := range changed {
		k := itemKey{it.Kind, it.Name}
		for h := range ever[k] {
			if h != base[k] {
				notes = append(notes, it.String()+" had another approved definition before")
				break
			}
		}
	}
	if len(notes) == 0 {
		return ""
	}
	slices.Sort(notes)
	return fmt.Sprint(clipList(notes, 5))
}

// View is a server with its hold and every variant's record
// (status.View); History is every baseline version of one variant
// (status.History).
type (
	View    = status.View
	History = status.History
)
