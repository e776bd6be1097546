package surface

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"
)

var parseSeeds = []string{
	`{"initialize":{"serverInfo":{"name":"s","title":"S","version":"1","icons":[{"src":"https://x/i.png"}]}},"tools":{"pages":[{"tools":[{"name":"a","_meta":{"ui":{"resourceUri":"ui://a"},"progressToken":1},"execution":{"taskSupport":"forbidden"}}]}]},"resources":{"pages":[{"resources":[{"uri":"ui://a","name":"a","annotations":{"lastModified":"x","audience":["user"]},"_meta":{"ui":{"csp":{}}}}]}]}}`,
	`{"tools":[{"name":"a","inputSchema":{"type":"object","required":["y","x"]}}]}`,
	`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"nextCursor":null}}`,
	`{"tools":{"pages":[{"tools":[{"name":"a"}],"nextCursor":"c"},{"tools":[{"name":"b"}]}]},"initialize":{"instructions":"x"}}`,
	`{"prompts":[{"name":"p","arguments":[{"name":"b"},{"name":"a","required":true}]}]}`,
	`{"resources":[{"uri":"file:///x","name":"x"}]}`,
	`{"tools":[{"name":"a"},{"name":"a"}]}`,
	`{"tools":[{"name":"a","description":"\ud800"}]}`,
	`{"tools":{"pages":[{"tools":[{"name":"v","_meta":{"ui":{"resourceUri":"ui://a"}}}]}]},"resources":{"pages":[{"resources":[{"uri":"ui://a","name":"a"}]}]},` +
		`"uiContents":{"ui://a":{"contents":[{"uri":"ui://a","mimeType":"text/html","text":"<p>x</p>","_meta":{"ui":{"csp":{}},"progressToken":1}},{"uri":"ui://a","blob":"AA=="}]}}}`,
	`{"tools":{"pages":[{"tools":[]}]},"prompts":{"pages":[{"prompts":[{"name":"p"}]}]},` +
		`"promptMessages":{"p":{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"hi"}},{"role":"assistant","content":{"type":"image","data":"AA==","mimeType":"image/png"}}],"_meta":{"progressToken":1}}}}`,
}

// FuzzParse: any bytes either parse or fail with a stable code; a surface
// that parses is stable (parsing again gives the same hash) and diffs
// against itself as no drift.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	if raw, err := os.ReadFile("testdata/xxh64-collision/benign.json"); err == nil {
		f.Add(raw)
	}
	memo := NewMarkerMemo(1 << 20) // shared by every input: what one leaves must not answer for another
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Parse(raw, Options{Limits: Limits{MaxDepth: 64}})
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		band, reasons := Rate(s)
		if mband, mreasons := memo.Rate(s); mband != band || !slices.Equal(mreasons, reasons) {
			t.Fatalf("MarkerMemo rates %s %q, Rate %s %q", mband, mreasons, band, reasons)
		}
		again, err := Parse(raw, Options{Limits: Limits{MaxDepth: 64}})
		if err != nil || again.Hash != s.Hash {
			t.Fatalf("parse is not deterministic: %v", err)
		}
		if r := Diff(s, again); r.Drift {
			t.Fatalf("a surface drifts from itself: %+v", r)
		}
		// Form v2 covers more: it may refuse what v1 took (a new field of
		// the wrong type), never with no code; what it takes is
		// deterministic, every item of v1 is one of its items, and the UI
		// links and risk of it are read without a panic.
		v2 := Options{Limits: Limits{MaxDepth: 64}, Form: FormV2}
		s2, err := Parse(raw, v2)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("v2 error without a code: %v", err)
			}
			return
		}
		if again, err := Parse(raw, v2); err != nil || again.Hash != s2.Hash || Diff(s2, again).Drift {
			t.Fatalf("v2 parse is not deterministic: %v", err)
		}
		for _, it := range s.Items {
			if _, ok := s2.Find(it.Kind, it.Name); !ok {
				t.Fatalf("v1 item %s %q is not a v2 item", it.Kind, it.Name)
			}
		}
		_ = s2.UnlistedUILinks()
		_, _ = Rate(s2)
		if r := Diff(s, s2); !r.Drift || r.Changed[0].Changes[0].Kind != ChangeFormChanged {
			t.Fatalf("v1 against v2 does not say the forms differ: %+v", r)
		}
	})
}

// FuzzPermutation builds a random tools/list from the fuzzer's seed, writes
// it twice with tools, object keys and set members in different random
// orders and random whitespace, and checks that the hash does not move.
func FuzzPermutation(f *testing.F) {
	for i := range 8 {
		f.Add(uint64(i), uint64(i*7919))
	}
	f.Fuzz(func(t *testing.T, seed, shuffle uint64) {
		gen := rand.New(rand.NewPCG(seed, 1))
		list := map[string]any{"tools": randomTools(gen)}
		a := writeShuffled(list, rand.New(rand.NewPCG(shuffle, 2)))
		b := writeShuffled(list, rand.New(rand.NewPCG(shuffle, 3)))
		sa, err := Parse(a, Options{})
		if err != nil {
			t.Fatalf("generated list rejected: %v\n%s", err, a)
		}
		sb, err := Parse(b, Options{})
		if err != nil {
			t.Fatalf("generated list rejected: %v\n%s", err, b)
		}
		if sa.Hash != sb.Hash {
			t.Fatalf("permutation moved the hash\n%s\n%s", a, b)
		}
	})
}

// setArray marks arrays whose order is free: they are shuffled by writeShuffled.
type setArray []any

func randomTools(r *rand.Rand) []any {
	n := 1 + r.IntN(6)
	tools := make([]any, 0, n)
	for i := range n {
		tools = append(tools, map[string]any{
			"name":        "tool_" + strconv.Itoa(i),
			"description": randomText(r),
			"inputSchema": randomSchema(r, 3),
			"annotations": map[string]any{"readOnlyHint": r.IntN(2) == 0, "title": randomText(r)},
		})
	}
	return tools
}

func randomText(r *rand.Rand) string {
	words := []string{"read", "a", "file", "é", "\u2028", "\"q\"", "tab\t", "\U0001F602", "\uff01", "<b>", "\\"}
	var b bytes.Buffer
	for range r.IntN(6) {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

func randomSchema(r *rand.Rand, depth int) map[string]any {
	props := map[string]any{}
	var required setArray
	for i := range r.IntN(5) {
		name := fmt.Sprintf("p%d%s", i, []string{"", "é", "\U0001F602", "\uff01"}[r.IntN(4)])
		var s map[string]any
		switch {
		case depth > 0 && r.IntN(3) == 0:
			s = randomSchema(r, depth-1)
		case r.IntN(2) == 0:
			s = map[string]any{"type": setArray{"string", "null"}, "maxLength": json.Number(strconv.Itoa(r.IntN(1000))), "enum": []any{"x", "y", 1.5, nil}}
		default:
			s = map[string]any{"type": "number", "minimum": json.Number("1e-7"), "default": map[string]any{"required": []any{"b", "a"}}}
		}
		props[name] = s
		if r.IntN(2) == 0 {
			required = append(required, name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required}
}

// writeShuffled writes v as JSON with object keys and setArray members in a
// random order and random whitespace; other arrays keep their order.
func writeShuffled(v any, r *rand.Rand) []byte {
	var b bytes.Buffer
	var write func(v any)
	ws := func() {
		b.WriteString([]string{"", " ", "\n", "\t", "\r\n  "}[r.IntN(5)])
	}
	write = func(v any) {
		ws()
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				kb, _ := json.Marshal(k) // escapes <>& as \u003c...: another spelling of the same string
				b.Write(kb)
				ws()
				b.WriteByte(':')
				write(v[k])
			}
			b.WriteByte('}')
		case setArray:
			perm := r.Perm(len(v))
			b.WriteByte('[')
			for i, p := range perm {
				if i > 0 {
					b.WriteByte(',')
				}
				write(v[p])
			}
			b.WriteByte(']')
		case []any:
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				write(e)
			}
			b.WriteByte(']')
		default:
			vb, _ := json.Marshal(v)
			b.Write(vb)
		}
		ws()
	}
	// The tools array itself is a set: shuffle it too.
	if m, ok := v.(map[string]any); ok {
		if tools, ok := m["tools"].([]any); ok {
			v = map[string]any{"tools": setArray(tools)}
		}
	}
	write(v)
	return b.Bytes()
}
