package surface

import (
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// KindNamed returns the kind whose String is name ("tool", "prompt",
// "resource", "resourceTemplate", "instructions").
func KindNamed(name string) (Kind, bool) {
	for k := KindTool; k <= KindInstructions; k++ {
		if kindInfo[k].name == name {
			return k, true
		}
	}
	return 0, false
}

// HashItems returns the surface hash, under alg, of a surface made of exactly items
// (in any order; their Canonical bytes are not needed) and the listings of
// the kinds listed: the Hash a Surface with those items and listings has.
// It is how a reader of item hashes published by the pipeline checks that
// they are the items of the surface hash they claim to be, without the
// manifest. Instructions are never listed: an instructions item is there
// or not. It fails on an item whose kind is not listed, on a kind listed
// that has no listing, on two items of one kind and name, and on an item
// hashed with another algorithm than alg.
func HashItems(alg Alg, items []Item, listed []Kind) (Digest, error) {
	s := &Surface{Items: slices.Clone(items)}
	for _, k := range listed {
		if k < KindTool || k > KindResourceTemplate {
			return Digest{}, fmt.Errorf("kind %s has no listing", k)
		}
		s.listed[k] = true
	}
	slices.SortFunc(s.Items, func(x, y Item) int {
		if x.Kind != y.Kind {
			return int(x.Kind) - int(y.Kind)
		}
		return canonjson.CompareUTF16(x.Name, y.Name)
	})
	for i, it := range s.Items {
		switch {
		case it.Kind == KindInstructions:
			if it.Name != "" {
				return Digest{}, fmt.Errorf("instructions named %q: instructions have no name", it.Name)
			}
		case it.Kind < KindTool || it.Kind > KindResourceTemplate:
			return Digest{}, fmt.Errorf("item %q of unknown kind %s", it.Name, it.Kind)
		case !s.listed[it.Kind]:
			return Digest{}, fmt.Errorf("%s %q of a kind not listed", it.Kind, it.Name)
		}
		if it.Hash.alg != alg {
			return Digest{}, fmt.Errorf("%s %q hashed with %s, not %s", it.Kind, it.Name, it.Hash.alg, alg)
		}
		if i > 0 && s.Items[i-1].Kind == it.Kind && s.Items[i-1].Name == it.Name {
			return Digest{}, fmt.Errorf("two %s items named %q", it.Kind, it.Name)
		}
	}
	return alg.Sum(appendSurfaceDoc(nil, s)), nil
}
