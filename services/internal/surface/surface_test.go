package surface

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

func mustParse(t testing.TB, raw string, opt Options) *Surface {
	t.Helper()
	s, err := Parse([]byte(raw), opt)
	if err != nil {
		t.Fatalf("Parse(%.200s): %v", raw, err)
	}
	return s
}

func TestHashInvariance(t *testing.T) {
	base := `{"tools":[
	  {"name":"read","description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":["integer","null"]}},"required":["path","n"]},"annotations":{"readOnlyHint":true}},
	  {"name":"write","description":"Write a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]}`
	want := mustParse(t, base, Options{}).Hash
	tests := []struct {
		name string
		raw  string
	}{
		{"tools_reordered", `{"tools":[
		  {"name":"write","description":"Write a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},
		  {"name":"read","description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":["integer","null"]}},"required":["path","n"]},"annotations":{"readOnlyHint":true}}]}`},
		{"keys_reordered_and_sets_permuted", `{"tools":[
		  {"annotations":{"readOnlyHint":true},"inputSchema":{"required":["n","path"],"properties":{"n":{"type":["null","integer"]},"path":{"type":"string"}},"type":"object"},"description":"Read a file","name":"read"},
		  {"inputSchema":{"required":["path"],"type":"object","properties":{"path":{"type":"string"}}},"name":"write","description":"Write a file"}]}`},
		{"whitespace_and_escapes", "{ \"tools\" : [\n {\"name\":\"read\",\"description\":\"Read a \\u0066ile\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"n\":{\"type\":[\"integer\",\"null\"]}},\"required\":[\"path\",\"n\"]},\"annotations\":{\"readOnlyHint\":true}},\r\n" +
			"\t{\"name\":\"write\",\"description\":\"Write a file\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}} ] }"},
		{"uncovered_fields_ignored", `{"tools":[
		  {"name":"read","_meta":{"x":1},"icons":[{"src":"a.png"}],"description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":["integer","null"]}},"required":["path","n"]},"annotations":{"readOnlyHint":true}},
		  {"name":"write","description":"Write a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],"ttlMs":5000}`},
		{"jsonrpc_response", `{"jsonrpc":"2.0","id":7,"result":{"tools":[
		  {"name":"read","description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":["integer","null"]}},"required":["path","n"]},"annotations":{"readOnlyHint":true}},
		  {"name":"write","description":"Write a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]}}`},
		{"capture_two_pages", `{"tools":{"pages":[
		  {"tools":[{"name":"write","description":"Write a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],"nextCursor":"p2"},
		  {"tools":[{"name":"read","description":"Read a file","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":["integer","null"]}},"required":["path","n"]},"annotations":{"readOnlyHint":true}}]}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.raw, Options{}).Hash; got != want {
				t.Fatalf("hash moved: got %s, want %s", got, want)
			}
		})
	}
}

func TestHashSensitivity(t *testing.T) {
	base := `{"tools":[{"name":"t","description":"d","inputSchema":{"type":"object","properties":{"m":{"enum":["a","b"],"default":{"required":["x","y"]}}}},"annotations":{"readOnlyHint":true}}]}`
	baseHash := mustParse(t, base, Options{}).Hash
	tests := []struct {
		name string
		raw  string
		opt  Options
		same bool
	}{
		{"enum_order_matters", strings.Replace(base, `["a","b"]`, `["b","a"]`, 1), Options{}, false},
		{"data_named_required_is_not_a_set", strings.Replace(base, `["x","y"]`, `["y","x"]`, 1), Options{}, false},
		{"description_byte", strings.Replace(base, `"d"`, `"d "`, 1), Options{}, false},
		{"annotation_flip", strings.Replace(base, `true`, `false`, 1), Options{}, false},
		{"annotation_flip_excluded", strings.Replace(base, `true`, `false`, 1), Options{ExcludeAnnotations: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := baseHash
			if tt.opt.ExcludeAnnotations {
				want = mustParse(t, base, tt.opt).Hash
			}
			got := mustParse(t, tt.raw, tt.opt).Hash
			if (got == want) != tt.same {
				t.Fatalf("same hash = %v, want %v", got == want, tt.same)
			}
		})
	}
}

func TestSurfaceKinds(t *testing.T) {
	capture := `{"initialize":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"x","version":"1"},"instructions":"Use carefully."},
	  "tools":{"pages":[{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}]},
	  "prompts":{"pages":[{"prompts":[{"name":"p","arguments":[{"name":"b","required":true},{"name":"a"}]}]}]},
	  "resources":{"pages":[{"resources":[{"uri":"file:///a","name":"a","size":10}]}]},
	  "resourceTemplates":{"pages":[{"resourceTemplates":[]}]}}`
	s := mustParse(t, capture, Options{})
	var kinds []string
	for _, it := range s.Items {
		kinds = append(kinds, it.Kind.String()+":"+it.Name)
	}
	if got, want := strings.Join(kinds, " "), "tool:t prompt:p resource:file:///a instructions:"; got != want {
		t.Fatalf("items = %q, want %q", got, want)
	}
	if !s.Listed(KindResourceTemplate) || s.Listed(0) {
		t.Fatalf("resourceTemplates should be listed (empty)")
	}
	p, _ := s.Find(KindPrompt, "p")
	if got, want := string(p.Canonical), `{"arguments":[{"name":"a"},{"name":"b","required":true}],"name":"p"}`; got != want {
		t.Fatalf("prompt canonical = %s, want %s", got, want)
	}
	r, _ := s.Find(KindResource, "file:///a")
	if got, want := string(r.Canonical), `{"name":"a","uri":"file:///a"}`; got != want {
		t.Fatalf("resource canonical (size is volatile, not covered) = %s, want %s", got, want)
	}
	want := `{"instructions":"` + s.Of(KindInstructions)[0].Hash.String() + `","prompts":{"p":"` + p.Hash.String() +
		`"},"resourceTemplates":{},"resources":{"file:///a":"` + r.Hash.String() + `"},"surface":"mcpdrift/v1","tools":{"t":"` +
		s.Of(KindTool)[0].Hash.String() + `"}}`
	if got := string(s.SurfaceDocument()); got != want {
		t.Fatalf("surface document\n got %s\nwant %s", got, want)
	}
}

func TestParseRejects(t *testing.T) {
	tool := func(body string) string { return `{"tools":[` + body + `]}` }
	deep := `{"type":"string"}`
	for range 70 {
		deep = `{"type":"object","properties":{"a":` + deep + `}}`
	}
	tests := []struct {
		name string
		raw  string
		opt  Options
		code Code
	}{
		{"not_json", `{"tools":[`, Options{}, "invalid_json"},
		{"top_level_array", `[]`, Options{}, CodeUnknownFormat},
		{"no_list", `{"foo":1}`, Options{}, CodeUnknownFormat},
		{"duplicate_tool_name", tool(`{"name":"a"},{"name":"b"},{"name":"a"}`), Options{}, CodeDuplicateItem},
		{"duplicate_tool_across_pages", `{"tools":{"pages":[{"tools":[{"name":"a"}],"nextCursor":"x"},{"tools":[{"name":"a"}]}]}}`, Options{}, CodeDuplicateItem},
		{"duplicate_json_key_in_tool", tool(`{"name":"a","description":"safe","description":"evil"}`), Options{}, "duplicate_key"},
		{"duplicate_json_key_escaped", tool(`{"name":"a","n\u0061me":"b"}`), Options{}, "duplicate_key"},
		{"invalid_utf8", tool("{\"name\":\"a\",\"description\":\"\xc3\x28\"}"), Options{}, "invalid_utf8"},
		{"lone_surrogate", tool(`{"name":"a","description":"\udc00"}`), Options{}, "lone_surrogate"},
		{"too_deep", tool(`{"name":"a","inputSchema":` + deep + `}`), Options{}, "too_deep"},
		{"too_large", tool(`{"name":"a","description":"` + strings.Repeat("x", 2000) + `"}`), Options{Limits: Limits{MaxBytes: 1000}}, "too_large"},
		{"too_many_items", tool(`{"name":"a"},{"name":"b"},{"name":"c"}`), Options{Limits: Limits{MaxItems: 2}}, CodeTooManyItems},
		{"tool_not_object", tool(`"read_file"`), Options{}, CodeItemNotObject},
		{"tool_without_name", tool(`{"description":"x"}`), Options{}, CodeMissingName},
		{"tool_name_empty", tool(`{"name":""}`), Options{}, CodeMissingName},
		{"tool_name_number", tool(`{"name":7}`), Options{}, CodeMissingName},
		{"description_not_string", tool(`{"name":"a","description":["x"]}`), Options{}, CodeInvalidField},
		{"schema_not_object", tool(`{"name":"a","inputSchema":"object"}`), Options{}, CodeInvalidField},
		{"number_inexact", tool(`{"name":"a","inputSchema":{"maximum":9007199254740993}}`), Options{}, "number_inexact"},
		{"number_overflow", tool(`{"name":"a","inputSchema":{"maximum":1e999}}`), Options{}, "number_out_of_range"},
		{"incomplete_single_page", `{"tools":[{"name":"a"}],"nextCursor":"more"}`, Options{}, CodeIncomplete},
		{"incomplete_capture", `{"tools":{"pages":[{"tools":[{"name":"a"}],"nextCursor":"more"}]}}`, Options{}, CodeIncomplete},
		{"capture_page_after_last", `{"tools":{"pages":[{"tools":[{"name":"a"}]},{"tools":[{"name":"b"}]}]}}`, Options{}, CodeInvalidCapture},
		{"capture_unknown_member", `{"tools":{"pages":[{"tools":[]}]},"tool":{}}`, Options{}, CodeInvalidCapture},
		{"capture_without_pages", `{"tools":{"page":[]}}`, Options{}, CodeInvalidCapture},
		{"capture_without_tools", `{"initialize":{"instructions":"x"},"prompts":{"pages":[{"prompts":[]}]}}`, Options{}, CodeMissingTools},
		{"prompt_argument_not_object", `{"tools":{"pages":[{"tools":[]}]},"prompts":{"pages":[{"prompts":[{"name":"p","arguments":[7]}]}]}}`, Options{}, CodeInvalidField},
		{"prompt_argument_without_name", `{"prompts":[{"name":"p","arguments":[{"description":"x"}]}]}`, Options{}, CodeMissingName},
		{"jsonrpc_error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`, Options{}, CodeJSONRPCError},
		{"cursor_not_string", `{"tools":[],"nextCursor":5}`, Options{}, CodeInvalidField},
		{"instructions_not_string", `{"protocolVersion":"2025-06-18","instructions":{"x":1}}`, Options{}, CodeInvalidField},
		{"resource_without_uri", `{"resources":[{"name":"a"}]}`, Options{}, CodeMissingName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(tt.raw), tt.opt)
			if err == nil {
				t.Fatalf("Parse accepted it: %s", s.Hash)
			}
			if got := CodeOf(err); got != tt.code {
				t.Fatalf("code = %q (%v), want %q", got, err, tt.code)
			}
			if !strings.HasPrefix(err.Error(), string(tt.code)+": ") {
				t.Fatalf("error %q does not lead with its code", err)
			}
		})
	}
}

func TestErrorsIs(t *testing.T) {
	_, err := Parse([]byte(`{"tools":[{"name":"a"},{"name":"a"}]}`), Options{})
	if !errors.Is(err, &Error{Code: CodeDuplicateItem}) {
		t.Fatalf("errors.Is(%v, duplicate_item) = false", err)
	}
}

func TestRealisticLimits(t *testing.T) {
	// 10,000 tools in one listing and a manifest over 8 MiB are accepted by default.
	var b bytes.Buffer
	b.WriteString(`{"tools":[`)
	pad := strings.Repeat("lorem ipsum ", 70)
	for i := range 10_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%05d","description":"%s","inputSchema":{"type":"object","properties":{"q":{"type":"string","maxLength":%d}},"required":["q"]}}`, i, pad, i+1)
	}
	b.WriteString(`]}`)
	if b.Len() < 8<<20 {
		t.Fatalf("test manifest is %d bytes, want over 8 MiB", b.Len())
	}
	s, err := Parse(b.Bytes(), Options{})
	if err != nil {
		t.Fatalf("Parse of a %d-byte, 10,000-tool manifest: %v", b.Len(), err)
	}
	if n := len(s.Of(KindTool)); n != 10_000 {
		t.Fatalf("got %d tools, want 10000", n)
	}
}

func TestBuilderPagesMatchCapture(t *testing.T) {
	pages := []string{
		`{"tools":[{"name":"b"}],"nextCursor":"c1"}`,
		`{"tools":[{"name":"a","title":"A"}]}`,
	}
	b := NewBuilder(Options{})
	for i, p := range pages {
		cur, err := b.AddPage(KindTool, []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if (cur == "") != (i == len(pages)-1) {
			t.Fatalf("page %d: cursor %q", i, cur)
		}
	}
	if err := b.AddInitialize([]byte(`{"instructions":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Surface()
	if err != nil {
		t.Fatal(err)
	}
	want := mustParse(t, `{"initialize":{"instructions":"hi"},"tools":{"pages":[`+pages[0]+`,`+pages[1]+`]}}`, Options{})
	if got.Hash != want.Hash {
		t.Fatalf("builder %s != capture %s", got.Hash, want.Hash)
	}
	// Reuse: the first surface must not change when the builder builds another.
	b.Reset()
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"zzz","description":"other"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Surface(); err != nil {
		t.Fatal(err)
	}
	if again := mustParse(t, `{"initialize":{"instructions":"hi"},"tools":{"pages":[`+pages[0]+`,`+pages[1]+`]}}`, Options{}); again.Hash != got.Hash || string(got.Items[0].Canonical) != `{"name":"a","title":"A"}` {
		t.Fatalf("surface changed after builder reuse: %s", got.Items[0].Canonical)
	}
}

func TestDigestText(t *testing.T) {
	s := mustParse(t, `{"tools":[]}`, Options{})
	d, err := ParseDigest(s.Hash.String())
	if err != nil || d != s.Hash {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "sha256:", "xxh64:611a15fc65a7fe71", "sha256:" + strings.Repeat("G", 64), "sha256:" + strings.Repeat("A", 64)} {
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) accepted", bad)
		}
	}
}

func TestBuilderErrorSticks(t *testing.T) {
	b := NewBuilder(Options{})
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"ok"},{"description":"no name"}]}`)); CodeOf(err) != CodeMissingName {
		t.Fatalf("AddPage: %v", err)
	}
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"later"}]}`)); CodeOf(err) != CodeMissingName {
		t.Fatalf("a page after a failed one: %v, want the first error again", err)
	}
	if s, err := b.Surface(); err == nil {
		t.Fatalf("a failed builder produced a surface with %d items", len(s.Items))
	}
	b.Reset()
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[]}`)); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
}

func TestBuilderTotalLimit(t *testing.T) {
	b := NewBuilder(Options{Limits: Limits{MaxTotalBytes: 100}})
	page := []byte(`{"tools":[{"name":"` + strings.Repeat("a", 40) + `"}],"nextCursor":"x"}`)
	var err error
	for range 3 {
		if _, err = b.AddPage(KindTool, page); err != nil {
			break
		}
	}
	if CodeOf(err) != "too_large" {
		t.Fatalf("pages past MaxTotalBytes: %v", err)
	}
}

func TestNullFieldsAreAbsent(t *testing.T) {
	a := mustParse(t, `{"tools":[{"name":"t","title":null,"description":null,"outputSchema":null,"annotations":null}]}`, Options{})
	b := mustParse(t, `{"tools":[{"name":"t"}]}`, Options{})
	if a.Hash != b.Hash {
		t.Fatal("null covered fields changed the hash")
	}
}

// TestWeakHashCollides shows why the fingerprint is SHA-256: the benign and
// the poisoned manifest canonicalize to bytes with the same xxh64, while
// their fingerprints differ.
func TestWeakHashCollides(t *testing.T) {
	var sums []uint64
	var hashes []Digest
	for _, name := range []string{"benign.json", "poisoned.json"} {
		raw, err := os.ReadFile("testdata/xxh64-collision/" + name)
		if err != nil {
			t.Fatal(err)
		}
		canon, err := canonjson.Canonicalize(raw)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, xxhash.Sum64(canon))
		hashes = append(hashes, mustParse(t, string(raw), Options{}).Hash)
	}
	if sums[0] != sums[1] || fmt.Sprintf("%016x", sums[0]) != "611a15fc65a7fe71" {
		t.Fatalf("xxh64 %016x and %016x: the fixture no longer collides", sums[0], sums[1])
	}
	if hashes[0] == hashes[1] {
		t.Fatal("SHA-256 fingerprints of different manifests are equal")
	}
}

func TestLastPage(t *testing.T) {
	b := NewBuilder(Options{})
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"z"},{"name":"a"}],"nextCursor":"c"}`)); err != nil {
		t.Fatal(err)
	}
	first := b.LastPage()
	if _, err := b.AddPage(KindTool, []byte(`{"tools":[{"name":"m"}]}`)); err != nil {
		t.Fatal(err)
	}
	second := b.LastPage()
	s, err := b.Surface()
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || first[0].Name != "z" || first[1].Name != "a" || len(second) != 1 || second[0].Name != "m" {
		t.Fatalf("pages: %+v %+v", first, second)
	}
	if it, _ := s.Find(KindTool, "z"); it.Hash != first[0].Hash {
		t.Fatal("a page item's hash differs from the surface's")
	}
}
