package surface

import (
	"fmt"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// KindNamed returns the kind whose String is name ("tool", "prompt",
// "resource", "resourceTemplate", "instructions", "server", "uiContent", "promptMessages").
func KindNamed(name string) (Kind, bool) {
	for k := KindTool; k <= KindPromptMessages; k++ {
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
// manifest. Instructions, the server item, UI contents and prompt messages are never
// listed: such an item is there or not (the server item, UI contents and
// prompt messages only in form v2). It fails on an
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
		case (it.Kind == KindUIContent || it.Kind == KindPromptMessages) && form >= FormV2:
			if it.Name == "" {
				return Digest{}, fmt.Errorf("%s with no name", it.Kind)
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

// uiLink is one UI link of a tool: where in the item, and the URI.
type uiLink struct{ path, uri string }

// uiLinksOf reads the UI links of a decoded tool: _meta.ui.resourceUri (MCP
// Apps), _meta["ui/resourceUri"] (its earlier spelling) and
// _meta["openai/outputTemplate"] (OpenAI Apps SDK), in that order.
func uiLinksOf(v any) []uiLink {
	meta := asMap(asMap(v)["_meta"])
	if meta == nil {
		return nil
	}
	var out []uiLink
	if u, ok := asMap(meta[metaUI])["resourceUri"].(string); ok {
		out = append(out, uiLink{"_meta.ui.resourceUri", u})
	}
	for _, key := range []string{metaUILegacy, metaOpenAITemplate} {
		if u, ok := meta[key].(string); ok {
			out = append(out, uiLink{"_meta." + key, u})
		}
	}
	return out
}

// UILinks returns the URIs of the UI resources a tool links to (MCP Apps'
// _meta.ui.resourceUri and its earlier _meta["ui/resourceUri"], the OpenAI
// Apps SDK's _meta["openai/outputTemplate"]), each once, sorted: what a host
// would render for it. Only items of form v2 carry _meta; a tool of form v1,
// or any other item, links nothing.
func UILinks(it Item) []string {
	if it.Kind != KindTool {
		return nil
	}
	var out []string
	for _, l := range uiLinksOf(decode(it)) {
		out = append(out, l.uri)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// UILink is a tool's link to a UI resource.
type UILink struct {
	Tool string `json:"tool"`
	URI  string `json:"uri"`
}

// UnlistedUILinks returns the UI links of s's tools whose resource s does
// not list (a resource whose uri is the link, exactly): a UI that was never
// listed was never reviewed, and a host would render it. In tool order.
func (s *Surface) UnlistedUILinks() []UILink {
	var out []UILink
	for _, it := range s.Of(KindTool) {
		for _, u := range UILinks(it) {
			if _, ok := s.Find(KindResource, u); !ok {
				out = append(out, UILink{Tool: it.Name, URI: u})
			}
		}
	}
	return out
}
