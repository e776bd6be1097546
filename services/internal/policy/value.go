package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// value is a clause's value compiled for comparison with the arguments.
type value struct {
	kind canonjson.Kind
	str  []byte // String: the text; Number: the literal
	num  decimal
	arr  []value
	obj  map[string]value
}

// compileValue converts a value decoded from YAML or JSON into a value.
func compileValue(v any) (value, error) {
	switch x := v.(type) {
	case nil:
		return value{kind: canonjson.Null}, nil
	case bool:
		if x {
			return value{kind: canonjson.True}, nil
		}
		return value{kind: canonjson.False}, nil
	case string:
		return value{kind: canonjson.String, str: []byte(x)}, nil
	case int:
		return numberValue(strconv.Itoa(x))
	case int64:
		return numberValue(strconv.FormatInt(x, 10))
	case uint64:
		return numberValue(strconv.FormatUint(x, 10))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return value{}, fmt.Errorf("%v is not a JSON number", x)
		}
		return numberValue(strconv.FormatFloat(x, 'g', -1, 64))
	case json.Number:
		return numberValue(string(x))
	case []any:
		out := value{kind: canonjson.Array, arr: make([]value, 0, len(x))}
		for _, e := range x {
			ev, err := compileValue(e)
			if err != nil {
				return value{}, err
			}
			out.arr = append(out.arr, ev)
		}
		return out, nil
	case map[string]any:
		out := value{kind: canonjson.Object, obj: make(map[string]value, len(x))}
		for k, e := range x {
			ev, err := compileValue(e)
			if err != nil {
				return value{}, err
			}
			out.obj[k] = ev
		}
		return out, nil
	default:
		return value{}, fmt.Errorf("a value of type %T is not JSON", v)
	}
}

func numberValue(lit string) (value, error) {
	d, ok := parseDecimal([]byte(lit))
	if !ok {
		return value{}, fmt.Errorf("%q is not a JSON number", lit)
	}
	return value{kind: canonjson.Number, str: []byte(lit), num: d}, nil
}

// equal reports whether node n of doc is JSON-equal to v: same type, same
// string, same number (exactly, as decimals: 1.0 equals 1, 2^53+1 does not
// equal 2^53), arrays element by element, objects member by member.
func equal(doc *canonjson.Doc, n canonjson.NodeID, v *value) bool {
	k := doc.Kind(n)
	if k != v.kind {
		return false
	}
	switch k {
	case canonjson.String:
		return bytes.Equal(doc.Decoded(n), v.str)
	case canonjson.Number:
		d, ok := parseDecimal(doc.Raw(n))
		return ok && d.cmp(&v.num) == 0
	case canonjson.Array:
		if doc.Len(n) != len(v.arr) {
			return false
		}
		e := doc.First(n)
		for i := range v.arr {
			if !equal(doc, e, &v.arr[i]) {
				return false
			}
			e = doc.Next(e)
		}
		return true
	case canonjson.Object:
		if doc.Len(n) != len(v.obj) {
			return false
		}
		for i := range doc.Len(n) {
			key, val := doc.Member(n, i)
			want, ok := v.obj[string(doc.Decoded(key))]
			if !ok || !equal(doc, val, &want) {
				return false
			}
		}
		return true
	default: // null, true, false
		return true
	}
}

// decimal is a JSON number literal read exactly: value =
// (neg ? -1 : 1) × 0.d1d2d3… × 10^exp, where the significant digits are
// those of digits (the integer and fraction digits, '.' skipped) from lead,
// n of them (leading and trailing zeros dropped). Zero has n == 0.
type decimal struct {
	digits []byte // the literal's mantissa, with its '.' if any
	lead   int    // index in digits of the first significant digit
	dot    int    // index in digits of the '.', -1 without
	n      int    // significant digits
	exp    int64
	neg    bool
}

// maxExp saturates exponents: numbers past it compare as equal to each
// other but keep their order with every number a person writes.
const maxExp = 1 << 40

// parseDecimal reads a JSON number literal (RFC 8259 grammar) without
// allocating.
func parseDecimal(lit []byte) (decimal, bool) {
	var d decimal
	i := 0
	if i < len(lit) && lit[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
		i++
	}
	intEnd := i
	if intEnd == start || (intEnd-start > 1 && lit[start] == '0') {
		return decimal{}, false
	}
	if i < len(lit) && lit[i] == '.' {
		i++
		f := i
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
		}
		if i == f {
			return decimal{}, false
		}
	}
	mantEnd := i
	var e int64
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		eneg := false
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			eneg = lit[i] == '-'
			i++
		}
		f := i
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			if e < maxExp {
				e = e*10 + int64(lit[i]-'0')
			}
			i++
		}
		if i == f {
			return decimal{}, false
		}
		if eneg {
			e = -e
		}
	}
	if i != len(lit) {
		return decimal{}, false
	}
	d.digits = lit[start:mantEnd]
	d.dot = -1
	if mantEnd > intEnd {
		d.dot = intEnd - start
	}
	// The first and last significant digits, and where the point is.
	point := intEnd - start
	first, last := -1, -1
	for j, c := range d.digits {
		if c == '.' || c == '0' {
			continue
		}
		if first < 0 {
			first = j
		}
		last = j
	}
	if first < 0 {
		d.neg = false // -0 is 0
		return d, true
	}
	d.lead = first
	n := last - first + 1
	if first < point && last > point {
		n-- // the point is among them
	}
	d.n = n
	// exp: digits before the point counted from the first significant one.
	if first < point {
		d.exp = int64(point-first) + e
	} else {
		d.exp = -int64(first-point-1) + e
	}
	d.exp = max(min(d.exp, maxExp), -maxExp)
	return d, true
}

// digit returns the i-th significant digit (0 past the end).
func (d *decimal) digit(i int) byte {
	if i >= d.n {
		return '0'
	}
	j := d.lead + i
	if d.dot > d.lead && j >= d.dot {
		j++
	}
	return d.digits[j]
}

// cmp compares d and o: -1, 0 or 1.
func (d *decimal) cmp(o *decimal) int {
	dz, oz := d.n == 0, o.n == 0
	switch {
	case dz && oz:
		return 0
	case dz:
		if o.neg {
			return 1
		}
		return -1
	case oz:
		if d.neg {
			return -1
		}
		return 1
	case d.neg != o.neg:
		if d.neg {
			return -1
		}
		return 1
	}
	sign := 1
	if d.neg {
		sign = -1
	}
	if d.exp != o.exp {
		if d.exp > o.exp {
			return sign
		}
		return -sign
	}
	for i := range max(d.n, o.n) {
		a, b := d.digit(i), o.digit(i)
		if a != b {
			if a > b {
				return sign
			}
			return -sign
		}
	}
	return 0
}

// sortedKeys returns m's keys sorted, for messages.
func sortedKeys[K ~string, V any](m map[K]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}
