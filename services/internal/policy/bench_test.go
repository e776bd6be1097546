package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// fleetDocument is 1,000 rules over 100 servers, as a large tenant might
// write them: per server, rules on exact tools with and without argument
// clauses, tool globs and a shadow rule; and some fleet-wide rules with
// server globs.
func fleetDocument() *Document {
	var d Document
	for srv := range 100 {
		server := fmt.Sprintf("server-%03d", srv)
		for k := range 10 {
			r := Rule{ID: fmt.Sprintf("r-%03d-%d", srv, k), Tenant: "t", Server: server, Action: Deny, Priority: k % 3}
			switch k {
			case 0, 1, 2:
				r.Tool = fmt.Sprintf("tool_%d", k)
			case 3:
				r.Tool = "write_*"
				r.Args = []Clause{{Path: "$.path", Op: OpRegex, Value: `^/(etc|root)/`}}
			case 4:
				r.Tool = "fetch"
				r.Args = []Clause{{Path: "$.host", Op: OpCIDRMatch, Value: []any{"10.0.0.0/8", "169.254.0.0/16"}}}
			case 5:
				r.Tool = "search_*"
				r.Args = []Clause{{Path: "$.query", Op: OpContains, Value: "secret"}}
			case 6:
				r.Tool = "pay"
				r.Args = []Clause{{Path: "$.amount", Op: OpGt, Value: 1000}}
			case 7:
				r.Tool = "exec"
				r.Action = PendingApproval
			case 8:
				r.Tool = "admin_?"
				r.Shadow = true
			case 9:
				r.Tool = "mode"
				r.Args = []Clause{{Path: "$.mode", Op: OpIn, Value: []any{"rm", "format"}}}
			}
			d.Rules = append(d.Rules, r)
		}
	}
	for k := range 5 {
		d.Rules[k*7].Server = fmt.Sprintf("server-0%d*", k)
	}
	return &d
}

var benchCalls = []Call{
	{Server: "server-042", Tool: "read_file", Arguments: []byte(`{"path":"/tmp/x"}`)},             // no candidate
	{Server: "server-042", Tool: "search_notes", Arguments: []byte(`{"query":"groceries list"}`)}, // clauses read, no match
	{Server: "server-077", Tool: "fetch", Arguments: []byte(`{"host":"8.8.8.8","port":443}`)},     // cidr, no match
	{Server: "server-555", Tool: "anything", Arguments: []byte(`{}`)},                             // unknown server
}

func fleetSet(tb testing.TB) *Set {
	s, err := Compile("t", fleetDocument())
	if err != nil {
		tb.Fatal(err)
	}
	if s.Len() != 1000 {
		tb.Fatalf("%d rules", s.Len())
	}
	return s
}

// TestEvaluateNoMatchDoesNotAllocate: the calls no rule matches, whether
// clauses had to read the arguments or not, allocate nothing.
func TestEvaluateNoMatchDoesNotAllocate(t *testing.T) {
	s := fleetSet(t)
	for _, c := range benchCalls {
		c := c
		if d := s.Evaluate(&c); d.Rule != "" || d.Action != Allow {
			t.Fatalf("%+v matched: %+v", c, d)
		}
		if raceEnabled {
			continue
		}
		if n := testing.AllocsPerRun(200, func() { s.Evaluate(&c) }); n != 0 {
			t.Errorf("Evaluate(%s %s) allocates %.1f times per call", c.Server, c.Tool, n)
		}
	}
	match := Call{Server: "server-042", Tool: "search_notes", Arguments: []byte(`{"query":"the secret"}`)}
	if d := s.Evaluate(&match); d.Rule != "r-042-5" || d.Action != Deny {
		t.Fatalf("match: %+v", d)
	}
}

// BenchmarkEvaluate measures Evaluate with 1,000 rules over 100 servers
// against a baseline in the same run: one map lookup of the server and
// tool, the least any indexed evaluation does. It reports ns/op per call,
// the ratio to the baseline, and the p50 of batches of calls.
func BenchmarkEvaluate(b *testing.B) {
	s := fleetSet(b)
	base := map[string]map[string]int{}
	for _, c := range benchCalls {
		base[c.Server] = map[string]int{c.Tool: 1}
	}
	var sink int
	measure := func(f func(i int)) (perOp float64, p50 float64) {
		const batch = 256
		var samples []float64
		start := time.Now()
		for i := 0; i < b.N; i += batch {
			t0 := time.Now()
			for j := i; j < i+batch && j < b.N; j++ {
				f(j)
			}
			samples = append(samples, float64(time.Since(t0).Nanoseconds())/float64(min(batch, b.N-i)))
		}
		slices.Sort(samples)
		return float64(time.Since(start).Nanoseconds()) / float64(b.N), samples[len(samples)/2]
	}
	b.ReportAllocs()
	b.ResetTimer()
	evalNs, evalP50 := measure(func(i int) {
		c := &benchCalls[i%len(benchCalls)]
		if s.Evaluate(c).Action != Allow {
			sink++
		}
	})
	b.StopTimer()
	baseNs, _ := measure(func(i int) {
		c := &benchCalls[i%len(benchCalls)]
		sink += base[c.Server][c.Tool]
	})
	_ = sink
	b.ReportMetric(evalP50, "p50-ns/call")
	b.ReportMetric(baseNs, "baseline-ns/op")
	b.ReportMetric(evalNs/baseNs, "x-baseline")
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Add([]byte(`{"rules":[{"id":"a","tenant":"t","args":[{"path":"$['x'][0]","op":"in","value":[1,"2",null]}],"action":"deny"}]}`))
	f.Add([]byte("risk:\n  - {tenant: t, modes: {high: block}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			if len(Errors(err)) == 0 {
				t.Fatalf("an error without a coded *Error: %v", err)
			}
			return
		}
		// What Parse accepts compiles, for each tenant, and survives the
		// stored record's JSON round trip.
		for _, tenant := range d.Tenants() {
			part := d.For(tenant)
			if _, err := Compile(tenant, &part); err != nil {
				t.Fatalf("accepted but does not compile: %v", err)
			}
			b, err := json.Marshal(Stored{Tenant: tenant, Document: part})
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			var st Stored
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if _, err := CompileStored(&st); err != nil {
				t.Fatalf("stored record does not compile: %v", err)
			}
		}
	})
}

func FuzzEvaluate(f *testing.F) {
	s := mustCompile(f, "t", `rules:
  - {id: sh, tenant: t, shadow: true, args: [{path: "$.a[0]", op: eq, value: {k: [1]}}], action: deny}
  - {id: re, tenant: t, tool: "x*", args: [{path: $.p, op: regex, value: "^/etc"}, {path: $.n, op: gt, value: 5, not: true}], action: deny}
  - {id: ip, tenant: t, args: [{path: "$['h']", op: cidr_match, value: [10.0.0.0/8, "::1/128"]}], action: pending_approval}
  - {id: in, tenant: t, args: [{path: $.m, op: in, value: [rm, 1e3]}], action: sanitize, redact: [$.m, $.p]}
  - {id: c, tenant: t, args: [{path: $.q, op: contains, value: s}], action: audit}
`)
	f.Add("x1", []byte(`{"p":"/etc/x","n":3}`))
	f.Add("y", []byte(`{"h":"10.0.0.1"}`))
	f.Add("y", []byte(`{"m":"rm","p":{"a":1}}`))
	f.Add("y", []byte(`{"a":[{"k":[1]}],"q":["s"]}`))
	f.Add("y", []byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, tool string, args []byte) {
		d := s.Evaluate(&Call{Server: "srv", Tool: tool, Arguments: args})
		switch d.Action {
		case Allow, Audit, Sanitize, PendingApproval, Deny:
		default:
			t.Fatalf("action %q", d.Action)
		}
		if d.Code == CodeUnreadableArgs && d.Action != Deny {
			t.Fatalf("unreadable arguments not denied: %+v", d)
		}
		if d.Action == Sanitize {
			out, err := Redact(args, d.Redact)
			if err != nil {
				t.Fatalf("Redact after a sanitize decision: %v", err)
			}
			if d2 := s.Evaluate(&Call{Server: "srv", Tool: tool, Arguments: out}); d2.Code == CodeUnreadableArgs {
				t.Fatalf("redacted arguments are unreadable: %s", out)
			}
		}
	})
}
