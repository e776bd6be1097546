package jsonrpc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// splitBoth splits raw as Split and as SplitIn do.
func splitBoth(t *testing.T, raw string) (plain, kept []*Message) {
	t.Helper()
	plain, _, err1 := Split([]byte(raw), Limits{})
	kept, _, err2 := SplitIn(new(canonjson.Doc), []byte(raw), Limits{})
	if err1 != nil || err2 != nil || len(plain) != len(kept) {
		t.Fatalf("Split: %v; SplitIn: %v", err1, err2)
	}
	return plain, kept
}

// TestSplitInRewrites: a rewrite read from the kept parse is the rewrite
// of a fresh parse, alone and inside a batch (where a message does not
// start at the first byte).
func TestSplitInRewrites(t *testing.T) {
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"instructions":"x","serverInfo":{"name":"s"}}}`,
		`[{"jsonrpc":"2.0","method":"n"} , {"jsonrpc":"2.0","id":"a","result":{ "serverInfo":{}, "instructions" : "y" }}]`,
	} {
		plain, kept := splitBoth(t, raw)
		for i := range plain {
			if plain[i].Kind != KindResponse {
				continue
			}
			a, ra, ea := RemoveResultMember(plain[i], "instructions")
			b, rb, eb := RemoveResultMember(kept[i], "instructions")
			if string(a) != string(b) || ra != rb || (ea == nil) != (eb == nil) || !ra {
				t.Errorf("%s: RemoveResultMember %q %v %v, from the kept parse %q %v %v", raw, a, ra, ea, b, rb, eb)
			}
		}
	}
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"k":"secret"}}}`,
		`[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{ "arguments" :{"k":1},"name":"t"}}]`,
	} {
		plain, kept := splitBoth(t, raw)
		for i := range plain {
			if plain[i].Kind != KindRequest {
				continue
			}
			a, ea := ReplaceParamsMember(plain[i], "arguments", []byte(`{}`))
			b, eb := ReplaceParamsMember(kept[i], "arguments", []byte(`{}`))
			if ea != nil || eb != nil || string(a) != string(b) {
				t.Errorf("%s: ReplaceParamsMember %q %v, from the kept parse %q %v", raw, a, ea, b, eb)
			}
		}
	}
}

// TestSplice keeps elements by their spans, inside a batch too.
func TestSplice(t *testing.T) {
	raw := `[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"a"} , {"name":"b"},{"name":"c"} ],"nextCursor":"x"}}]`
	_, kept := splitBoth(t, raw)
	m := kept[1]
	d, res, ok := m.Parsed()
	if !ok {
		t.Fatal("no kept parse")
	}
	arr, _ := d.Get(res, "tools")
	list := Span{d.Offset(arr), d.Offset(arr) + len(d.Raw(arr))}
	var elems []Span
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		elems = append(elems, Span{d.Offset(el), d.Offset(el) + len(d.Raw(el))})
	}
	for _, tc := range []struct {
		keep    []bool
		want    string
		removed int
	}{
		{[]bool{true, true, true}, `{"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"a"} , {"name":"b"},{"name":"c"} ],"nextCursor":"x"}}`, 0},
		{[]bool{true, false, true}, `{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"},{"name":"c"}],"nextCursor":"x"}}`, 1},
		{[]bool{false, false, false}, `{"jsonrpc":"2.0","id":3,"result":{"tools":[],"nextCursor":"x"}}`, 3},
	} {
		out, removed, err := m.Splice(list, elems, func(i int) bool { return tc.keep[i] })
		if err != nil || string(out) != tc.want || removed != tc.removed {
			t.Errorf("keep %v: %q, %d removed, %v; want %q", tc.keep, out, removed, err, tc.want)
		}
	}
	// Spans that are not the message's are refused, never spliced.
	for _, bad := range [][]Span{{{0, 5}}, {{elems[1].Start, elems[0].End}}} {
		if _, _, err := m.Splice(list, bad, func(int) bool { return false }); err == nil {
			t.Errorf("spans %v were spliced", bad)
		}
	}
	if _, _, err := m.Splice(Span{0, len(raw)}, elems, func(int) bool { return false }); err == nil {
		t.Error("a list span outside the message was spliced")
	}
}

// TestDetach: a detached message and its kept parse survive the reuse of
// the buffer they came in.
func TestDetach(t *testing.T) {
	for _, withDoc := range []bool{false, true} {
		buf := []byte(`[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"}]}}]`)
		want := string(buf[strings.Index(string(buf), `{"jsonrpc":"2.0","id"`) : len(buf)-1])
		var msgs []*Message
		var err error
		if withDoc {
			msgs, _, err = SplitIn(new(canonjson.Doc), buf, Limits{})
		} else {
			msgs, _, err = Split(buf, Limits{})
		}
		if err != nil {
			t.Fatal(err)
		}
		m := msgs[1]
		m.Detach()
		copy(buf, bytes.Repeat([]byte{'#'}, len(buf)))
		if string(m.Raw) != want || string(m.ID) != "3" || string(m.Result) != `{"tools":[{"name":"a"}]}` {
			t.Fatalf("withDoc=%t: after reuse Raw %q ID %q Result %q", withDoc, m.Raw, m.ID, m.Result)
		}
		if d, res, ok := m.Parsed(); withDoc && (!ok || d.Len(res) != 1) {
			t.Errorf("the kept parse does not read the copy")
		} else if withDoc {
			arr, _ := d.Get(res, "tools")
			if got := string(d.Raw(arr)); got != `[{"name":"a"}]` {
				t.Errorf("the kept parse reads %q", got)
			}
		}
	}
}
