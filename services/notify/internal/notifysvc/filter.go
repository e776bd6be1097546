package notifysvc

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// CodeInvalidFilter is the code of a filter that does not parse.
const CodeInvalidFilter = "invalid_filter"

// Filter selects the events a destination gets. The zero Filter (from the
// empty expression) selects every event.
//
// Syntax (docs/services/notify.md#filters): clauses separated by spaces, all
// of which must hold; a clause is FIELD OP VALUE[,VALUE...] without spaces.
//
//	FIELD  tenant | server | kind | status | severity
//	OP     =  (any of the values)   != (none of them)
//	       >= <= > < (severity only: by rank, none < info < low < medium < high < critical)
//
// Example: "tenant=acme,beta kind!=held_call severity>=high".
type Filter struct {
	clauses []clause
	text    string
}

type clause struct {
	field, op string
	values    []string
}

// Filter fields.
var filterFields = []string{"tenant", "server", "kind", "status", "severity"}

var (
	clausePattern = regexp.MustCompile(`^([a-z]+)(!=|>=|<=|=|>|<)(.*)$`)
	idValue       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// ParseFilter reads a filter expression; its errors have the code
// invalid_filter and say what is wrong where.
func ParseFilter(expr string) (Filter, error) {
	f := Filter{text: strings.Join(strings.Fields(expr), " ")}
	for _, word := range strings.Fields(expr) {
		m := clausePattern.FindStringSubmatch(word)
		if m == nil {
			return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: want FIELD OP VALUE, such as status=changed (fields: %s; operators: = != >= <= > <)", word, strings.Join(filterFields, ", "))
		}
		c := clause{field: m[1], op: m[2]}
		if !slices.Contains(filterFields, c.field) {
			return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: unknown field %q (fields: %s)", word, c.field, strings.Join(filterFields, ", "))
		}
		ordered := c.op != "=" && c.op != "!="
		if ordered && c.field != "severity" {
			return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: %s compares severities only; use = or != on %s", word, c.op, c.field)
		}
		if m[3] == "" {
			return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: no value", word)
		}
		c.values = strings.Split(m[3], ",")
		if ordered && len(c.values) != 1 {
			return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: %s takes one severity", word, c.op)
		}
		for _, v := range c.values {
			if err := checkValue(c.field, v); err != nil {
				return Filter{}, coded.Errorf(CodeInvalidFilter, "filter clause %q: %v", word, err)
			}
		}
		f.clauses = append(f.clauses, c)
	}
	return f, nil
}

func checkValue(field, v string) error {
	var known []string
	switch field {
	case "tenant", "server":
		if !idValue.MatchString(v) {
			return fmt.Errorf("%s %q: want 1 to 64 characters of A-Z, a-z, 0-9, _ and -", field, v)
		}
		return nil
	case "kind":
		known = Kinds
	case "status":
		known = Statuses
	case "severity":
		known = Severities
	}
	if !slices.Contains(known, v) {
		return fmt.Errorf("unknown %s %q (want one of %s)", field, v, strings.Join(known, ", "))
	}
	return nil
}

// String is the expression, its spaces normalized; empty for every event.
func (f Filter) String() string { return f.text }

// Match reports whether ev passes every clause.
func (f Filter) Match(ev *Event) bool {
	for _, c := range f.clauses {
		if !c.match(ev) {
			return false
		}
	}
	return true
}

func (c clause) match(ev *Event) bool {
	var got string
	switch c.field {
	case "tenant":
		got = ev.Tenant
	case "server":
		got = ev.Server
	case "kind":
		got = ev.Kind
	case "status":
		got = ev.Status
	case "severity":
		got = ev.Severity
	}
	switch c.op {
	case "=":
		return slices.Contains(c.values, got)
	case "!=":
		return !slices.Contains(c.values, got)
	}
	have, want := slices.Index(Severities, got), slices.Index(Severities, c.values[0])
	if have < 0 {
		have = 0 // an event without a severity has none
	}
	switch c.op {
	case ">=":
		return have >= want
	case "<=":
		return have <= want
	case ">":
		return have > want
	}
	return have < want
}
