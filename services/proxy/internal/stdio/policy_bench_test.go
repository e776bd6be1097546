package stdio

import (
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// BenchmarkPolicyOverhead: sequential tools/call round trips to the mcptest
// server directly, through an in-process stdio proxy without a policy, and
// through one whose tenant has 1,000 rules over 100 servers, none of which
// matches the call (argument clauses included), each step calling the
// three in rotating order so that a noisy machine burdens all alike. It
// reports each path's ns/call, policy-ratio (the call through the proxy
// with the policy over without it) and added-ratio (what the proxy adds to
// the direct call, with the policy over without it).
func BenchmarkPolicyOverhead(b *testing.B) {
	set, err := sessiontest.NonMatchingRules(1000)
	if err != nil {
		b.Fatal(err)
	}
	type path struct {
		benchPipe
		name string
		ns   time.Duration
	}
	paths := []*path{
		{benchOpen(b, benchDirect(b)), "direct", 0},
		{benchOpen(b, benchProxied(b, session.Config{Server: "bench"})), "policy-off", 0},
		{benchOpen(b, benchProxied(b, session.Config{Server: "bench", Policy: sessiontest.Policy[session.Code]{Set: set}})), "policy-on", 0},
	}
	n := 0
	for b.Loop() {
		for i := range paths {
			p := paths[(n+i)%len(paths)]
			start := time.Now()
			p.roundTrip(b, benchCall, "7")
			p.ns += time.Since(start)
		}
		n++
	}
	per := func(p *path) float64 { return float64(p.ns.Nanoseconds()) / float64(n) }
	for _, p := range paths {
		b.ReportMetric(per(p), p.name+"-ns/call")
	}
	b.ReportMetric(per(paths[2])/per(paths[1]), "policy-ratio")
	b.ReportMetric((per(paths[2])-per(paths[0]))/(per(paths[1])-per(paths[0])), "added-ratio")
	b.ReportMetric(0, "ns/op")
}
