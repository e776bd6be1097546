package surface

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// Schema normalization, for classification only. The hash never sees it:
// two schemas that differ in any byte of canonical form have different
// hashes, and so are drift. What normalization decides is how that drift is
// classified: two schemas whose normal forms are equal accept exactly the
// same arguments and differ only in how they are written, which the diff
// reports as representation_changed. The rules are those of docs/diff.md,
// "Schemas written differently"; each is an equivalence that holds in every
// JSON Schema draft an MCP server uses, and where one holds only under
// conditions (siblings of $ref, keywords whose meaning changed between
// drafts), the rule is not applied unless they are met. When unsure, the
// schema is left as it is, so that a difference stays visible.

// Rewrites applied by normalization, named in representation_changed details.
const (
	ruleBoolSchema  = "true written as {}"
	ruleEmptyAny    = "a keyword that admits anything written out or dropped"
	ruleDialect     = "$schema names another draft"
	ruleDefsInlined = "$ref to a local definition inlined"
	ruleUnusedDefs  = "definitions left out once inlined"
	ruleTypeArray   = "type as a one-element or unordered array"
	ruleEnumConst   = "a one-value enum written as const"
	ruleExclusive   = "draft-04 boolean exclusiveMinimum/exclusiveMaximum"
	ruleMemberOrder = "allOf/anyOf/oneOf members in another order"
	ruleRequiredSet = "required written with duplicates, out of order or empty"
	ruleEmptyProps  = "an empty properties"
	ruleAnnotations = "annotations left out"
)

// maxNormNodes bounds the schema positions one normalization visits. $ref
// inlining can copy a definition many times (a chain of definitions that
// each use the next twice doubles at every step); past the budget, no more
// references are inlined, so a hostile schema costs bounded work and its
// $refs simply stay as they are.
const maxNormNodes = 20_000

// Known JSON Schema dialects, by $schema value without a trailing "#" and
// with the scheme left out (servers write http and https for the same one).
var knownDialects = map[string]string{
	"json-schema.org/draft-04/schema":       "04",
	"json-schema.org/draft-06/schema":       "06",
	"json-schema.org/draft-07/schema":       "07",
	"json-schema.org/draft/2019-09/schema":  "2019-09",
	"json-schema.org/draft/2020-12/schema":  "2020-12",
	"json-schema.org/draft/2019-09/schema/": "2019-09",
	"json-schema.org/draft/2020-12/schema/": "2020-12",
}

func dialectOf(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	s = strings.TrimSuffix(s, "#")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	d, ok := knownDialects[s]
	return d, ok
}

// Keywords whose meaning differs between the drafts an MCP server may name
// (array items and additionalItems, dependencies, the recursive and dynamic
// references, ids that move the base URI), and keywords draft-04 does not
// know. A schema that uses one keeps its $schema in normal form.
var (
	draftSensitive = map[string]bool{"additionalItems": true, "dependencies": true, "dependentRequired": true,
		"dependentSchemas": true, "prefixItems": true, "unevaluatedProperties": true, "unevaluatedItems": true,
		"$recursiveRef": true, "$recursiveAnchor": true, "$dynamicRef": true, "$dynamicAnchor": true,
		"$anchor": true, "$id": true, "id": true}
	notInDraft04 = map[string]bool{"const": true, "contains": true, "propertyNames": true, "if": true,
		"then": true, "else": true, "exclusiveMinimum": true, "exclusiveMaximum": true}
	// annotationWords change no validation; the diff reports them as text.
	annotationWords = map[string]bool{"description": true, "title": true, "examples": true, "$comment": true}
	// refSiblingsOK may stand beside a $ref that is inlined: they annotate,
	// in every draft (draft-07 ignores them, 2019-09 on applies them).
	refSiblingsOK = map[string]bool{"description": true, "title": true, "examples": true, "$comment": true,
		"default": true, "deprecated": true, "readOnly": true, "writeOnly": true}
	// anyIfEmpty: keywords whose value {} (or true) admits everything, as if
	// the keyword were absent.
	anyIfEmpty = map[string]bool{"additionalProperties": true, "additionalItems": true, "unevaluatedProperties": true,
		"unevaluatedItems": true, "propertyNames": true, "then": true, "else": true}
	// schemaWords hold one schema; schemaMaps an object of schemas;
	// schemaLists an array of schemas.
	schemaWords = map[string]bool{"additionalProperties": true, "additionalItems": true, "unevaluatedProperties": true,
		"unevaluatedItems": true, "propertyNames": true, "contains": true, "not": true, "if": true, "then": true,
		"else": true, "contentSchema": true}
	schemaMaps  = map[string]bool{"properties": true, "patternProperties": true, "dependentSchemas": true}
	schemaLists = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}
)

// schemaNorm normalizes one root schema.
type schemaNorm struct {
	root      map[string]any
	refsOK    bool            // no id below the root moves the base URI
	resolving map[string]bool // $refs being inlined, against cycles
	keptRef   bool            // a $ref was left in place
	inlined   map[string]bool // "$defs/name", "definitions/name" inlined somewhere
	recursive map[string]bool // definitions that refer to themselves, never inlined
	strip     bool            // leave annotation keywords out
	rules     map[string]bool
	nodes     int  // schema positions visited, against maxNormNodes
	draft04   bool // the root names draft-04: boolean exclusive bounds are read as draft-04's
}

// normalizeSchema returns the normal form of a schema (a decoded JSON value)
// and the rewrites it took. With strip, annotation keywords (description,
// title, examples, $comment) are left out at every schema position, so that
// two schemas whose normal forms are equal without them differ only in text.
func normalizeSchema(v any, strip bool) (any, map[string]bool) {
	n := &schemaNorm{resolving: map[string]bool{}, inlined: map[string]bool{}, strip: strip, rules: map[string]bool{}}
	root, ok := v.(map[string]any)
	if !ok {
		return n.schema(v), n.rules
	}
	n.root = root
	if d, ok := dialectOf(root["$schema"]); ok && d == "04" {
		n.draft04 = true
	}
	n.refsOK = !usesAny(root, map[string]bool{"$id": true, "id": true, "$anchor": true, "$dynamicAnchor": true, "$recursiveAnchor": true}, true)
	n.recursive = recursiveDefs(root)
	out := n.schema(root)
	m, ok := out.(map[string]any)
	if !ok {
		return out, n.rules
	}
	if !n.keptRef {
		// Every reference was inlined, so the definitions validate nothing
		// now. Those that were inlined are left out (their text is where they
		// were used); one nothing used stays, since its text is still there
		// for a model to read.
		for _, k := range []string{"$defs", "definitions"} {
			defs, ok := m[k].(map[string]any)
			if !ok {
				continue
			}
			for name := range defs {
				if n.inlined[k+"/"+name] {
					delete(defs, name)
					n.rules[ruleUnusedDefs] = true
				}
			}
			if len(defs) == 0 {
				delete(m, k)
			}
		}
	}
	if d, ok := dialectOf(m["$schema"]); ok && n.dialectFree(root, d) {
		delete(m, "$schema")
		n.rules[ruleDialect] = true
	}
	return m, n.rules
}

// dialectFree reports whether the schema means the same under every draft
// from 06 on (and under draft-04 when it uses nothing draft-04 lacks).
func (n *schemaNorm) dialectFree(root map[string]any, d string) bool {
	if usesAny(root, draftSensitive, false) || hasArrayItems(root) || refWithSiblings(root) {
		return false
	}
	if d != "04" {
		return true
	}
	free := !hasBoolSchema(root) // draft-04 has no boolean schemas
	walkSchemas(root, func(s map[string]any, _ bool) {
		for k, v := range s {
			if _, isBool := v.(bool); notInDraft04[k] && !(isBool && (k == "exclusiveMinimum" || k == "exclusiveMaximum")) {
				free = false // draft-04 ignores it, later drafts apply it
			}
		}
	})
	return free
}

// schema normalizes one schema position.
func (n *schemaNorm) schema(v any) any {
	n.nodes++
	switch v := v.(type) {
	case bool:
		if v && !n.draft04 { // draft-04 has no boolean schemas
			n.rules[ruleBoolSchema] = true
			return map[string]any{}
		}
		return v
	case map[string]any:
		return n.object(v)
	}
	return v
}

func (n *schemaNorm) object(s map[string]any) any {
	if ref, ok := s["$ref"].(string); ok {
		if target, ok := n.resolve(ref, s); ok {
			return target
		}
		n.keptRef = true
	} else if _, ok := s["$ref"]; ok {
		n.keptRef = true
	}
	out := make(map[string]any, len(s))
	for k, v := range s {
		switch {
		case n.strip && annotationWords[k]:
			n.rules[ruleAnnotations] = true
		case k == "type":
			out[k] = n.typeValue(v)
		case k == "required":
			if req, ok := requiredSet(v); ok {
				if len(req) != len(v.([]any)) || !slices.IsSortedFunc(v.([]any), compareJSON) {
					n.rules[ruleRequiredSet] = true
				}
				if len(req) > 0 {
					out[k] = req
				}
			} else {
				out[k] = v
			}
		case k == "items":
			if list, ok := v.([]any); ok {
				out[k] = n.list(list, false)
			} else if ns := n.schema(v); !isEmptySchema(ns) {
				out[k] = ns
			} else {
				n.rules[ruleEmptyAny] = true
			}
		case schemaWords[k]:
			ns := n.schema(v)
			if anyIfEmpty[k] && (isEmptySchema(ns) || ns == true) { // draft-04 has additionalProperties: true too
				n.rules[ruleEmptyAny] = true
				continue
			}
			out[k] = ns
		case schemaMaps[k], k == "$defs", k == "definitions":
			m, ok := v.(map[string]any)
			if !ok {
				out[k] = v
				continue
			}
			if k == "properties" && len(m) == 0 {
				n.rules[ruleEmptyProps] = true
				continue
			}
			nm := make(map[string]any, len(m))
			for name, sub := range m {
				nm[name] = n.schema(sub)
			}
			out[k] = nm
		case schemaLists[k]:
			if list, ok := v.([]any); ok {
				out[k] = n.list(list, k != "prefixItems")
			} else {
				out[k] = v
			}
		default:
			out[k] = v // data (enum, const, default, examples) and keywords without subschemas
		}
	}
	if e, ok := out["enum"].([]any); ok && len(e) == 1 {
		if _, hasConst := out["const"]; !hasConst {
			out["const"] = e[0]
			delete(out, "enum")
			n.rules[ruleEnumConst] = true
		}
	}
	n.exclusive(out, "exclusiveMinimum", "minimum")
	n.exclusive(out, "exclusiveMaximum", "maximum")
	return out
}

// exclusive rewrites the draft-04 form {"minimum": 5, "exclusiveMinimum":
// true} as {"exclusiveMinimum": 5}, and drops "exclusiveMinimum": false
// beside a minimum, when the root names draft-04. A boolean without its
// bound is left alone.
func (n *schemaNorm) exclusive(s map[string]any, excl, bound string) {
	b, ok := s[excl].(bool)
	if !ok || !n.draft04 {
		// Under a later draft, or none named (MCP's default is 2020-12), a
		// boolean bound is malformed, and validators read it differently
		// (python-jsonschema takes true for 1).
		return
	}
	num, ok := s[bound].(json.Number)
	if !ok {
		return
	}
	n.rules[ruleExclusive] = true
	if b {
		s[excl] = num
		delete(s, bound)
	} else {
		delete(s, excl)
	}
}

// list normalizes an array of schemas; unordered (allOf, anyOf, oneOf) are
// sorted by their normal form, since their order means nothing.
func (n *schemaNorm) list(l []any, unordered bool) []any {
	out := make([]any, len(l))
	for i, e := range l {
		out[i] = n.schema(e)
	}
	if !unordered {
		return out
	}
	keys := make([]string, len(out))
	idx := make([]int, len(out))
	for i, e := range out {
		b, _ := json.Marshal(e)
		keys[i], idx[i] = string(b), i
	}
	if slices.IsSortedFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) }) {
		return out
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sorted := make([]any, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	n.rules[ruleMemberOrder] = true
	return sorted
}

func (n *schemaNorm) typeValue(v any) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	set, ok := requiredSet(l)
	if !ok {
		return v // not all strings: left as it is
	}
	if len(set) != len(l) || !slices.IsSortedFunc(l, compareJSON) || len(set) == 1 {
		n.rules[ruleTypeArray] = true
	}
	if len(set) == 1 {
		return set[0]
	}
	return set
}

// resolve inlines a $ref to a definition of the root ("#/$defs/x",
// "#/definitions/x"), merged with the annotations beside it. It declines
// (and the $ref stays) when ids move the base URI, the reference is
// recursive, it points elsewhere, or a sibling keyword could validate.
func (n *schemaNorm) resolve(ref string, s map[string]any) (any, bool) {
	if !n.refsOK || n.root == nil || n.resolving[ref] || n.nodes > maxNormNodes {
		return nil, false
	}
	container, name, ok := localDef(ref)
	if !ok || n.recursive[container+"/"+name] {
		return nil, false // a recursive definition stays a $ref: inlining it would never end
	}
	defs, _ := n.root[container].(map[string]any)
	target, ok := defs[name]
	if !ok {
		return nil, false
	}
	for k := range s {
		if k != "$ref" && !refSiblingsOK[k] {
			return nil, false
		}
	}
	n.resolving[ref] = true
	resolved := n.schema(target)
	delete(n.resolving, ref)
	n.inlined[container+"/"+name] = true
	if len(s) == 1 {
		n.rules[ruleDefsInlined] = true
		return resolved, true
	}
	m, ok := resolved.(map[string]any)
	if !ok {
		return nil, false
	}
	merged := make(map[string]any, len(m)+len(s))
	for k, v := range m {
		merged[k] = v
	}
	for k, v := range s {
		if k == "$ref" || (n.strip && annotationWords[k]) {
			continue
		}
		if _, clash := merged[k]; clash {
			return nil, false // which one a reader sees depends on the draft
		}
		merged[k] = v
	}
	n.rules[ruleDefsInlined] = true
	return merged, true
}

// localDef splits "#/$defs/name" or "#/definitions/name" into its container
// and the decoded name.
func localDef(ref string) (container, name string, ok bool) {
	switch {
	case strings.HasPrefix(ref, "#/$defs/"):
		container = "$defs"
	case strings.HasPrefix(ref, "#/definitions/"):
		container = "definitions"
	default:
		return "", "", false
	}
	name = strings.TrimPrefix(ref, "#/"+container+"/")
	if strings.ContainsAny(name, "/%") {
		return "", "", false // a deeper pointer, or percent-encoded: not ours to guess
	}
	return container, strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~"), true
}

// maxDefs: beyond this many root definitions, every one counts as recursive
// (none is inlined), which keeps finding cycles cheap.
const maxDefs = 500

// recursiveDefs returns the root definitions ("$defs/name",
// "definitions/name") from which a chain of local $refs leads back to
// themselves.
func recursiveDefs(root map[string]any) map[string]bool {
	refs := map[string][]string{} // definition -> definitions its schema refers to
	for _, container := range []string{"$defs", "definitions"} {
		defs, _ := root[container].(map[string]any)
		for name, def := range defs {
			key := container + "/" + name
			refs[key] = nil
			walkSchemas(asMap(def), func(s map[string]any, _ bool) {
				if ref, ok := s["$ref"].(string); ok {
					if c, nm, ok := localDef(ref); ok {
						refs[key] = append(refs[key], c+"/"+nm)
					}
				}
			})
		}
	}
	out := map[string]bool{}
	if len(refs) > maxDefs {
		for d := range refs {
			out[d] = true
		}
		return out
	}
	for start := range refs {
		seen := map[string]bool{}
		stack := slices.Clone(refs[start])
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if d == start {
				out[start] = true
				break
			}
			if !seen[d] {
				seen[d] = true
				stack = append(stack, refs[d]...)
			}
		}
	}
	return out
}

func isEmptySchema(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

// requiredSet returns the sorted distinct strings of an array of strings.
func requiredSet(v any) ([]any, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]any, 0, len(l))
	for _, e := range l {
		if _, ok := e.(string); !ok {
			return nil, false
		}
		out = append(out, e)
	}
	slices.SortFunc(out, compareJSON)
	return slices.CompactFunc(out, func(a, b any) bool { return a == b }), true
}

// compareJSON orders decoded JSON values by their encoding/json bytes
// (object members sorted, numbers as written in canonical form).
func compareJSON(a, b any) int {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Compare(x, y)
}

// usesAny reports whether a keyword of words appears at any schema position
// below (and, with belowOnly false, at) the root.
func usesAny(root map[string]any, words map[string]bool, belowOnly bool) bool {
	found := false
	walkSchemas(root, func(s map[string]any, isRoot bool) {
		if belowOnly && isRoot {
			return
		}
		for k := range s {
			if words[k] {
				found = true
			}
		}
	})
	return found
}

// hasBoolSchema reports whether true or false stands where a schema goes.
func hasBoolSchema(root map[string]any) bool {
	found := false
	isBool := func(v any) {
		if _, ok := v.(bool); ok {
			found = true
		}
	}
	walkSchemas(root, func(s map[string]any, _ bool) {
		for k, v := range s {
			switch {
			case k == "additionalProperties" || k == "additionalItems":
				// draft-04 allows a boolean here
			case schemaWords[k] || k == "items":
				if l, ok := v.([]any); ok {
					for _, e := range l {
						isBool(e)
					}
				} else {
					isBool(v)
				}
			case schemaLists[k]:
				l, _ := v.([]any)
				for _, e := range l {
					isBool(e)
				}
			case schemaMaps[k], k == "$defs", k == "definitions":
				m, _ := v.(map[string]any)
				for _, e := range m {
					isBool(e)
				}
			}
		}
	})
	return found
}

func hasArrayItems(root map[string]any) bool {
	found := false
	walkSchemas(root, func(s map[string]any, _ bool) {
		if _, ok := s["items"].([]any); ok {
			found = true
		}
	})
	return found
}

// refWithSiblings reports whether a $ref has a sibling that could validate:
// draft-07 ignores it, 2019-09 on applies it. Annotations beside a $ref mean
// the same either way.
func refWithSiblings(root map[string]any) bool {
	found := false
	walkSchemas(root, func(s map[string]any, _ bool) {
		if _, ok := s["$ref"]; !ok {
			return
		}
		for k := range s {
			if k != "$ref" && !refSiblingsOK[k] {
				found = true
			}
		}
	})
	return found
}

// walkSchemas calls f on every object at a schema position, depth first.
func walkSchemas(root map[string]any, f func(s map[string]any, isRoot bool)) {
	var walk func(v any, isRoot bool)
	walk = func(v any, isRoot bool) {
		s, ok := v.(map[string]any)
		if !ok {
			return
		}
		f(s, isRoot)
		for k, sub := range s {
			switch {
			case schemaWords[k]:
				walk(sub, false)
			case k == "items":
				if l, ok := sub.([]any); ok {
					for _, e := range l {
						walk(e, false)
					}
				} else {
					walk(sub, false)
				}
			case schemaLists[k]:
				l, _ := sub.([]any)
				for _, e := range l {
					walk(e, false)
				}
			case schemaMaps[k], k == "$defs", k == "definitions":
				m, _ := sub.(map[string]any)
				for _, e := range m {
					walk(e, false)
				}
			case k == "dependencies":
				m, _ := sub.(map[string]any)
				for _, e := range m {
					walk(e, false)
				}
			}
		}
	}
	walk(root, true)
}
