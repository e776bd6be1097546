package surface

import (
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// KindNamed returns the kind whose String is name ("tool", "prompt",
// "resource", "resourceTemplate", "instructions", "server").
func KindNamed(name string) (Kind, bool) {
	for k := KindTool; k <= KindServer; k++ {
		if kindInfo[k].name == name {
			return k, true
		}
	}
	return 0, false
}

// HashItems is HashItemsForm in form v1.
func HashItems(alg Alg, items []Item, listed []Kind) (Digest, error) {
	return HashItemsForm(alg, FormV1, items, listed)
}

// HashItemsForm returns the surface hash, under alg and form, of a surface made of exactly items
// (in any order; their Canonical bytes are not needed) and the listings of
// the kinds listed: the Hash a Surface with those items and listings has.
// It is how a reader of item hashes published by the pipeline checks that
// they are the items of the surface hash they claim to be, without the
// manifest. Instructions and the server item are never listed: such an
// item is there or not (the server item only in form v2). It fails on an
// item whose kind is not listed, on a kind listed that has no listing, on
// two items of one kind and name, and on an item hashed with another
// algorithm than alg.
func HashItemsForm(alg Alg, form Form, items []Item, listed []Kind) (Digest, error) {
	if form >= numForms {
		return Digest{}, fmt.Errorf("unknown form %s", form)
	}
	s := &Surface{Items: slices.Clone(items), form: form}
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
		case it.Kind == KindInstructions || (it.Kind == KindServer && form >= FormV2):
			if it.Name != "" {
				return Digest{}, fmt.Errorf("%s named %q: it has no name", it.Kind, it.Name)
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
