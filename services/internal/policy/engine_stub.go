package policy

// STUB: a stand-in for the engine (branch policy-engine) with the same
// signatures, so that enforcement builds and is tested before the engine is
// merged. Delete this file when merging policy-engine.

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Set is a tenant's compiled rules.
type Set struct{ rules []Rule }

// Parse reads a policy document (JSON only in the stub).
func Parse(data []byte) (*Document, error) {
	var d Document
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Compile compiles tenant's rules of d.
func Compile(tenant string, d *Document) (*Set, error) {
	s := &Set{}
	for _, r := range d.Rules {
		if r.Tenant != tenant {
			continue
		}
		if r.ID == "" || r.Action == "" {
			return nil, errors.New("policy: rule without id or action")
		}
		s.rules = append(s.rules, r)
	}
	sort.SliceStable(s.rules, func(i, j int) bool { return s.rules[i].Priority > s.rules[j].Priority })
	return s, nil
}

func glob(p, name string) bool {
	if p == "" {
		return true
	}
	ok, _ := path.Match(p, name)
	return ok
}

func lookup(args []byte, p string) (any, bool) {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil, false
	}
	for _, k := range strings.Split(strings.TrimPrefix(p, "$."), ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func (r *Rule) matches(c *Call) bool {
	if !glob(r.Server, c.Server) || !glob(r.Tool, c.Tool) || !glob(r.Agent, c.Agent) {
		return false
	}
	if r.Drifted != nil && *r.Drifted != c.Drifted {
		return false
	}
	for _, cl := range r.Args {
		v, ok := lookup(c.Arguments, cl.Path)
		if !ok {
			return false
		}
		m := false
		switch cl.Op {
		case OpEq:
			m = fmt.Sprint(v) == fmt.Sprint(cl.Value)
		case OpContains:
			s, _ := v.(string)
			w, _ := cl.Value.(string)
			m = strings.Contains(s, w)
		}
		if m == cl.Not {
			return false
		}
	}
	return true
}

// Evaluate decides on c; a nil Set allows.
func (s *Set) Evaluate(c *Call) Decision {
	var d Decision
	if s != nil {
		for i := range s.rules {
			r := &s.rules[i]
			if !r.matches(c) {
				continue
			}
			if r.Shadow {
				if d.ShadowRule == "" {
					d.ShadowRule, d.ShadowAction = r.ID, r.Action
				}
				continue
			}
			d.Rule, d.Action, d.Reason, d.Redact = r.ID, r.Action, r.Reason, r.Redact
			break
		}
	}
	if d.Action == "" {
		d.Action = Allow
	}
	switch {
	case c.Risk == ModeBlock && d.Action != Deny:
		d.Action, d.Mode = Deny, ModeBlock
	case c.Risk == ModeQuarantine && d.Action != Deny && d.Action != PendingApproval:
		d.Action, d.Mode = PendingApproval, ModeQuarantine
	}
	return d
}

// Redact replaces the values at paths of args with Redacted.
func Redact(args []byte, paths []string) ([]byte, error) {
	var v map[string]any
	if err := json.Unmarshal(args, &v); err != nil {
		return nil, err
	}
	for _, p := range paths {
		keys := strings.Split(strings.TrimPrefix(p, "$."), ".")
		m := v
		for i, k := range keys {
			if i == len(keys)-1 {
				if _, ok := m[k]; ok {
					m[k] = Redacted
				}
				break
			}
			n, ok := m[k].(map[string]any)
			if !ok {
				break
			}
			m = n
		}
	}
	return json.Marshal(v)
}
