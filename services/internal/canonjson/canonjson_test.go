package canonjson

import (
	"bytes"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

func TestRFC8785Vectors(t *testing.T) {
	inputs, err := filepath.Glob("testdata/rfc8785/input/*.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no RFC 8785 vectors under testdata/rfc8785: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata/rfc8785/output", filepath.Base(in)))
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := refusedVectors[name]; ok {
				// We refuse what RFC 8785 rounds; the rest of the vector
				// must still come out as the RFC says.
				if _, err := Canonicalize(src); !errors.Is(err, &Error{Code: r.code}) {
					t.Fatalf("Canonicalize = %v, want %s", err, r.code)
				}
				src = bytes.Replace(src, []byte(r.lit), []byte(r.exact), 1)
			}
			got, err := Canonicalize(src)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("canonical form differs\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// refusedVectors are the RFC 8785 vectors whose input we refuse: a literal
// whose exact value is not the double it reads as, which RFC 8785 rounds
// and we refuse (number_inexact, docs/canonical-form.md). exact is the
// literal written as the value RFC 8785 writes, which we accept.
var refusedVectors = map[string]struct {
	code       Code
	lit, exact string
}{
	"values": {CodeNumberInexact, "333333333.33333329", "333333333.3333333"},
}

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"whitespace", " { \"b\" : [ 1 , 2 ] ,\n\t\"a\" : null } ", `{"a":null,"b":[1,2]}`},
		{"negative_zero", `[-0, -0.0, 0e10]`, `[0,0,0]`},
		{"exponents", `[1e21, 1e20, 1e-6, 1e-7, 123e-9, -5E+2]`, `[1e+21,100000000000000000000,0.000001,1e-7,1.23e-7,-500]`},
		{"max_safe_integer", `[9007199254740992, -9007199254740992, 1234567890123456]`, `[9007199254740992,-9007199254740992,1234567890123456]`},
		{"exact_large_integer", `[100000000000000000000, 1e20]`, `[100000000000000000000,100000000000000000000]`},
		{"same_value_every_notation", `[1, 1.0, 1e0, 10e-1, 0.1e1, 100E-2, 1.000]`, `[1,1,1,1,1,1,1]`},
		{"shortest_forms", `[0.1, 0.30000000000000004, 2.2250738585072014e-308, 2.225073858507202e-308, 1.7976931348623157e308, 2.5e-7]`, `[0.1,0.30000000000000004,2.2250738585072014e-308,2.225073858507202e-308,1.7976931348623157e+308,2.5e-7]`},
		{"exact_in_other_notation", `[1000000000000000000000, 1.0e21, 0.000001e27, 4.50, 2e-3, 9007199254740992.0]`, `[1e+21,1e+21,1e+21,4.5,0.002,9007199254740992]`},
		{"zeros", `[0, -0, 0.0, -0.0, 0e999, -0E-5, 0.000e-999]`, `[0,0,0,0,0,0,0]`},
		{"escapes_normalized", `"\u0041\/\u00e9\u001f\u007f"`, "\"A/\u00e9\\u001f\u007f\""},
		{"surrogate_pair", `"\ud83d\ude02"`, "\"\U0001F602\""},
		{"utf16_key_order", "{\"\uff01\":1,\"\U0001F602\":2}", "{\"\U0001F602\":2,\"\uff01\":1}"},
		{"escaped_key_sorts_decoded", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"line_separators_raw", "\"\u2028\u2029\"", "\"\u2028\u2029\""},
		{"nested_empty", `[[],{},[{}]]`, `[[],{},[{}]]`},
		{"many_keys", `{"m":1,"l":2,"k":3,"j":4,"i":5,"h":6,"g":7,"f":8,"e":9,"d":10,"c":11,"b":12,"a":13,"n":14}`,
			`{"a":13,"b":12,"c":11,"d":10,"e":9,"f":8,"g":7,"h":6,"i":5,"j":4,"k":3,"l":2,"m":1,"n":14}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%s)\n got: %s\nwant: %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		lim  Limits
		code Code
	}{
		{"empty", ``, DefaultLimits, CodeInvalidJSON},
		{"bare_word", `nope`, DefaultLimits, CodeInvalidJSON},
		{"trailing_comma", `[1,]`, DefaultLimits, CodeInvalidJSON},
		{"single_quotes", `{'a':1}`, DefaultLimits, CodeInvalidJSON},
		{"leading_zero", `01`, DefaultLimits, CodeTrailingData},
		{"bare_dot", `1.`, DefaultLimits, CodeInvalidJSON},
		{"nan", `NaN`, DefaultLimits, CodeInvalidJSON},
		{"trailing_data", `{} {}`, DefaultLimits, CodeTrailingData},
		{"raw_control_char", "\"a\tb\"", DefaultLimits, CodeInvalidJSON},
		{"bad_escape", `"\x"`, DefaultLimits, CodeInvalidJSON},
		{"unterminated_string", `"abc`, DefaultLimits, CodeInvalidJSON},
		{"duplicate_key", `{"a":1,"a":2}`, DefaultLimits, CodeDuplicateKey},
		{"duplicate_key_escaped", `{"name":1,"n\u0061me":2}`, DefaultLimits, CodeDuplicateKey},
		{"duplicate_key_nested", `[{"x":{"k":1,"j":0,"k":2}}]`, DefaultLimits, CodeDuplicateKey},
		{"duplicate_key_many", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"a":0}`, DefaultLimits, CodeDuplicateKey},
		{"invalid_utf8", "\"\xff\"", DefaultLimits, CodeInvalidUTF8},
		{"overlong_utf8", "\"\xc0\xaf\"", DefaultLimits, CodeInvalidUTF8},
		{"utf8_encoded_surrogate", "\"\xed\xa0\x80\"", DefaultLimits, CodeInvalidUTF8},
		{"truncated_utf8", "\"\xe2\x82\"", DefaultLimits, CodeInvalidUTF8},
		{"lone_high_surrogate", `"\ud83d"`, DefaultLimits, CodeLoneSurrogate},
		{"lone_low_surrogate", `"\ude02"`, DefaultLimits, CodeLoneSurrogate},
		{"high_then_bmp", `"\ud83d\u0041"`, DefaultLimits, CodeLoneSurrogate},
		{"too_deep", strings.Repeat("[", 5) + strings.Repeat("]", 5), Limits{MaxDepth: 4}, CodeTooDeep},
		{"too_deep_default", strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200), DefaultLimits, CodeTooDeep},
		{"too_large", `[1,2,3]`, Limits{MaxBytes: 6}, CodeTooLarge},
		{"overflow", `1e400`, DefaultLimits, CodeNumberOutOfRange},
		{"negative_overflow", `-1.8e308`, DefaultLimits, CodeNumberOutOfRange},
		{"underflow", `1e-400`, DefaultLimits, CodeNumberOutOfRange},
		{"integer_beyond_2_53", `9007199254740993`, DefaultLimits, CodeNumberInexact},
		{"negative_integer_beyond_2_53", `-9007199254740993`, DefaultLimits, CodeNumberInexact},
		{"integer_2_60_not_written_back", `1152921504606846976`, DefaultLimits, CodeNumberInexact},
		{"huge_integer", `123456789012345678901234567890`, DefaultLimits, CodeNumberInexact},
		{"integer_overflow", "1" + strings.Repeat("0", 400), DefaultLimits, CodeNumberOutOfRange},
		{"fraction_beyond_double_precision", `0.30000000000000000000001`, DefaultLimits, CodeNumberInexact},
		{"one_plus_tiny", `1.00000000000000000001`, DefaultLimits, CodeNumberInexact},
		{"integer_beyond_2_53_as_fraction", `9007199254740993.0`, DefaultLimits, CodeNumberInexact},
		{"integer_beyond_2_53_as_exponent", `9.007199254740993e15`, DefaultLimits, CodeNumberInexact},
		{"not_shortest_digits", `0.1000000000000000055511151231257827`, DefaultLimits, CodeNumberInexact},
		{"subnormal_rounded", `3e-324`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_half", `2.4703282292062328e-324`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_shortest", `5e-324`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_negative", `-4.9e-324`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_1e_308", `1e-308`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_just_below_normal", `2.225073858507201e-308`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_prefix_of_normal", `2.2250738585072e-308`, DefaultLimits, CodeNumberOutOfRange},
		{"subnormal_as_fraction", `0.` + strings.Repeat("0", 310) + `5`, DefaultLimits, CodeNumberOutOfRange},
		{"negative_inexact", `-0.30000000000000000000001`, DefaultLimits, CodeNumberInexact},
		{"inexact_in_object", `{"maximum":1.00000000000000000001}`, DefaultLimits, CodeNumberInexact},
		{"underflow_long_mantissa", `0.` + strings.Repeat("0", 400) + `1`, DefaultLimits, CodeNumberOutOfRange},
		{"underflow_2e_324", `2e-324`, DefaultLimits, CodeNumberOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Doc
			err := d.Parse([]byte(tt.in), tt.lim)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q) = %v, want an *Error with code %s", tt.in, err, tt.code)
			}
			if e.Code != tt.code {
				t.Fatalf("Parse(%q) code = %s (%v), want %s", tt.in, e.Code, err, tt.code)
			}
			if !errors.Is(err, &Error{Code: tt.code}) {
				t.Fatalf("errors.Is does not match code %s", tt.code)
			}
		})
	}
}

func TestMarkSet(t *testing.T) {
	var d Doc
	src := []byte(`{"required":["b","a","c"],"nested":[["z","y"],"x"]}`)
	if err := d.Parse(src, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	req, _ := d.Get(Root, "required")
	d.MarkSet(req)
	nested, _ := d.Get(Root, "nested")
	d.MarkSet(nested)
	d.MarkSet(d.First(nested))
	got := string(d.Append(nil, Root))
	want := `{"nested":["x",["y","z"]],"required":["a","b","c"]}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestReuseDoesNotAllocate(t *testing.T) {
	src, err := os.ReadFile("../surface/testdata/xxh64-collision/benign.json")
	if err != nil {
		t.Fatal(err)
	}
	var d Doc
	buf := make([]byte, 0, len(src))
	run := func() {
		if err := d.Parse(src, DefaultLimits); err != nil {
			t.Fatal(err)
		}
		buf = d.Append(buf[:0], Root)
	}
	run()
	if n := testing.AllocsPerRun(20, run); n != 0 {
		t.Fatalf("steady-state Parse+Append allocated %v times per run, want 0", n)
	}
}

// canonicalByJSONText is an independent RFC 8785 implementation to compare with.
func canonicalByJSONText(src []byte) ([]byte, error) {
	v := jsontext.Value(bytes.Clone(src))
	if err := v.Canonicalize(); err != nil {
		return nil, err
	}
	return v, nil
}

func TestMatchesJSONText(t *testing.T) {
	for _, in := range fuzzSeeds {
		want, err := canonicalByJSONText([]byte(in))
		if err != nil {
			continue
		}
		got, err := Canonicalize([]byte(in))
		if err != nil {
			continue // stricter than jsontext: covered by TestParseRejects
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Canonicalize(%s)\n got: %s\nwant: %s", in, got, want)
		}
	}
}

var testLazy = Lazy{Keys: []string{"a", "s", "b"}, Sorted: []string{"r"}, Bail: []string{"x"}}

var fuzzSeeds = []string{
	`{"a":{"b":[1,2],"r":["b","a"]},"s":[{"x":1}],"z":{"a":[]}}`,
	`{"a":{"r":["a","b"],"t":{"u":"v"}},"s":{"a":1,"a":2}}`,
	`{"s":{"k":"\u00e9","n":1.5e300}}`,
	`{"b":[1,2,{"z":null,"a":true}],"a":"x"}`,
	`[1e21,1e-7,0.1,-0,123456789012345,3.14159,2e-3,1E30]`,
	`"\u00e9\ud83d\ude02\n\t\"\\\/\u001f"`,
	"{\"\uff01\":1,\"\U0001F602\":2,\"a\":3}",
	`{"a":{"b":{"c":[[],[{}],{"d":false}]}}}`,
	`9007199254740992`,
	`{"a":1,"a":2}`,
	`[9007199254740993]`,
	`"\ud800"`,
	" \t\n[ ] ",
}

// FuzzCanonicalize checks that parsing never panics, that canonicalization is
// idempotent, and that whatever we accept canonicalizes exactly as jsontext
// (an independent RFC 8785 implementation) does.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, err := Canonicalize(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code == "" {
				t.Fatalf("error without a code: %v", err)
			}
			var lazy Doc
			lazy.SetLazy(testLazy)
			if lerr := lazy.Parse(src, DefaultLimits); !errors.Is(lerr, e) {
				t.Fatalf("lazy parse: %v, full parse: %v", lerr, err)
			}
			return
		}
		checkNumbersExact(t, src)
		again, err := Canonicalize(got)
		if err != nil {
			t.Fatalf("canonical output does not parse: %v\n%s", err, got)
		}
		if !bytes.Equal(again, got) {
			t.Fatalf("not idempotent:\n once: %s\ntwice: %s", got, again)
		}
		var lazy Doc
		lazy.SetLazy(testLazy)
		if err := lazy.Parse(src, DefaultLimits); err != nil {
			t.Fatalf("lazy parse rejects what the full parse accepts: %v", err)
		}
		if l := lazy.Append(nil, Root); !bytes.Equal(l, got) {
			t.Fatalf("lazy parse writes\n%s\nfull parse writes\n%s", l, got)
		}
		want, err := canonicalByJSONText(src)
		if err != nil {
			t.Fatalf("we accepted what jsontext rejects (%v): %q", err, src)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("differs from jsontext on %q\n got: %s\nwant: %s", src, got, want)
		}
	})
}

func TestUnsafe8(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			m := unsafe8(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
				uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
			want := uint64(0)
			if !strSafe[c] {
				want = 0x80 << (8 * pos)
			}
			// Only the lowest flagged byte is relied on.
			if got := m & -m; got != want {
				t.Fatalf("unsafe8 with byte 0x%02x at %d: lowest flag %#x, want %#x", c, pos, got, want)
			}
		}
	}
}

func TestLazy(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		opaque bool // the value of "s" is opaque
	}{
		{"canonical_object", `{"s":{"a":[1,"x",true,null,false],"b":{"c":0.5}}}`, true},
		{"canonical_array", `{"s":[{"a":1},[]]}`, true},
		{"whitespace", `{"s":{"a": 1}}`, false},
		{"unsorted_keys", `{"s":{"b":1,"a":2}}`, false},
		{"unsorted_set", `{"s":{"r":["b","a"]}}`, false},
		{"sorted_set", `{"s":{"r":["a","b"]}}`, true},
		{"bail_key", `{"s":{"x":1}}`, false},
		{"noncanonical_number", `{"s":[1.0]}`, false},
		{"noncanonical_escape", `{"s":["\u0041"]}`, false},
		{"canonical_escape", `{"s":["a\nb"]}`, true},
		{"not_a_lazy_key", `{"t":{"a":1}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Doc
			d.SetLazy(testLazy)
			if err := d.Parse([]byte(tt.in), DefaultLimits); err != nil {
				t.Fatal(err)
			}
			_, v := d.Member(Root, 0)
			if d.Opaque(v) != tt.opaque {
				t.Fatalf("Opaque = %v, want %v", d.Opaque(v), tt.opaque)
			}
			want, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Append(nil, Root); !bytes.Equal(got, want) {
				t.Fatalf("lazy %s, full %s", got, want)
			}
		})
	}
}

func TestKeyBefore(t *testing.T) {
	keys := []string{"", "!", "a", "a!", "ab", "abcdefgh", "abcdefgh!", "abcdefghi", "abcdefgi", "b", "type", "type!", "typf", "\u00e9", "\uffff"}
	for _, a := range keys {
		for _, b := range keys {
			// Keys inside a larger buffer, as in a document, with bytes after them.
			src := []byte(`"` + a + `":0,"` + b + `":1,"padding padding"`)
			ka := src[1 : 1+len(a)]
			kb := src[len(a)+6 : len(a)+6+len(b)]
			want := CompareUTF16(a, b) < 0
			if got := keyBefore(src, ka, kb, false); got != want {
				t.Errorf("keyBefore(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}

func TestLaxNumbers(t *testing.T) {
	src := []byte(`{"id":9007199254740993,"big":1e999,"tiny":1e-999,"ok":1.5}`)
	var d Doc
	if err := d.Parse(src, Limits{LaxNumbers: true}); err != nil {
		t.Fatalf("lax parse: %v", err)
	}
	id, _ := d.Get(Root, "id")
	if string(d.Raw(id)) != "9007199254740993" {
		t.Fatalf("raw id %s", d.Raw(id))
	}
	if err := d.Parse(src, Limits{}); !errors.Is(err, &Error{Code: CodeNumberInexact}) {
		t.Fatalf("strict parse: %v", err)
	}
	if err := d.Parse([]byte(`[01]`), Limits{LaxNumbers: true}); err == nil {
		t.Fatal("lax numbers accepted a malformed number")
	}
}

// exactValue is the exact value of a JSON number literal, by an arithmetic
// independent of the parser's digit-string comparison.
func exactValue(t *testing.T, lit []byte) *big.Rat {
	if readDecimal(lit).first < 0 {
		return new(big.Rat) // zero, whatever its exponent (0e999999999)
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok {
		t.Fatalf("big.Rat cannot read %q", lit)
	}
	return r
}

// checkNumbersExact: every number of an accepted document has the exact
// value of what it is written as.
func checkNumbersExact(t *testing.T, src []byte) {
	var d Doc
	if err := d.Parse(src, DefaultLimits); err != nil {
		t.Fatalf("second parse: %v", err)
	}
	for i := range d.nodes {
		if d.nodes[i].kind != Number {
			continue
		}
		raw, canon := d.Raw(NodeID(i)), d.Append(nil, NodeID(i))
		if exactValue(t, raw).Cmp(exactValue(t, canon)) != 0 {
			t.Fatalf("number %s is written %s, another value", raw, canon)
		}
	}
}

// FuzzNumberPairs: two accepted literals with the same canonical bytes have
// the same exact value, and two with the same exact value the same
// canonical bytes.
func FuzzNumberPairs(f *testing.F) {
	for _, p := range [][2]string{
		{"1.0", "1"}, {"0.1", "0.10"}, {"9007199254740993", "9007199254740992"}, {"1e21", "1000000000000000000000"},
		{"5e-324", "3e-324"}, {"-0", "0"}, {"1.00000000000000000001", "1"}, {"0.30000000000000004", "0.3"},
		{"1.7976931348623157e308", "1.7976931348623158e308"}, {"123456789012345678", "123456789012345680"}, {"2e-3", "0.002"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, ea := Canonicalize([]byte(a))
		cb, eb := Canonicalize([]byte(b))
		if ea != nil || eb != nil {
			return
		}
		var d Doc
		if d.Parse([]byte(a), DefaultLimits) != nil || d.Kind(Root) != Number || d.Parse([]byte(b), DefaultLimits) != nil || d.Kind(Root) != Number {
			return
		}
		same := exactValue(t, bytes.TrimSpace([]byte(a))).Cmp(exactValue(t, bytes.TrimSpace([]byte(b)))) == 0
		if bytes.Equal(ca, cb) != same {
			t.Fatalf("%q and %q: canonical %s and %s, same exact value %v", a, b, ca, cb, same)
		}
	})
}
