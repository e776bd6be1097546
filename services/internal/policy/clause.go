package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML reads a clause keeping its value's numbers exact (as
// json.Number), so that 123456789012345678901 is not rounded to a double.
func (c *Clause) UnmarshalYAML(n *yaml.Node) error {
	var p struct {
		Path  string    `yaml:"path"`
		Op    Op        `yaml:"op"`
		Value yaml.Node `yaml:"value"`
		Not   bool      `yaml:"not"`
	}
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = Clause{Path: p.Path, Op: p.Op, Not: p.Not}
	if p.Value.Kind == 0 {
		return nil
	}
	v, err := nodeValue(&p.Value, 0)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", p.Value.Line, err)}}
	}
	c.Value = v
	return nil
}

// UnmarshalJSON reads a clause keeping its value's numbers exact (as
// json.Number), as stored records carry them.
func (c *Clause) UnmarshalJSON(b []byte) error {
	type plain Clause
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*c = Clause(p)
	return nil
}

// maxValueDepth bounds the nesting of a clause's value.
const maxValueDepth = 32

// nodeValue converts a YAML node into the JSON value it spells.
func nodeValue(n *yaml.Node, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("the value is nested deeper than %d", maxValueDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nodeValue(n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := nodeValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: a value's keys are strings", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: the key %q is written twice", k.Line, k.Value)
			}
			v, err := nodeValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			err := n.Decode(&b)
			return b, err
		case "!!int", "!!float":
			if _, ok := parseDecimal([]byte(n.Value)); ok {
				return json.Number(n.Value), nil
			}
			if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
				return json.Number(strconv.FormatInt(i, 10)), nil
			}
			var f float64
			if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("%q is not a JSON number", n.Value)
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
		default: // strings, and timestamps and the like as they are written
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("unsupported YAML value")
}
