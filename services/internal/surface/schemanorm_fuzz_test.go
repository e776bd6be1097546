package surface

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzNormalizeSchema: normalizing any JSON value never panics, gives the
// same result twice, and a tool whose input schema is replaced by its own
// normal form is classified as written differently, never as a change of
// meaning.
func FuzzNormalizeSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":["string"],"enum":["a"]}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"$ref":"#/definitions/A"}},"definitions":{"A":{"type":"string"}},"additionalProperties":true}`,
		`{"anyOf":[{"type":"integer"},{"type":"string","description":"x"}],"minimum":0,"exclusiveMinimum":true}`,
		`{"properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"properties":{"b":{"$ref":"#/$defs/A"}}}}}`,
		`{"properties":{"a":{"$ref":"#/$defs/A","description":"d"}},"$defs":{"A":{"type":"string"}},"required":["a","a"]}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"a":{"$ref":"#/$defs/A","description":"d"}},"$defs":{"A":{"type":"string"}}}`,
		`true`, `false`, `{"items":[true,{}],"additionalItems":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		n1, _ := normalizeSchema(v, false)
		n2, _ := normalizeSchema(v, false)
		if !reflect.DeepEqual(n1, n2) {
			t.Fatalf("normalizing twice differs:\n%v\n%v", n1, n2)
		}
		normalizeSchema(v, true)
		if _, ok := v.(map[string]any); !ok {
			return
		}
		if _, ok := n1.(map[string]any); !ok {
			return
		}
		oldJS, err := json.Marshal(map[string]any{"tools": []any{map[string]any{"name": "t", "inputSchema": v}}})
		if err != nil {
			return
		}
		newJS, _ := json.Marshal(map[string]any{"tools": []any{map[string]any{"name": "t", "inputSchema": n1}}})
		old, err := Parse(oldJS, Options{})
		if err != nil {
			return
		}
		cur, err := Parse(newJS, Options{})
		if err != nil {
			t.Fatalf("the normal form of an accepted schema is rejected: %v", err)
		}
		for _, c := range allChanges(Diff(old, cur)) {
			if c.Kind != ChangeRepresentation {
				t.Fatalf("a schema against its own normal form: %s at %s (%s)\n%s\n%s", c.Kind, c.Path, c.Detail, oldJS, newJS)
			}
		}
	})
}
