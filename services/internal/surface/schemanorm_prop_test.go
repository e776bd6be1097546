package surface

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The property test of schema classification: random schemas, each written
// in two random equivalent forms (the rewrites of docs/diff.md), classify as
// representation_changed and nothing else; a random real edit, written in
// random forms too, is never classified as representation only and is
// reported with its kind. The generator and the rewrites are written here
// from the JSON Schema specification, independently of schemanorm.go.

func TestDiffSchemaRewritesProperty(t *testing.T) {
	propIterations := 400
	if raceEnabled {
		propIterations = 60
	}
	r := rand.New(rand.NewPCG(18, 2026))
	drifted := 0
	seen := map[string]bool{}
	allRules := []string{ruleBoolSchema, ruleEmptyAny, ruleDialect, ruleDefsInlined, ruleUnusedDefs, ruleTypeArray,
		ruleEnumConst, ruleExclusive, ruleMemberOrder, ruleRequiredSet, ruleEmptyProps}
	allSeen := func() bool {
		for _, rule := range allRules {
			if !seen[rule] {
				return false
			}
		}
		return true
	}
	// The forms are random (map order too): fewer iterations under the
	// race detector go on, up to the full count, until every rewrite rule
	// was exercised.
	iterations := 0
	for i := 0; i < propIterations || (!allSeen() && i < 400); i++ {
		iterations++
		base := genSchema(r, 0, true)
		oldForm := rewrite(r, clone(base), true)
		newForm := rewrite(r, clone(base), true)
		for _, f := range []any{oldForm, newForm} {
			_, rules := normalizeSchema(f, false)
			for rule := range rules {
				seen[rule] = true
			}
		}
		rep := diffSchemaValues(t, oldForm, newForm)
		if rep.Drift {
			drifted++
		}
		for _, c := range allChanges(rep) {
			if c.Kind != ChangeRepresentation {
				t.Fatalf("iteration %d: equivalent forms classified %q\nold %s\nnew %s", i, kinds(rep), js(oldForm), js(newForm))
			}
		}
		if rep.Drift && (!rep.Benign || rep.Severity > SeverityInfo) {
			t.Fatalf("iteration %d: rewrite rated %s benign %v", i, rep.Severity, rep.Benign)
		}

		edited, kind := realEdit(r, clone(base))
		editForm := rewrite(r, edited, true)
		rep = diffSchemaValues(t, oldForm, editForm)
		changes := allChanges(rep)
		if !rep.Drift || rep.Benign || !slices.ContainsFunc(changes, func(c Change) bool { return c.Kind == kind }) {
			t.Fatalf("iteration %d: edit %s not caught: %q (benign %v)\nold %s\nnew %s", i, kind, kinds(rep), rep.Benign, js(oldForm), js(editForm))
		}
	}
	for _, rule := range allRules {
		if !seen[rule] {
			t.Errorf("no rewrite exercised %q", rule)
		}
	}
	if drifted < iterations*9/10 {
		t.Fatalf("only %d of %d rewrites moved the hash: the rewrites are too weak to test anything", drifted, iterations)
	}
}

func diffSchemaValues(t *testing.T, old, new any) *Report {
	t.Helper()
	return diffSchemas(t, js(old), js(new))
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func clone(v any) any {
	var out any
	if err := json.Unmarshal([]byte(js(v)), &out); err != nil {
		panic(err)
	}
	return numbers(out)
}

// numbers turns float64 into json.Number, as the diff decodes.
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	case float64:
		return json.Number(strconv.FormatFloat(v, 'f', -1, 64))
	}
	return v
}

func num(i int) json.Number { return json.Number(strconv.Itoa(i)) }

// genSchema makes a schema in plain form: bare types, numeric bounds, no
// $ref, no boolean schemas; the root is an object with at least one
// property and one string enum of two or more values.
func genSchema(r *rand.Rand, depth int, root bool) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "array", "object"}
	typ := kinds[r.IntN(len(kinds))]
	if root {
		typ = "object"
	} else if depth >= 2 && (typ == "array" || typ == "object") {
		typ = "string"
	}
	if !root && r.IntN(10) == 0 {
		return map[string]any{} // any value
	}
	s := map[string]any{"type": typ}
	if r.IntN(3) == 0 {
		s["description"] = fmt.Sprintf("d%d", r.IntN(100))
	}
	switch typ {
	case "string":
		if r.IntN(2) == 0 {
			s["maxLength"] = num(10 + r.IntN(100))
		}
		if r.IntN(3) == 0 {
			s["minLength"] = num(r.IntN(5))
		}
		if r.IntN(3) == 0 {
			s["enum"] = []any{"a", "b", "c"}[:1+r.IntN(3)]
		}
	case "integer", "number":
		if r.IntN(2) == 0 {
			s["exclusiveMinimum"] = num(r.IntN(10))
		}
		if r.IntN(2) == 0 {
			s["maximum"] = num(100 + r.IntN(100))
		}
	case "array":
		if r.IntN(4) > 0 {
			s["items"] = genSchema(r, depth+1, false)
		}
	case "object":
		props := map[string]any{}
		var req []any
		n := 1 + r.IntN(3)
		if !root && r.IntN(3) == 0 {
			n = 0
		}
		for i := range n {
			name := fmt.Sprintf("p%d", i)
			props[name] = genSchema(r, depth+1, false)
			if r.IntN(2) == 0 {
				req = append(req, name)
			}
		}
		if root {
			props["mode"] = map[string]any{"type": "string", "enum": []any{"x", "y", "z"}}
			if r.IntN(3) == 0 {
				props["alt"] = map[string]any{[]string{"anyOf", "allOf", "oneOf"}[r.IntN(3)]: []any{
					map[string]any{"type": "string"}, map[string]any{"maxLength": num(5)}, map[string]any{"type": "integer"}}}
			}
		}
		if len(props) > 0 {
			s["properties"] = props
		}
		if len(req) > 0 {
			s["required"] = req
		}
		if r.IntN(3) == 0 {
			s["additionalProperties"] = false
		}
	}
	return s
}

// rewrite writes s in an equivalent form, choosing each rewrite at random.
// Under draft-04 every exclusive bound takes draft-04's boolean form (its
// numeric form, and const, do not exist there); elsewhere the boolean form is
// never used, as no other draft has it.
func rewrite(r *rand.Rand, v any, root bool) any {
	dialect := []string{"", "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2020-12/schema",
		"https://json-schema.org/draft/2019-09/schema", "http://json-schema.org/draft-04/schema#"}[r.IntN(5)]
	out := rewriteNode(r, v, root, strings.Contains(dialect, "draft-04"))
	if s, ok := out.(map[string]any); ok && dialect != "" {
		s["$schema"] = dialect
	}
	return out
}

func rewriteNode(r *rand.Rand, v any, root, draft04 bool) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for name, p := range props {
			props[name] = rewriteNode(r, p, false, draft04)
			if m, ok := props[name].(map[string]any); ok && len(m) == 0 && !draft04 && r.IntN(2) == 0 {
				props[name] = true
			}
		}
		if root && r.IntN(2) == 0 {
			// Move one property into definitions and refer to it.
			names := slices.Sorted(mapsKeys(props))
			name := names[r.IntN(len(names))]
			container := []string{"$defs", "definitions"}[r.IntN(2)]
			defs, _ := s[container].(map[string]any)
			if defs == nil {
				defs = map[string]any{}
				s[container] = defs
			}
			defs["D"+name] = props[name]
			props[name] = map[string]any{"$ref": "#/" + container + "/D" + name}
		}
	} else if s["type"] == "object" && r.IntN(2) == 0 {
		s["properties"] = map[string]any{}
	}
	if items, ok := s["items"]; ok {
		s["items"] = rewriteNode(r, items, false, draft04)
	} else if s["type"] == "array" && r.IntN(2) == 0 {
		s["items"] = map[string]any{}
		if !draft04 && r.IntN(2) == 0 {
			s["items"] = true
		}
	}
	for _, k := range []string{"anyOf", "allOf", "oneOf"} {
		if alt, ok := s[k].([]any); ok {
			for i, m := range alt {
				alt[i] = rewriteNode(r, m, false, draft04)
			}
			r.Shuffle(len(alt), func(i, j int) { alt[i], alt[j] = alt[j], alt[i] })
		}
	}
	if t, ok := s["type"].(string); ok && r.IntN(2) == 0 {
		s["type"] = []any{t}
	}
	if req, ok := s["required"].([]any); ok {
		r.Shuffle(len(req), func(i, j int) { req[i], req[j] = req[j], req[i] })
		if r.IntN(3) == 0 {
			req = append(req, req[0])
		}
		s["required"] = req
	} else if s["type"] == "object" && r.IntN(3) == 0 {
		s["required"] = []any{}
	}
	if _, ok := s["additionalProperties"]; !ok && s["type"] == "object" {
		switch r.IntN(3) {
		case 1:
			s["additionalProperties"] = true // draft-04 allows this boolean too
		case 2:
			s["additionalProperties"] = map[string]any{}
		}
	}
	if e, ok := s["enum"].([]any); ok && len(e) == 1 && !draft04 && r.IntN(2) == 0 {
		s["const"] = e[0]
		delete(s, "enum")
	}
	if m, ok := s["exclusiveMinimum"].(json.Number); ok && draft04 {
		s["minimum"], s["exclusiveMinimum"] = m, true
	}
	if _, ok := s["maximum"]; ok && draft04 && r.IntN(3) == 0 {
		s["exclusiveMaximum"] = false
	}
	return s
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// realEdit changes what s accepts and returns the change kind it must be
// reported with.
func realEdit(r *rand.Rand, v any) (any, string) {
	s := v.(map[string]any)
	props := s["properties"].(map[string]any)
	switch r.IntN(5) {
	case 0: // a new required parameter
		s["properties"].(map[string]any)["added"] = map[string]any{"type": "string"}
		req, _ := s["required"].([]any)
		s["required"] = append(req, "added")
		return s, ChangeParamAddedRequired
	case 1: // a parameter's type
		p := props["p0"].(map[string]any)
		if p["type"] == "string" {
			p["type"] = "integer"
		} else {
			p["type"] = "string"
		}
		return s, ChangeTypeChanged
	case 2: // an enum value removed
		mode := props["mode"].(map[string]any)
		mode["enum"] = []any{"x", "y"}
		return s, ChangeEnumRemoved
	case 3: // a constraint narrowed: no mode is long enough now
		mode := props["mode"].(map[string]any)
		mode["minLength"] = num(2)
		return s, ChangeConstraintNarrowed
	default: // an existing parameter becomes required
		req, _ := s["required"].([]any)
		if !slices.Contains(req, any("mode")) {
			s["required"] = append(req, "mode")
		}
		return s, ChangeRequiredExpanded
	}
}
