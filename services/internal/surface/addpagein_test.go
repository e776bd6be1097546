package surface

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// inMessage wraps a list result in a JSON-RPC response and parses it as a
// proxy does (lax numbers, optionally lazy), returning the Doc and the
// result's node.
func inMessage(t *testing.T, result []byte, lazy bool) (*canonjson.Doc, canonjson.NodeID) {
	t.Helper()
	msg := append(append([]byte(`{"jsonrpc":"2.0","id":7,"result":`), result...), '}')
	d := new(canonjson.Doc)
	if lazy {
		d.SetLazy(LazyValues)
	}
	if err := d.Parse(msg, canonjson.Limits{LaxNumbers: true}); err != nil {
		t.Fatalf("parsing the message: %v", err)
	}
	r, ok := d.Get(canonjson.Root, "result")
	if !ok {
		t.Fatal("no result")
	}
	return d, r
}

// TestAddPageInRealCaptures: every page of every real capture hashes the
// same read from a message's parse as from its own, and each item's span
// is exactly the array element it was hashed from.
func TestAddPageInRealCaptures(t *testing.T) {
	paths, err := filepath.Glob("testdata/real/*/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no real captures: %v", err)
	}
	kinds := map[string]Kind{"tools": KindTool, "prompts": KindPrompt, "resources": KindResource, "resourceTemplates": KindResourceTemplate}
	pages := 0
	for _, p := range paths {
		var capture map[string]json.RawMessage
		if err := json.Unmarshal(mustRead(t, p), &capture); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for key, k := range kinds {
			var l struct{ Pages []json.RawMessage }
			if raw, ok := capture[key]; !ok || json.Unmarshal(raw, &l) != nil {
				continue
			}
			for i, page := range l.Pages {
				for _, lazy := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/page%d/lazy=%t", filepath.Base(filepath.Dir(p)), filepath.Base(p), i+1, lazy)
					own := NewBuilder(Options{})
					c1, err1 := own.AddPage(k, page)
					d, r := inMessage(t, page, lazy)
					in := NewBuilder(Options{})
					c2, err2 := in.AddPageIn(k, d, r)
					if err1 != nil || err2 != nil || c1 != c2 {
						t.Fatalf("%s: AddPage %q %v, AddPageIn %q %v", name, c1, err1, c2, err2)
					}
					want, got := own.LastPage(), in.LastPage()
					if len(want) != len(got) {
						t.Fatalf("%s: %d items, want %d", name, len(got), len(want))
					}
					src := d.Source()
					for j := range want {
						if got[j].Name != want[j].Name || got[j].Hash != want[j].Hash {
							t.Errorf("%s: item %d is %s %s, want %s %s", name, j, got[j].Name, got[j].Hash, want[j].Name, want[j].Hash)
						}
						if string(src[got[j].Start:got[j].End]) != string(page[want[j].Start:want[j].End]) {
							t.Errorf("%s: item %d spans differ", name, j)
						}
						var item map[string]any
						if err := json.Unmarshal(src[got[j].Start:got[j].End], &item); err != nil || item[kindInfo[k].nameKey] != got[j].Name {
							t.Errorf("%s: item %d's span is not the item %s: %v", name, j, got[j].Name, err)
						}
					}
					s, e := in.LastList()
					var arr []json.RawMessage
					if err := json.Unmarshal(src[s:e], &arr); err != nil || len(arr) != len(got) {
						t.Errorf("%s: the list span holds %d elements (%v), want %d", name, len(arr), err, len(got))
					}
					pages++
				}
			}
		}
	}
	if pages == 0 {
		t.Fatal("no pages read")
	}
}

// TestAddPageInRefuses: what AddPage refuses, AddPageIn refuses with the
// same code, though the message was parsed with lax numbers.
func TestAddPageInRefuses(t *testing.T) {
	for _, tc := range []struct{ name, result string }{
		{"inexact_integer", `{"tools":[{"name":"a","inputSchema":{"type":"object","maximum":9007199254740993}}]}`},
		{"out_of_range", `{"tools":[{"name":"a","inputSchema":{"type":"object","maximum":1e999}}]}`},
		{"inexact_outside_items", `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"x":9007199254740993}`},
		{"not_object_item", `{"tools":[1]}`},
		{"no_array", `{"tools":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err1 := NewBuilder(Options{}).AddPage(KindTool, []byte(tc.result))
			d, r := inMessage(t, []byte(tc.result), true)
			_, err2 := NewBuilder(Options{}).AddPageIn(KindTool, d, r)
			var e1, e2 *Error
			if !errors.As(err1, &e1) || !errors.As(err2, &e2) || e1.Code != e2.Code {
				t.Fatalf("AddPage: %v; AddPageIn: %v", err1, err2)
			}
		})
	}
	t.Run("too_large", func(t *testing.T) {
		page := `{"tools":[{"name":"a","description":"` + strings.Repeat("x", 200) + `"}]}`
		d, r := inMessage(t, []byte(page), false)
		_, err := NewBuilder(Options{Limits: Limits{MaxBytes: 100}}).AddPageIn(KindTool, d, r)
		var e *Error
		if !errors.As(err, &e) || e.Code != canonjson.CodeTooLarge {
			t.Fatalf("AddPageIn over MaxBytes: %v", err)
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPageItemsHashRealCaptures: the surface hash made from the items a
// proxy hashed page by page inside each message's parse (and from the
// initialize result) is the hash of the capture parsed whole, for every
// real capture, form and hash algorithm (HashItemsForm).
func TestPageItemsHashRealCaptures(t *testing.T) {
	paths, err := filepath.Glob("testdata/real/*/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no real captures: %v", err)
	}
	kinds := []struct {
		key  string
		kind Kind
	}{{"tools", KindTool}, {"prompts", KindPrompt}, {"resources", KindResource}, {"resourceTemplates", KindResourceTemplate}}
	for _, p := range paths {
		for _, opt := range []Options{{}, {Hash: SHA512}, {ExcludeAnnotations: true}, {Form: FormV2}, {Form: FormV2, Hash: SHA512}} {
			raw := mustRead(t, p)
			whole, err := Parse(raw, opt)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			var capture map[string]json.RawMessage
			if err := json.Unmarshal(raw, &capture); err != nil {
				t.Fatal(err)
			}
			var listed []Kind
			var items []Item
			add := func(page []PageItem) {
				for _, it := range page {
					items = append(items, Item{Kind: it.Kind, Name: it.Name, Hash: it.Hash})
				}
			}
			if init, ok := capture["initialize"]; ok {
				d, r := inMessage(t, init, true)
				b := NewBuilder(opt)
				if err := b.AddInitializeIn(d, r); err != nil {
					t.Fatalf("%s: AddInitializeIn: %v", p, err)
				}
				add(b.LastPage())
			}
			for _, k := range kinds {
				var l struct{ Pages []json.RawMessage }
				if r, ok := capture[k.key]; !ok || json.Unmarshal(r, &l) != nil {
					continue
				}
				listed = append(listed, k.kind)
				b := NewBuilder(opt)
				for _, page := range l.Pages {
					d, r := inMessage(t, page, true)
					if _, err := b.AddPageIn(k.kind, d, r); err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					add(b.LastPage())
				}
			}
			got, err := HashItemsForm(opt.Hash, opt.Form, items, listed)
			if err != nil || got != whole.Hash {
				t.Errorf("%s %+v: from the items %s %v, the capture parsed whole %s", p, opt, got, err, whole.Hash)
			}
		}
	}
}

// TestAddPageInLazierParse: a parse lazier than the builder's form allows
// (annotations kept opaque, which form v2 reads inside) is not read in
// place, and the hashes and spans are those of a parse of the form's own.
func TestAddPageInLazierParse(t *testing.T) {
	page := []byte(`{"resources":[{"uri":"file:///a","name":"a","annotations":{"audience":["user"],"lastModified":"2026-01-01T00:00:00Z"}},{"uri":"file:///b","name":"b","annotations":{}}]}`)
	msg := append(append([]byte(`[{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":1,"result":`), page...), "}]"...)
	d := new(canonjson.Doc)
	d.SetLazy(lazyValues) // form v1's: annotations opaque
	if err := d.Parse(msg, canonjson.Limits{LaxNumbers: true}); err != nil {
		t.Fatal(err)
	}
	el := d.Next(d.First(canonjson.Root))
	r, _ := d.Get(el, "result")
	for _, form := range []Form{FormV1, FormV2} {
		own := NewBuilder(Options{Form: form})
		if _, err := own.AddPage(KindResource, page); err != nil {
			t.Fatal(err)
		}
		in := NewBuilder(Options{Form: form})
		if _, err := in.AddPageIn(KindResource, d, r); err != nil {
			t.Fatal(err)
		}
		want, got := own.LastPage(), in.LastPage()
		for i := range want {
			if got[i].Hash != want[i].Hash {
				t.Errorf("form %v: %s hashes %s, want %s", form, got[i].Name, got[i].Hash, want[i].Hash)
			}
			if string(d.Source()[got[i].Start:got[i].End]) != string(page[want[i].Start:want[i].End]) {
				t.Errorf("form %v: the span of %s is not the item", form, got[i].Name)
			}
		}
		s, e := in.LastList()
		if string(d.Source()[s:e]) != string(d.Raw(mustGet(t, d, r, "resources"))) {
			t.Errorf("form %v: the list span is not the array", form)
		}
	}
}

func mustGet(t *testing.T, d *canonjson.Doc, obj canonjson.NodeID, key string) canonjson.NodeID {
	t.Helper()
	n, ok := d.Get(obj, key)
	if !ok {
		t.Fatalf("no %s", key)
	}
	return n
}
