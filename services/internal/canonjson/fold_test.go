package canonjson

import (
	"strings"
	"testing"
)

func TestFoldTwin(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     bool
	}{
		{"distinct", `{"name":1,"arguments":2}`, false},
		{"one", `{"name":1}`, false},
		{"ascii_case", `{"name":1,"Name":2}`, true},
		{"long_s", `{"arguments":1,"argumentſ":2}`, true},
		{"kelvin", `{"kind":1,"\u212Aind":2}`, true},
		{"escaped", `{"name":1,"N\u0061me":2}`, true},
		{"many_distinct", `{` + members(20, "k") + `}`, false},
		{"many_with_twin", `{` + members(20, "k") + `,"KC":0}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Doc
			if err := d.Parse([]byte(tc.in), Limits{}); err != nil {
				t.Fatal(err)
			}
			a, b, got := d.FoldTwin(Root)
			if got != tc.want {
				t.Fatalf("FoldTwin = %q %q %v, want %v", a, b, got, tc.want)
			}
			if got && !strings.EqualFold(a, b) {
				t.Fatalf("%q and %q do not fold", a, b)
			}
		})
	}
}

func TestFoldsTo(t *testing.T) {
	var d Doc
	if err := d.Parse([]byte(`{"Description":1,"description":2,"de\u017Fcription":3,"other":4}`), Limits{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for i := range d.Len(Root) {
		k, _ := d.Member(Root, i)
		got[d.Text(k)] = d.FoldsTo(k, "description")
	}
	want := map[string]bool{"Description": true, "description": false, "deſcription": true, "other": false}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("FoldsTo(%q) = %v, want %v", k, got[k], v)
		}
	}
}

func TestFoldKeyMatchesEqualFold(t *testing.T) {
	words := []string{"s", "S", "ſ", "k", "K", "K", "ß", "ẞ", "Σ", "σ", "ς", "name", "NAME", "İ", "i", "ı"}
	for _, a := range words {
		for _, b := range words {
			if (FoldKey(a) == FoldKey(b)) != strings.EqualFold(a, b) {
				t.Errorf("FoldKey(%q)==FoldKey(%q) is %v, EqualFold %v", a, b, FoldKey(a) == FoldKey(b), strings.EqualFold(a, b))
			}
		}
	}
}

func members(n int, prefix string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + prefix + string(rune('a'+i)) + `":0`)
	}
	return b.String()
}

func TestFoldsToAny(t *testing.T) {
	var d Doc
	if err := d.Parse([]byte(`{"Result":1,"result":2,"de\u017Fcription":3,"paramſ":4,"other":5,"ID":6}`), Limits{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"id", "result", "description", "params"}
	want := map[string]string{"Result": "result", "result": "", "deſcription": "description", "paramſ": "params", "other": "", "ID": "id"}
	for i := range d.Len(Root) {
		k, _ := d.Member(Root, i)
		got, _ := d.FoldsToAny(k, names)
		if got != want[d.Text(k)] {
			t.Errorf("FoldsToAny(%q) = %q, want %q", d.Text(k), got, want[d.Text(k)])
		}
	}
}

// TestFoldTwinMatchesEqualFold checks FoldTwin (whose small objects are
// screened by a signature of each name) against every pair of names
// compared with strings.EqualFold, on objects of names that differ in case,
// length, position of the difference and ASCII or not.
func TestFoldTwinMatchesEqualFold(t *testing.T) {
	pool := []string{"a", "A", "ab", "aB", "abcdefg", "abcdefG", "abcdefgh", "abcdefgH", "Abcdefgh",
		"abcdefghijk", "abcdefghijK", "k", "K", "\u212a", "s", "\u017f", "@", "`", "[x", "{x", "_", "\x7f"}
	for mask := 1; mask < 1<<12; mask += 7 {
		var names []string
		for i := range pool {
			if mask>>(i%12)&1 != 0 && (i < 12 || mask>>((i+5)%12)&1 != 0) {
				names = append(names, pool[i])
			}
		}
		var want bool
		for i := range names {
			for j := i + 1; j < len(names); j++ {
				want = want || strings.EqualFold(names[i], names[j])
			}
		}
		in := "{"
		for i, n := range names {
			if i > 0 {
				in += ","
			}
			in += `"` + n + `":` + strings.Repeat("1", 1+i%3)
		}
		in += "}"
		var d Doc
		if err := d.Parse([]byte(in), Limits{}); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if a, b, got := d.FoldTwin(Root); got != want {
			t.Errorf("FoldTwin(%s) = %q %q %v, want %v", in, a, b, got, want)
		}
	}
}
