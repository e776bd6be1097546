package sessiontest

import (
	"context"
	"fmt"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// Policy is a session.Policy whose compiled rules never change (a
// fleet.Policy without its watch). C is session.Code, as for Meter.
type Policy[C ~string] struct{ Set *policy.Set }

// Evaluate decides on c by the rules.
func (p Policy[C]) Evaluate(_ context.Context, c *policy.Call) (policy.Decision, C) {
	return p.Set.Evaluate(c), ""
}

// NonMatchingRules compiles n deny rules of tenant "default" over 100
// servers (srv-00 to srv-99), each with its own tool glob and an argument
// clause: none matches a call of a server or tool outside those names.
// What the benchmarks of the policy's cost per call evaluate.
func NonMatchingRules(n int) (*policy.Set, error) {
	var doc policy.Document
	for i := range n {
		doc.Rules = append(doc.Rules, policy.Rule{ID: fmt.Sprintf("r%04d", i), Tenant: "default",
			Server: fmt.Sprintf("srv-%02d", i%100), Tool: fmt.Sprintf("tool_%d_*", i),
			Args:   []policy.Clause{{Path: "$.path", Op: policy.OpContains, Value: "secret"}},
			Action: policy.Deny, Reason: "no"})
	}
	return policy.Compile("default", &doc)
}

// OnDrift is the action on drift the set names for server (session.DriftPolicy).
func (p Policy[C]) OnDrift(server string) string { return p.Set.Drift(server).OnDrift }
