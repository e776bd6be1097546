package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// selector is a metric selector of a PromQL expression: the metric's name
// and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

// matcher is one label matcher of a selector: label op "value".
type matcher struct {
	label, op, value string
}

// promqlRefs is what an expression names: its metric selectors, and the
// labels of its grouping and matching clauses (by, without, on, ignoring,
// group_left, group_right).
type promqlRefs struct {
	selectors []selector
	grouping  []string
}

// promqlWords are the PromQL words that are not metric names: the
// aggregation operators, which may be followed by a clause before their
// parenthesis (sum by (x) (...)), and the keywords. Functions need no list:
// a name followed by "(" is never a metric.
var promqlWords = []string{
	"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
	"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2",
}

// groupingWords are the words followed by a list of label names.
var groupingWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// parsePromQL extracts the metric selectors and grouping labels of a PromQL
// expression without evaluating it: the subset of PromQL the deploy/ rules
// and dashboards use (selectors with a name and matchers, range and
// subquery brackets, offsets, functions, aggregations with clauses, binary
// operators, numbers and strings). Anything else (a selector without a
// name, an unterminated string or list) is an error, so that a rule the
// extractor cannot read fails the test instead of passing unchecked. The
// syntax itself is promtool's to check (TestAlertingRules).
func parsePromQL(expr string) (promqlRefs, error) {
	var refs promqlRefs
	s := expr
	i := 0
	skipSpace := func() {
		for i < len(s) && strings.ContainsRune(" \t\r\n", rune(s[i])) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(s) && (isIdentStart(s[i]) || (i > start && s[i] >= '0' && s[i] <= '9')) {
			i++
		}
		return s[start:i]
	}
	str := func() (string, error) {
		q := s[i]
		end := i + 1
		for end < len(s) && s[end] != q {
			if s[end] == '\\' && q != '`' {
				end++
			}
			end++
		}
		if end >= len(s) {
			return "", fmt.Errorf("unterminated string at %d in %q", i, expr)
		}
		v := strings.ReplaceAll(s[i+1:end], `\\`, `\`)
		i = end + 1
		return v, nil
	}
	labelList := func() ([]string, error) {
		skipSpace()
		if i >= len(s) || s[i] != '(' {
			return nil, nil // group_left without labels
		}
		i++
		var labels []string
		for {
			skipSpace()
			if i < len(s) && s[i] == ')' {
				i++
				return labels, nil
			}
			l := ident()
			if l == "" {
				return nil, fmt.Errorf("expected a label name at %d in %q", i, expr)
			}
			labels = append(labels, l)
			skipSpace()
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
	}
	matchers := func() ([]matcher, error) {
		i++ // {
		var ms []matcher
		for {
			skipSpace()
			if i < len(s) && s[i] == '}' {
				i++
				return ms, nil
			}
			l := ident()
			if l == "" {
				return nil, fmt.Errorf("expected a label matcher at %d in %q", i, expr)
			}
			skipSpace()
			var op string
			for _, o := range []string{"=~", "!~", "!=", "="} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("expected a matcher operator after %s at %d in %q", l, i, expr)
			}
			i += len(op)
			skipSpace()
			if i >= len(s) || !strings.ContainsRune("\"'`", rune(s[i])) {
				return nil, fmt.Errorf("expected a quoted value after %s%s at %d in %q", l, op, i, expr)
			}
			v, err := str()
			if err != nil {
				return nil, err
			}
			ms = append(ms, matcher{l, op, v})
			skipSpace()
			if i < len(s) && s[i] == ',' {
				i++
			}
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return refs, nil
		}
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if _, err := str(); err != nil {
				return refs, err
			}
		case c == '[': // a range or subquery: durations only
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return refs, fmt.Errorf("unterminated [ at %d in %q", i, expr)
			}
			i += end + 1
		case c == '{':
			return refs, fmt.Errorf("a selector without a metric name at %d in %q: the check needs the name", i, expr)
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdentStart(s[i]) || s[i] >= '0' && s[i] <= '9' || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++ // a number, or a duration after offset
			}
		case isIdentStart(c):
			name := ident()
			skipSpace()
			switch {
			case slices.Contains(groupingWords, name):
				labels, err := labelList()
				if err != nil {
					return refs, err
				}
				refs.grouping = append(refs.grouping, labels...)
			case slices.Contains(promqlWords, name):
			case i < len(s) && s[i] == '(': // a function
			default:
				sel := selector{name: name}
				if i < len(s) && s[i] == '{' {
					ms, err := matchers()
					if err != nil {
						return refs, err
					}
					sel.matchers = ms
				}
				refs.selectors = append(refs.selectors, sel)
			}
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			i += n // operators and punctuation
		}
	}
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       string // selectors, then "| " and the grouping labels
		err        string
	}{
		{name: "bare", expr: "up", want: "up"},
		{name: "matchers", expr: `mcpdrift_x{status="changed", code=~'a|b',job!~"x"} > 0`,
			want: "mcpdrift_x{status=changed,code=~a|b,job!~x}"},
		{name: "aggregation_clause_before", expr: `sum by (code) (increase(mcpdrift_a_total[15m])) > 0`, want: "mcpdrift_a_total | code"},
		{name: "aggregation_clause_after", expr: `max(mcpdrift_a) without (instance)`, want: "mcpdrift_a | instance"},
		{name: "histogram", expr: `histogram_quantile(0.99, sum by (le) (rate(mcpdrift_h_bucket[5m])))`, want: "mcpdrift_h_bucket | le"},
		{name: "binary_matching", expr: `a / on (job, instance) group_left (version) b{x="1"}`, want: "a b{x=1} | job,instance,version"},
		{name: "set_operators", expr: `sum(rate(a[15m])) == 0 and max(b{c=~"audit.*"}) > 0 unless c or vector(0)`, want: "a b{c=~audit.*} c"},
		{name: "offset_and_numbers", expr: `a offset 5m > 1e3 * 2.5 - 1e-2`, want: "a"},
		{name: "bool", expr: `a > bool 3`, want: "a"},
		{name: "subquery", expr: `max_over_time(rate(a[5m])[1h:1m])`, want: "a"},
		{name: "string_with_brace", expr: `label_replace(a, "dst", "{x}", "src", "(.*)")`, want: "a"},
		{name: "nameless_selector", expr: `{__name__="a"}`, err: "without a metric name"},
		{name: "unterminated_string", expr: `a{b="c}`, err: "unterminated string"},
		{name: "bad_matcher", expr: `a{b}`, err: "matcher operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := parsePromQL(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parsePromQL(%q) = %v, want an error with %q", tc.expr, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := refs.String(); got != tc.want {
				t.Fatalf("parsePromQL(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

func (r promqlRefs) String() string {
	var parts []string
	for _, s := range r.selectors {
		if len(s.matchers) == 0 {
			parts = append(parts, s.name)
			continue
		}
		var ms []string
		for _, m := range s.matchers {
			ms = append(ms, m.label+m.op+m.value)
		}
		parts = append(parts, s.name+"{"+strings.Join(ms, ",")+"}")
	}
	out := strings.Join(parts, " ")
	if len(r.grouping) > 0 {
		out += " | " + strings.Join(r.grouping, ",")
	}
	return out
}

// FuzzParsePromQL: the extractor ends on any input, and what it returns
// are names.
func FuzzParsePromQL(f *testing.F) {
	for _, s := range []string{`sum by (code) (increase(a_total{b="c"}[5m])) > 0`, `a{b=~"x|y"} / on(job) group_left b`, `{`, `a{b="`, "1e-3 offset 5m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		refs, err := parsePromQL(expr)
		if err != nil {
			return
		}
		for _, s := range refs.selectors {
			if s.name == "" || !isIdentStart(s.name[0]) || slices.Contains(promqlWords, s.name) {
				t.Fatalf("parsePromQL(%q): selector name %q", expr, s.name)
			}
			for _, m := range s.matchers {
				if m.label == "" {
					t.Fatalf("parsePromQL(%q): a matcher without a label", expr)
				}
			}
		}
		for _, l := range refs.grouping {
			if l == "" {
				t.Fatalf("parsePromQL(%q): an empty grouping label", expr)
			}
		}
	})
}
