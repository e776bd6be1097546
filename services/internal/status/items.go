package status

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// Item is one item of a manifest as the pipeline publishes it (the
// Fingerprint event's ItemHash): its kind ("tool", "prompt", "resource",
// "resourceTemplate", "instructions"), its name (empty for instructions)
// and its hash ("sha256:<hex>", or "sha512:<hex>" for a server whose
// settings say so).
type Item struct {
	Kind string `json:"kind"`
	Name string `json:"name,omitempty"`
	Hash string `json:"hash"`
}

func (it Item) String() string {
	if it.Name == "" {
		return it.Kind
	}
	return it.Kind + " " + it.Name
}

// Items are the item hashes of one surface: every item, and the kinds it
// lists (a kind may be listed with no item in it, which is not the same
// surface as one that does not list the kind). Together they make up the
// surface hash: anyone can check them against it without the manifest
// (Verify).
type Items struct {
	Surface string   `json:"surface"`          // the surface hash they make up
	Listed  []string `json:"listed,omitempty"` // the kinds listed: tool, prompt, resource, resourceTemplate
	Items   []Item   `json:"items"`
}

// Of reports whether its are the items of the surface with the given hash
// (by their label; Verify checks it). Nil is the items of nothing.
func (its *Items) Of(hash string) bool { return its != nil && hash != "" && its.Surface == hash }

// ErrItemsMismatch: item hashes that do not make up the surface hash they
// are labelled with.
var ErrItemsMismatch = errors.New("item hashes do not make up their surface hash")

// listable are the kinds with a listing, in the order Listed is written.
var listable = []surface.Kind{surface.KindTool, surface.KindPrompt, surface.KindResource, surface.KindResourceTemplate}

// NewItems returns the item hashes of the surface with the given hash, from
// the items the fingerprint service published for it. The event does not
// say which kinds were listed with no item in them: of the 16 ways the
// empty kinds could have been listed, the one that makes up the surface
// hash is found (at most 16 hashes of a small document, in each canonical
// form, once per baseline; the surface document names its form, so at
// most one form makes up the hash).
// It fails with ErrItemsMismatch when none does, and on a malformed item.
func NewItems(surfaceHash string, items []Item) (*Items, error) {
	parsed, err := parseItems(items)
	if err != nil {
		return nil, err
	}
	want, err := surface.ParseDigest(surfaceHash)
	if err != nil {
		return nil, fmt.Errorf("surface hash: %w", err)
	}
	var must, may []surface.Kind
	for _, k := range listable {
		if slices.ContainsFunc(parsed, func(it surface.Item) bool { return it.Kind == k }) {
			must = append(must, k)
		} else {
			may = append(may, k)
		}
	}
	for mask := 0; mask < 1<<len(may); mask++ {
		listed := slices.Clone(must)
		for i, k := range may {
			if mask&(1<<i) != 0 {
				listed = append(listed, k)
			}
		}
		got, err := hashItemsAnyForm(want, parsed, listed)
		if err != nil {
			return nil, err
		}
		if got == want {
			out := &Items{Surface: surfaceHash, Items: slices.Clone(items)}
			for _, k := range listable { // in a stable order
				if slices.Contains(listed, k) {
					out.Listed = append(out.Listed, k.String())
				}
			}
			if out.Items == nil {
				out.Items = []Item{}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: %d items, none of the ways their kinds could be listed hashes to %s", ErrItemsMismatch, len(items), surfaceHash)
}

// Verify checks that the items make up their surface hash, and returns
// them parsed: what a reader that must not trust a label (the proxy) uses.
func (its *Items) Verify() ([]surface.Item, error) {
	if its == nil {
		return nil, errors.New("no item hashes")
	}
	parsed, err := parseItems(its.Items)
	if err != nil {
		return nil, err
	}
	listed := make([]surface.Kind, 0, len(its.Listed))
	for _, name := range its.Listed {
		k, ok := surface.KindNamed(name)
		if !ok {
			return nil, fmt.Errorf("listed kind %q is not a kind", name)
		}
		listed = append(listed, k)
	}
	label, err := surface.ParseDigest(its.Surface)
	if err != nil {
		return nil, fmt.Errorf("surface hash: %w", err)
	}
	got, err := hashItemsAnyForm(label, parsed, listed)
	if err != nil {
		return nil, err
	}
	if got != label {
		return nil, fmt.Errorf("%w: they make up %s, labelled %s", ErrItemsMismatch, got, its.Surface)
	}
	return parsed, nil
}

func parseItems(items []Item) ([]surface.Item, error) {
	out := make([]surface.Item, len(items))
	for i, it := range items {
		k, ok := surface.KindNamed(it.Kind)
		if !ok {
			return nil, fmt.Errorf("item %q: kind %q is not a kind", it.Name, it.Kind)
		}
		d, err := surface.ParseDigest(it.Hash)
		if err != nil {
			return nil, fmt.Errorf("item %s: %w", it, err)
		}
		out[i] = surface.Item{Kind: k, Name: it.Name, Hash: d}
	}
	return out, nil
}

// ItemsOf returns the item hashes of a parsed surface.
func ItemsOf(sf *surface.Surface) *Items {
	out := &Items{Surface: sf.Hash.String(), Items: make([]Item, len(sf.Items))}
	for i, it := range sf.Items {
		out.Items[i] = Item{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
	}
	for _, k := range listable {
		if sf.Listed(k) {
			out.Listed = append(out.Listed, k.String())
		}
	}
	return out
}

// hashItemsAnyForm is surface.HashItemsForm in the form whose surface
// document makes up want, when one does (the documents of two forms differ
// in their "surface" member, so no two forms make up one hash), else in
// the newest form that takes the items. Item hashes do not name their
// form; the hash they make up does.
func hashItemsAnyForm(want surface.Digest, parsed []surface.Item, listed []surface.Kind) (surface.Digest, error) {
	var got surface.Digest
	var err error
	for _, f := range []surface.Form{surface.FormV1, surface.FormV2} {
		var h surface.Digest
		var e error
		if h, e = surface.HashItemsForm(want.Alg(), f, parsed, listed); e != nil {
			if err == nil {
				err = e
			}
			continue
		}
		if h == want {
			return h, nil
		}
		got, err = h, nil
	}
	return got, err
}
