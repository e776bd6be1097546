package surface

import (
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"
)

// Form v2 (docs/adr/0015): every field a host shows or acts on is covered,
// volatile ones are not, and a default written out is no change.

var v2 = Options{Form: FormV2}

// capture2 is a capture of one tool, one resource and an initialize result,
// each with the given extra members (JSON text after a comma, or "").
func capture2(tool, resource, template, prompt, serverInfo string) string {
	return `{"initialize":{"protocolVersion":"2025-11-25","serverInfo":{"name":"srv","version":"1.0.0"` + serverInfo + `}},` +
		`"tools":{"pages":[{"tools":[{"name":"t","inputSchema":{"type":"object"}` + tool + `}]}]},` +
		`"prompts":{"pages":[{"prompts":[{"name":"p"` + prompt + `}]}]},` +
		`"resources":{"pages":[{"resources":[{"uri":"ui://w","name":"w"` + resource + `}]}]},` +
		`"resourceTemplates":{"pages":[{"resourceTemplates":[{"uriTemplate":"file:///{p}","name":"f"` + template + `}]}]}}`
}

type fieldCase struct {
	name                                   string
	tool, resource, template, prompt, info string
}

// TestFormV2Covered: each field form v2 adds moves the hash of its item
// (and so of the surface) under v2, and nothing under v1.
func TestFormV2Covered(t *testing.T) {
	base := capture2("", "", "", "", "")
	cases := []fieldCase{
		{name: "tool icons", tool: `,"icons":[{"src":"https://x/i.png"}]`},
		{name: "tool icon sizes", tool: `,"icons":[{"src":"https://x/i.png","sizes":["48x48"]}]`},
		{name: "tool execution optional", tool: `,"execution":{"taskSupport":"optional"}`},
		{name: "tool execution required", tool: `,"execution":{"taskSupport":"required"}`},
		{name: "tool _meta.ui.resourceUri", tool: `,"_meta":{"ui":{"resourceUri":"ui://w"}}`},
		{name: "tool _meta.ui.visibility", tool: `,"_meta":{"ui":{"visibility":["app"]}}`},
		{name: "tool _meta ui/resourceUri", tool: `,"_meta":{"ui/resourceUri":"ui://w"}`},
		{name: "tool openai/outputTemplate", tool: `,"_meta":{"openai/outputTemplate":"ui://w"}`},
		{name: "tool openai/widgetAccessible", tool: `,"_meta":{"openai/widgetAccessible":true}`},
		{name: "tool openai/toolInvocation/invoking", tool: `,"_meta":{"openai/toolInvocation/invoking":"Working"}`},
		{name: "tool vendor _meta", tool: `,"_meta":{"com.example/x":1}`},
		{name: "tool annotations empty under v1", tool: `,"annotations":{"title":"T"}`},
		{name: "prompt icons", prompt: `,"icons":[{"src":"https://x/p.png"}]`},
		{name: "prompt _meta", prompt: `,"_meta":{"k":"v"}`},
		{name: "resource annotations audience", resource: `,"annotations":{"audience":["user"]}`},
		{name: "resource annotations priority", resource: `,"annotations":{"priority":0.5}`},
		{name: "resource icons", resource: `,"icons":[{"src":"https://x/r.png","theme":"dark"}]`},
		{name: "resource _meta.ui.csp", resource: `,"_meta":{"ui":{"csp":{"connectDomains":["https://evil.example"]}}}`},
		{name: "resource _meta.ui.permissions", resource: `,"_meta":{"ui":{"permissions":{"camera":{}}}}`},
		{name: "resource _meta.ui.domain", resource: `,"_meta":{"ui":{"domain":"a.example"}}`},
		{name: "resource _meta.ui.prefersBorder", resource: `,"_meta":{"ui":{"prefersBorder":true}}`},
		{name: "template annotations", template: `,"annotations":{"audience":["assistant"]}`},
		{name: "template icons", template: `,"icons":[{"src":"https://x/t.png"}]`},
		{name: "template _meta", template: `,"_meta":{"k":1}`},
		{name: "serverInfo title", info: `,"title":"Server"`},
		{name: "serverInfo description", info: `,"description":"Does things"`},
		{name: "serverInfo websiteUrl", info: `,"websiteUrl":"https://srv.example"`},
		{name: "serverInfo icons", info: `,"icons":[{"src":"https://srv.example/i.png"}]`},
	}
	b1, b2 := mustParse(t, base, Options{}), mustParse(t, base, v2)
	for _, c := range cases {
		raw := capture2(c.tool, c.resource, c.template, c.prompt, c.info)
		if c.name == "tool annotations empty under v1" {
			continue // covered by both forms: see TestFormV2Defaults
		}
		if s := mustParse(t, raw, Options{}); s.Hash != b1.Hash {
			t.Errorf("%s: moves the v1 hash", c.name)
		}
		s := mustParse(t, raw, v2)
		if s.Hash == b2.Hash {
			t.Errorf("%s: does not move the v2 hash", c.name)
		}
		changed := 0
		for i := range s.Items {
			if s.Items[i].Hash != b2.Items[i].Hash {
				changed++
			}
		}
		if changed != 1 {
			t.Errorf("%s: %d items changed, want 1", c.name, changed)
		}
	}
	// serverInfo.name, too, is the server item's.
	if mustParse(t, strings.Replace(base, `"srv"`, `"other"`, 1), v2).Hash == b2.Hash {
		t.Error("serverInfo.name does not move the v2 hash")
	}
}

// TestFormV2Excluded: what is volatile by nature moves no hash.
func TestFormV2Excluded(t *testing.T) {
	base := mustParse(t, capture2("", "", "", "", ""), v2)
	for _, c := range []fieldCase{
		{name: "serverInfo.version", info: `,"version":"9.9.9"`}, // replaces nothing: a second version member is a duplicate, so below
		{name: "resource lastModified", resource: `,"annotations":{"lastModified":"2026-01-01T00:00:00Z"}`},
		{name: "template lastModified", template: `,"annotations":{"lastModified":"2026-01-01T00:00:00Z"}`},
		{name: "resource size", resource: `,"size":1234`},
		{name: "progressToken", tool: `,"_meta":{"progressToken":"abc"}`},
		{name: "trace context", tool: `,"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"x=1","baggage":"a=b"}`},
		{name: "related task", prompt: `,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}}`},
		{name: "unknown member", tool: `,"x-vendor":{"a":1}`},
		{name: "serverInfo unknown member", info: `,"build":"123"`},
	} {
		raw := capture2(c.tool, c.resource, c.template, c.prompt, c.info)
		if c.name == "serverInfo.version" {
			raw = strings.Replace(capture2("", "", "", "", ""), `"version":"1.0.0"`, `"version":"9.9.9"`, 1)
		}
		if s := mustParse(t, raw, v2); s.Hash != base.Hash {
			t.Errorf("%s: moves the v2 hash", c.name)
		}
	}
}

// TestFormV2Defaults: a default written out hashes as the default left out.
func TestFormV2Defaults(t *testing.T) {
	for _, group := range [][]string{
		{``, `,"execution":{}`, `,"execution":{"taskSupport":"forbidden"}`, `,"execution":null`},
		{``, `,"icons":[]`, `,"icons":null`},
		{``, `,"_meta":{}`, `,"_meta":{"progressToken":7}`, `,"_meta":null`},
		{``, `,"annotations":{}`},
		{`,"execution":{"taskSupport":"optional"}`, `,"execution":{"taskSupport":"optional"}`},
	} {
		want := mustParse(t, capture2(group[0], "", "", "", ""), v2)
		for _, g := range group[1:] {
			if got := mustParse(t, capture2(g, "", "", "", ""), v2); got.Hash != want.Hash {
				t.Errorf("tool %q hashes unlike %q", g, group[0])
			}
		}
	}
	for _, group := range [][]string{
		{``, `,"annotations":{}`, `,"annotations":{"lastModified":"2026-01-01"}`, `,"icons":[]`, `,"_meta":{}`},
	} {
		want := mustParse(t, capture2("", group[0], group[0], "", ""), v2)
		for _, g := range group[1:] {
			if got := mustParse(t, capture2("", g, g, "", ""), v2); got.Hash != want.Hash {
				t.Errorf("resource and template %q hash unlike %q", g, group[0])
			}
		}
	}
	if a, b := mustParse(t, capture2("", "", "", "", `,"icons":[]`), v2), mustParse(t, capture2("", "", "", "", ""), v2); a.Hash != b.Hash {
		t.Error(`serverInfo "icons":[] hashes unlike no icons`)
	}
	// execution is not a default when taskSupport is anything else, and a
	// non-string taskSupport is kept as it is.
	if a, b := mustParse(t, capture2(`,"execution":{"taskSupport":1}`, "", "", "", ""), v2), mustParse(t, capture2("", "", "", "", ""), v2); a.Hash == b.Hash {
		t.Error(`execution {"taskSupport":1} hashes as no execution`)
	}
}

// TestFormV2Document: the surface document names its form and the server
// item, and HashItemsForm reproduces it.
func TestFormV2Document(t *testing.T) {
	s := mustParse(t, `{"initialize":{"serverInfo":{"name":"srv","version":"1"},"instructions":"hi"},"tools":{"pages":[{"tools":[]}]}}`, v2)
	srv, ok := s.Find(KindServer, "")
	if !ok || string(srv.Canonical) != `{"name":"srv"}` || s.Form() != FormV2 {
		t.Fatalf("server item %q %v, form %s", srv.Canonical, ok, s.Form())
	}
	ins, _ := s.Find(KindInstructions, "")
	doc := `{"instructions":"` + ins.Hash.String() + `","server":"` + srv.Hash.String() + `","surface":"mcpdrift/v2","tools":{}}`
	if string(s.SurfaceDocument()) != doc {
		t.Fatalf("document %s, want %s", s.SurfaceDocument(), doc)
	}
	if sum := sha256.Sum256([]byte(doc)); !slices.Equal(s.Hash.Sum(), sum[:]) {
		t.Fatal("the surface hash is not the hash of the document")
	}
	if got, err := HashItemsForm(SHA256, FormV2, s.Items, []Kind{KindTool}); err != nil || got != s.Hash {
		t.Fatalf("HashItemsForm = %s, %v; want %s", got, err, s.Hash)
	}
	if got, _ := HashItems(SHA256, s.Items[:1], []Kind{KindTool}); got == s.Hash {
		t.Fatal("HashItems (v1) reproduces a v2 hash")
	}
	if _, err := HashItemsForm(SHA256, FormV1, s.Items, []Kind{KindTool}); err == nil {
		t.Fatal("HashItemsForm(v1) took a server item")
	}
	// The same tools in both forms: same item hashes, different surface hashes.
	one := `{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}`
	a, b := mustParse(t, one, Options{}), mustParse(t, one, v2)
	if a.Items[0].Hash != b.Items[0].Hash || a.Hash == b.Hash {
		t.Fatal("an item without v2 fields must hash alike in both forms, and the surfaces differently")
	}
	for f, name := range map[Form]string{FormV1: "mcpdrift/v1", FormV2: "mcpdrift/v2"} {
		if got, ok := FormNamed(name); !ok || got != f || f.String() != name {
			t.Errorf("FormNamed(%q) = %v, %v", name, got, ok)
		}
	}
	if _, ok := FormNamed("v2"); ok {
		t.Error(`FormNamed("v2") accepted`)
	}
	// An unknown form hashes nothing.
	if _, err := Parse([]byte(one), Options{Form: numForms}); !errors.Is(err, &Error{Code: CodeUnknownFormat}) {
		t.Errorf("unknown form: %v", err)
	}
	if _, err := NewBuilder(Options{Form: numForms}).AddPage(KindTool, []byte(one)); err == nil {
		t.Error("unknown form: AddPage hashed")
	}
}

// TestFormV2Builder: AddPage, AddInitialize and AddServer make what Parse
// makes of the capture.
func TestFormV2Builder(t *testing.T) {
	raw := capture2(`,"_meta":{"ui":{"resourceUri":"ui://w"}}`, `,"_meta":{"ui":{"csp":{}}}`, "", "", `,"title":"S"`)
	want := mustParse(t, raw, v2)
	b := NewBuilder(v2)
	init := `{"protocolVersion":"2025-11-25","serverInfo":{"name":"srv","version":"1.0.0","title":"S"}}`
	if err := b.AddInitialize([]byte(init)); err != nil || len(b.LastPage()) != 0 {
		t.Fatalf("AddInitialize: %v %v (no instructions: no item)", err, b.LastPage())
	}
	if err := b.AddServer([]byte(init)); err != nil || len(b.LastPage()) != 1 {
		t.Fatalf("AddServer: %v %v", err, b.LastPage())
	}
	for _, p := range []struct {
		k   Kind
		raw string
	}{
		{KindTool, `{"tools":[{"name":"t","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"ui://w"}}}]}`},
		{KindPrompt, `{"prompts":[{"name":"p"}]}`},
		{KindResource, `{"resources":[{"uri":"ui://w","name":"w","_meta":{"ui":{"csp":{}}}}]}`},
		{KindResourceTemplate, `{"resourceTemplates":[{"uriTemplate":"file:///{p}","name":"f"}]}`},
	} {
		if _, err := b.AddPage(p.k, []byte(p.raw)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.Surface()
	if err != nil || got.Hash != want.Hash {
		t.Fatalf("builder %v %v, capture %s", got, err, want.Hash)
	}
	// In v1 AddServer adds nothing.
	b1 := NewBuilder(Options{})
	if err := b1.AddServer([]byte(init)); err != nil || len(b1.LastPage()) != 0 {
		t.Fatalf("v1 AddServer: %v %v", err, b1.LastPage())
	}
}

// TestFormV2Rejects: the new fields are type-checked and read one way.
func TestFormV2Rejects(t *testing.T) {
	for raw, code := range map[string]Code{
		capture2(`,"icons":{}`, "", "", "", ""):                                           CodeInvalidField,
		capture2(`,"execution":"forbidden"`, "", "", "", ""):                              CodeInvalidField,
		capture2(`,"_meta":[]`, "", "", "", ""):                                           CodeInvalidField,
		capture2("", `,"annotations":[]`, "", "", ""):                                     CodeInvalidField,
		capture2("", "", "", "", `,"title":7`):                                            CodeInvalidField,
		capture2("", "", "", "", `,"icons":"x"`):                                          CodeInvalidField,
		capture2(`,"Icons":[]`, "", "", "", ""):                                           CodeAmbiguousMember,
		capture2(`,"_meta":{"ui":{"resourceUri":"a","ResourceUri":"b"}}`, "", "", "", ""): CodeAmbiguousMember,
		capture2("", "", "", "", `,"Title":"x"`):                                          CodeAmbiguousMember,
		`{"initialize":{"serverInfo":"srv"},"tools":{"pages":[{"tools":[]}]}}`:            CodeInvalidField,
	} {
		_, err := Parse([]byte(raw), v2)
		if !errors.Is(err, &Error{Code: code}) {
			t.Errorf("%s: %v, want %s", raw, err, code)
		}
		if _, err := Parse([]byte(raw), Options{}); err != nil && !strings.Contains(raw, "serverInfo\":\"srv") {
			t.Errorf("v1 refuses what it does not cover: %s: %v", raw, err)
		}
	}
}

func changeKinds(r *Report) []string {
	var out []string
	for _, list := range [][]ItemDiff{r.Added, r.Removed, r.Changed} {
		for _, it := range list {
			for _, c := range it.Changes {
				out = append(out, it.Kind+" "+c.Kind+" "+c.Path+" "+c.Severity.String())
			}
		}
	}
	return out
}

// TestFormV2Diff: the diff names each new field's change, with its risk.
func TestFormV2Diff(t *testing.T) {
	for _, c := range []struct {
		name     string
		old, new string
		want     []string
	}{
		{"gains a UI", capture2("", "", "", "", ""), capture2(`,"_meta":{"ui":{"resourceUri":"ui://w"}}`, "", "", "", ""),
			[]string{"tool ui_link_added _meta.ui.resourceUri high"}},
		{"UI moved", capture2(`,"_meta":{"openai/outputTemplate":"ui://w"}`, `,"_meta":{}`, "", "", ""), capture2(`,"_meta":{"openai/outputTemplate":"ui://w2"}`, "", "", "", ""),
			[]string{"tool ui_link_changed _meta.openai/outputTemplate high", "tool ui_link_unlisted _meta critical"}},
		{"UI dropped", capture2(`,"_meta":{"ui/resourceUri":"ui://w"}`, "", "", "", ""), capture2("", "", "", "", ""),
			[]string{"tool ui_link_removed _meta.ui/resourceUri low"}},
		{"visibility", capture2(`,"_meta":{"ui":{"resourceUri":"ui://w","visibility":["model"]}}`, "", "", "", ""), capture2(`,"_meta":{"ui":{"resourceUri":"ui://w","visibility":["model","app"]}}`, "", "", "", ""),
			[]string{"tool ui_visibility_changed _meta.ui.visibility medium"}},
		{"openai key", capture2("", "", "", "", ""), capture2(`,"_meta":{"openai/widgetAccessible":true}`, "", "", "", ""),
			[]string{"tool ui_meta_changed _meta.openai/widgetAccessible medium"}},
		{"vendor key", capture2(`,"_meta":{"x":1}`, "", "", "", ""), capture2(`,"_meta":{"x":2}`, "", "", "", ""),
			[]string{"tool meta_changed _meta.x medium"}},
		{"csp", capture2("", `,"_meta":{"ui":{"csp":{"connectDomains":[]}}}`, "", "", ""), capture2("", `,"_meta":{"ui":{"csp":{"connectDomains":["https://evil.example"]}}}`, "", "", ""),
			[]string{"resource ui_policy_changed _meta.ui.csp high"}},
		{"border", capture2("", "", "", "", ""), capture2("", `,"_meta":{"ui":{"prefersBorder":true}}`, "", "", ""),
			[]string{"resource ui_meta_changed _meta.ui.prefersBorder medium"}},
		{"icons", capture2("", "", "", "", ""), capture2(`,"icons":[{"src":"https://x/i.png"}]`, "", "", "", ""),
			[]string{"tool icons_changed icons low"}},
		{"execution", capture2(`,"execution":{"taskSupport":"forbidden"}`, "", "", "", ""), capture2(`,"execution":{"taskSupport":"required"}`, "", "", "", ""),
			[]string{"tool execution_changed execution medium"}},
		{"audience", capture2("", `,"annotations":{"audience":["user"]}`, "", "", ""), capture2("", `,"annotations":{"audience":["assistant"]}`, "", "", ""),
			[]string{"resource annotation_changed annotations.audience low"}},
		{"server", capture2("", "", "", "", `,"title":"A"`), capture2("", "", "", "", `,"title":"B","description":"new","websiteUrl":"https://x"`),
			[]string{"server description_changed description medium", "server title_changed title low", "server website_changed websiteUrl medium"}},
		{"resource delisted", capture2(`,"_meta":{"ui":{"resourceUri":"ui://w"}}`, "", "", "", ""),
			strings.Replace(capture2(`,"_meta":{"ui":{"resourceUri":"ui://w"}}`, "", "", "", ""), `"uri":"ui://w"`, `"uri":"ui://other"`, 1),
			[]string{"resource resource_added  low", "resource resource_removed  low", "tool ui_link_unlisted _meta critical"}},
	} {
		r := Diff(mustParse(t, c.old, v2), mustParse(t, c.new, v2))
		got := changeKinds(r)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if r.Benign {
			t.Errorf("%s: benign", c.name)
		}
	}
	// A new tool with a UI is not benign either, and one whose UI is unlisted is critical.
	r := Diff(mustParse(t, `{"tools":[]}`, v2), mustParse(t, `{"tools":[{"name":"t","_meta":{"ui":{"resourceUri":"ui://nowhere"}}}]}`, v2))
	if got := changeKinds(r); !slices.Equal(got, []string{"tool tool_added  low", "tool ui_link_added _meta.ui.resourceUri high", "tool ui_link_unlisted _meta critical"}) || r.Benign {
		t.Errorf("new tool with a UI: %q benign %v", got, r.Benign)
	}
	// Two forms: said so.
	one := `{"tools":[{"name":"a"}]}`
	r = Diff(mustParse(t, one, Options{}), mustParse(t, one, v2))
	if got := changeKinds(r); !slices.Equal(got, []string{"surface form_changed  info"}) || r.Benign {
		t.Errorf("forms: %q", got)
	}
}

// TestUILinks: the links of a tool, the unlisted ones, and the risk band.
func TestUILinks(t *testing.T) {
	s := mustParse(t, `{"tools":{"pages":[{"tools":[
		{"name":"a","_meta":{"ui":{"resourceUri":"ui://a"},"ui/resourceUri":"ui://a","openai/outputTemplate":"ui://b"}},
		{"name":"b","inputSchema":{"type":"object"}}]}]},
		"resources":{"pages":[{"resources":[{"uri":"ui://a","name":"a"}]}]}}`, v2)
	a, _ := s.Find(KindTool, "a")
	b, _ := s.Find(KindTool, "b")
	if got := UILinks(a); !slices.Equal(got, []string{"ui://a", "ui://b"}) {
		t.Fatalf("UILinks(a) = %q", got)
	}
	if got := UILinks(b); got != nil {
		t.Fatalf("UILinks(b) = %q", got)
	}
	if got := s.UnlistedUILinks(); !slices.Equal(got, []UILink{{"a", "ui://b"}}) {
		t.Fatalf("UnlistedUILinks = %v", got)
	}
	band, reasons := Rate(s)
	if band < SeverityHigh || !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, `links the UI "ui://b"`) }) {
		t.Fatalf("Rate = %s %q", band, reasons)
	}
	// In v1 the links are not in the item, so there are none.
	s1 := mustParse(t, `{"tools":[{"name":"a","_meta":{"ui":{"resourceUri":"ui://x"}}}]}`, Options{})
	if got := UILinks(s1.Items[0]); got != nil {
		t.Fatalf("v1 UILinks = %q", got)
	}
}
