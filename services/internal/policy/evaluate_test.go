package policy

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, tenant, doc string) *Set {
	t.Helper()
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s, err := Compile(tenant, d)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

// clauseRule is a document with one deny rule on tool "t" with one clause.
func clauseRule(op, value string, not bool) string {
	return fmt.Sprintf(`rules:
  - id: r
    tenant: t
    tool: t
    args: [{path: $.a.b, op: %s, value: %s, not: %v}]
    action: deny
`, op, value, not)
}

func TestOperators(t *testing.T) {
	tests := []struct {
		name  string
		op    string
		value string
		args  string
		match bool // without not; with not: !match unless the path is missing
		miss  bool // the path selects nothing: no match either way
	}{
		{"eq_string", "eq", "x", `{"a":{"b":"x"}}`, true, false},
		{"eq_string_escaped", "eq", `"é"`, `{"a":{"b":"\u00e9"}}`, true, false},
		{"eq_string_other", "eq", "x", `{"a":{"b":"y"}}`, false, false},
		{"eq_number", "eq", "5", `{"a":{"b":5.0}}`, true, false},
		{"eq_number_is_not_string", "eq", "5", `{"a":{"b":"5"}}`, false, false},
		{"eq_string_is_not_number", "eq", `"5"`, `{"a":{"b":5}}`, false, false},
		{"eq_huge", "eq", "123456789012345678901", `{"a":{"b":123456789012345678901}}`, true, false},
		{"eq_bool", "eq", "true", `{"a":{"b":true}}`, true, false},
		{"eq_null", "eq", "null", `{"a":{"b":null}}`, true, false},
		{"eq_object", "eq", "{x: 1, y: [a]}", `{"a":{"b":{"y":["a"],"x":1}}}`, true, false},
		{"eq_object_extra", "eq", "{x: 1}", `{"a":{"b":{"x":1,"y":2}}}`, false, false},
		{"eq_array_order", "eq", "[1, 2]", `{"a":{"b":[2,1]}}`, false, false},
		{"eq_missing", "eq", "x", `{"a":{}}`, false, true},
		{"eq_through_scalar", "eq", "x", `{"a":"b"}`, false, true},
		{"contains_substring", "contains", "secret", `{"a":{"b":"my secret!"}}`, true, false},
		{"contains_case", "contains", "secret", `{"a":{"b":"SECRET"}}`, false, false},
		{"contains_element", "contains", "x", `{"a":{"b":["w","x"]}}`, true, false},
		{"contains_number_element", "contains", "3", `{"a":{"b":[1,3]}}`, true, false},
		{"contains_not_substring_of_element", "contains", "x", `{"a":{"b":["xx"]}}`, false, false},
		{"contains_on_number", "contains", "1", `{"a":{"b":12}}`, false, false},
		{"regex", "regex", `'^/home/[^/]+/\.ssh/'`, `{"a":{"b":"/home/u/.ssh/id_rsa"}}`, true, false},
		{"regex_no", "regex", `'^/tmp/'`, `{"a":{"b":"/etc/passwd"}}`, false, false},
		{"regex_on_number", "regex", `'1'`, `{"a":{"b":1}}`, false, false},
		{"regex_unicode", "regex", `'^.$'`, `{"a":{"b":"\u00e9"}}`, true, false},
		{"in", "in", "[read, write]", `{"a":{"b":"write"}}`, true, false},
		{"in_no", "in", "[read, write]", `{"a":{"b":"delete"}}`, false, false},
		{"in_numbers", "in", "[1, 2.5]", `{"a":{"b":2.50}}`, true, false},
		{"cidr_v4", "cidr_match", "10.0.0.0/8", `{"a":{"b":"10.1.2.3"}}`, true, false},
		{"cidr_list", "cidr_match", "['192.168.0.0/16', '169.254.169.254']", `{"a":{"b":"169.254.169.254"}}`, true, false},
		{"cidr_mapped", "cidr_match", "10.0.0.0/8", `{"a":{"b":"::ffff:10.0.0.1"}}`, true, false},
		{"cidr_v6", "cidr_match", "fd00::/8", `{"a":{"b":"fd12::1"}}`, true, false},
		{"cidr_outside", "cidr_match", "10.0.0.0/8", `{"a":{"b":"8.8.8.8"}}`, false, false},
		{"cidr_not_an_ip", "cidr_match", "10.0.0.0/8", `{"a":{"b":"http://10.0.0.1/"}}`, false, false},
		{"cidr_empty", "cidr_match", "10.0.0.0/8", `{"a":{"b":""}}`, false, false},
		{"cidr_number", "cidr_match", "10.0.0.0/8", `{"a":{"b":10}}`, false, false},
		{"gt", "gt", "100", `{"a":{"b":100.5}}`, true, false},
		{"gt_equal", "gt", "100", `{"a":{"b":100}}`, false, false},
		{"gt_string_number", "gt", "100", `{"a":{"b":"5000"}}`, true, false},
		{"gt_string_plus", "gt", "100", `{"a":{"b":" +5000 "}}`, true, false},
		{"gt_string_text", "gt", "100", `{"a":{"b":"lots"}}`, false, false},
		{"gt_huge", "gt", "1e300", `{"a":{"b":1e400}}`, true, false},
		{"gt_negative", "gt", "-5", `{"a":{"b":-4}}`, true, false},
		{"lt", "lt", "0", `{"a":{"b":-1e-400}}`, true, false},
		{"lt_no", "lt", "0", `{"a":{"b":0}}`, false, false},
		{"lt_bool", "lt", "0", `{"a":{"b":false}}`, false, false},
		{"array_index", "eq", "x", `{"a":{"b":"x"}}`, true, false},
	}
	for _, tt := range tests {
		for _, not := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/not=%v", tt.name, not), func(t *testing.T) {
				s := mustCompile(t, "t", clauseRule(tt.op, tt.value, not))
				d := s.Evaluate(&Call{Server: "s", Tool: "t", Arguments: []byte(tt.args)})
				want := tt.match != not && !tt.miss
				if got := d.Action == Deny; got != want {
					t.Errorf("matched = %v; want %v (%+v)", got, want, d)
				}
			})
		}
	}
}

func TestPathsInArguments(t *testing.T) {
	doc := `rules:
  - {id: idx, tenant: t, tool: idx, args: [{path: "$.list[1].name", op: eq, value: b}], action: deny}
  - {id: quoted, tenant: t, tool: quoted, args: [{path: "$['a.b']['c d']", op: eq, value: 1}], action: deny}
  - {id: root, tenant: t, tool: root, args: [{path: "$", op: eq, value: {}}], action: deny}
  - {id: escaped-key, tenant: t, tool: esc, args: [{path: "$.key", op: eq, value: v}], action: deny}
`
	s := mustCompile(t, "t", doc)
	tests := []struct {
		tool, args string
		deny       bool
	}{
		{"idx", `{"list":[{"name":"a"},{"name":"b"}]}`, true},
		{"idx", `{"list":[{"name":"a"}]}`, false},
		{"idx", `{"list":{"1":{"name":"b"}}}`, false},
		{"quoted", `{"a.b":{"c d":1}}`, true},
		{"quoted", `{"a":{"b":{"c d":1}}}`, false},
		{"root", `{}`, true},
		{"root", ` { } `, true},
		{"root", ``, false}, // no arguments: no path selects anything
		{"root", `null`, false},
		{"esc", `{"k\u0065y":"v"}`, true},
		// A server that reads names case-insensitively (Go's encoding/json
		// into a struct) reads these as key: so does the engine.
		{"esc", `{"Key":"v"}`, true},
		{"esc", `{"KEY":"v"}`, true},
		{"esc", `{"\u212aey":"v"}`, true}, // the Kelvin sign folds to k
		{"idx", `{"List":[{"name":"a"},{"NAME":"b"}]}`, true},
		{"esc", `{"keys":"v"}`, false},
	}
	for _, tt := range tests {
		d := s.Evaluate(&Call{Server: "s", Tool: tt.tool, Arguments: []byte(tt.args)})
		if (d.Action == Deny) != tt.deny {
			t.Errorf("%s %s: %+v; want deny %v", tt.tool, tt.args, d, tt.deny)
		}
	}
}

func TestUnreadableArgumentsFailClosed(t *testing.T) {
	s := mustCompile(t, "t", `rules:
  - {id: shadowed, tenant: t, tool: t, priority: 10, shadow: true, args: [{path: $.a, op: eq, value: 1}], action: audit}
  - {id: allow-tmp, tenant: t, tool: t, args: [{path: $.p, op: regex, value: "^/tmp/"}], action: allow}
  - {id: names-only, tenant: t, tool: other, action: audit}
`)
	for _, args := range []string{
		`{"p":"/tmp/x","p":"/etc/passwd"}`,                // duplicate member
		"{\"p\":\"/tmp/\xff\"}",                           // invalid UTF-8
		`{"p":"/tmp/\ud800"}`,                             // lone surrogate
		`{"p":"/tmp/x"`,                                   // truncated
		`{"p":"/tmp/x"} {}`,                               // trailing data
		`{"p":"/tmp/x","P":"/etc/passwd"}`,                // names that differ only in case
		`{"p":"/tmp/x","\u0050":"/etc"}`,                  // ... one of them escaped
		`{"p":"/tmp/x","o":{"k":1,"\u212a":2}}`,           // ... in a nested object (K and the Kelvin sign)
		`{"p":"/tmp/x","l":[{"a":1},{"s":1,"\u017f":2}]}`, // ... in an array (s and long s)
		`["/tmp/x"]`,                                      // not an object
		`"p"`,                                             // not an object
		strings.Repeat("[", 200) + strings.Repeat("]", 200),
	} {
		d := s.Evaluate(&Call{Server: "s", Tool: "t", Arguments: []byte(args)})
		if d.Action != Deny || d.Code != CodeUnreadableArgs || d.Rule != "allow-tmp" || d.Reason == "" {
			t.Errorf("%q: %+v; want a deny by allow-tmp with code %s", args, d, CodeUnreadableArgs)
		}
		if d.ShadowRule != "shadowed" || d.ShadowAction != Deny {
			t.Errorf("%q: shadow %q %q; want shadowed recording the deny", args, d.ShadowRule, d.ShadowAction)
		}
		// A rule without clauses never reads them.
		if d := s.Evaluate(&Call{Server: "s", Tool: "other", Arguments: []byte(args)}); d.Action != Audit {
			t.Errorf("%q on a rule without clauses: %+v", args, d)
		}
	}
}

func TestPriorityOrderAndShadow(t *testing.T) {
	s := mustCompile(t, "t", `rules:
  - {id: first-written, tenant: t, server: "*", tool: "*", action: audit}
  - {id: low, tenant: t, server: notes, tool: search, priority: -1, action: deny}
  - {id: high, tenant: t, server: notes, tool: "sea*", priority: 5, action: sanitize, redact: [$.q]}
  - {id: high-shadow, tenant: t, server: "no*", priority: 9, shadow: true, action: deny}
  - {id: higher-shadow-2, tenant: t, server: notes, tool: search, priority: 8, shadow: true, action: pending_approval}
  - {id: same-priority-later, tenant: t, server: notes, tool: search, priority: 5, action: deny}
  - {id: other-tenant, tenant: u, server: notes, priority: 100, action: deny}
`)
	d := s.Evaluate(&Call{Server: "notes", Tool: "search"})
	if d.Rule != "high" || d.Action != Sanitize || len(d.Redact) != 1 || d.Redact[0] != "$.q" {
		t.Errorf("decision = %+v; want the sanitize of high", d)
	}
	if d.ShadowRule != "high-shadow" || d.ShadowAction != Deny {
		t.Errorf("shadow = %q %q; want the first shadow match, high-shadow", d.ShadowRule, d.ShadowAction)
	}
	if d := s.Evaluate(&Call{Server: "other", Tool: "search"}); d.Rule != "first-written" || d.Action != Audit || d.ShadowRule != "" {
		t.Errorf("other server: %+v", d)
	}
	if d := s.Evaluate(&Call{Server: "notes", Tool: "list"}); d.Rule != "first-written" || d.ShadowRule != "high-shadow" {
		t.Errorf("notes list: %+v", d)
	}
	// A shadow rule after the deciding one is not reported.
	s2 := mustCompile(t, "t", `rules:
  - {id: a, tenant: t, action: allow}
  - {id: b, tenant: t, shadow: true, action: deny}
`)
	if d := s2.Evaluate(&Call{Server: "x", Tool: "y"}); d.Rule != "a" || d.ShadowRule != "" {
		t.Errorf("shadow after the decision: %+v", d)
	}
	// Shadow alone: recorded, the call allowed.
	s3 := mustCompile(t, "t", `rules: [{id: b, tenant: t, shadow: true, action: deny, reason: staged}]`)
	if d := s3.Evaluate(&Call{Server: "x", Tool: "y"}); d.Rule != "" || d.Action != Allow || d.ShadowRule != "b" || d.ShadowAction != Deny {
		t.Errorf("shadow alone: %+v", d)
	}
	if s.Len() != 6 || s.Tenant() != "t" {
		t.Errorf("Len = %d, Tenant = %q", s.Len(), s.Tenant())
	}
}

func TestAgentAndDriftGate(t *testing.T) {
	s := mustCompile(t, "t", `rules:
  - {id: ci-only, tenant: t, tool: deploy, agent: "ci-*", action: allow}
  - {id: deploy-approve, tenant: t, tool: deploy, action: pending_approval}
  - {id: drifted-deny, tenant: t, server: files, drifted: true, tool: "write*", action: deny, reason: the server drifted}
  - {id: clean-audit, tenant: t, server: files, drifted: false, action: audit}
`)
	tests := []struct {
		call Call
		rule string
	}{
		{Call{Server: "x", Tool: "deploy", Agent: "ci-main"}, "ci-only"},
		{Call{Server: "x", Tool: "deploy", Agent: "alice"}, "deploy-approve"},
		{Call{Server: "x", Tool: "deploy"}, "deploy-approve"},
		{Call{Server: "files", Tool: "write_file", Drifted: true}, "drifted-deny"},
		{Call{Server: "files", Tool: "write_file"}, "clean-audit"},
		{Call{Server: "files", Tool: "read_file", Drifted: true}, ""},
	}
	for _, tt := range tests {
		if d := s.Evaluate(&tt.call); d.Rule != tt.rule {
			t.Errorf("%+v: %+v; want rule %q", tt.call, d, tt.rule)
		}
	}
}

func TestRiskComposition(t *testing.T) {
	s := mustCompile(t, "t", `rules:
  - {id: deny-rm, tenant: t, tool: rm, action: deny, reason: no rm}
  - {id: ask, tenant: t, tool: ask, action: pending_approval}
  - {id: scrub, tenant: t, tool: scrub, action: sanitize, redact: [$.token]}
  - {id: staged, tenant: t, tool: staged, shadow: true, action: allow}
`)
	tests := []struct {
		tool   string
		mode   Mode
		action Action
		rule   string
		why    Mode
		code   string
	}{
		{"free", "", Allow, "", "", ""},
		{"free", ModeAllow, Allow, "", "", ""},
		{"free", ModeQuarantine, PendingApproval, "", ModeQuarantine, CodeRiskQuarantine},
		{"free", ModeBlock, Deny, "", ModeBlock, CodeRiskBlock},
		{"free", "panic", Deny, "", ModeBlock, CodeRiskBlock},
		{"rm", ModeQuarantine, Deny, "deny-rm", "", ""},
		{"rm", ModeBlock, Deny, "deny-rm", "", ""},
		{"ask", ModeQuarantine, PendingApproval, "ask", "", ""},
		{"ask", ModeBlock, Deny, "ask", ModeBlock, CodeRiskBlock},
		{"scrub", ModeQuarantine, PendingApproval, "scrub", ModeQuarantine, CodeRiskQuarantine},
		{"staged", ModeQuarantine, PendingApproval, "", ModeQuarantine, CodeRiskQuarantine},
		{"staged", ModeBlock, Deny, "", ModeBlock, CodeRiskBlock},
	}
	for _, tt := range tests {
		d := s.Evaluate(&Call{Server: "x", Tool: tt.tool, Risk: tt.mode})
		if d.Action != tt.action || d.Rule != tt.rule || d.Mode != tt.why || d.Code != tt.code {
			t.Errorf("%s under %q: %+v; want %s by %q, mode %q, code %q", tt.tool, tt.mode, d, tt.action, tt.rule, tt.why, tt.code)
		}
		if d.Mode != "" && !strings.Contains(d.Reason, string(d.Mode)) {
			t.Errorf("%s under %q: reason %q does not name the mode", tt.tool, tt.mode, d.Reason)
		}
	}
	if d := s.Evaluate(&Call{Server: "x", Tool: "scrub", Risk: ModeQuarantine}); len(d.Redact) != 1 {
		t.Errorf("a quarantined sanitize call keeps its redactions for after approval: %+v", d)
	}
	if d := s.Evaluate(&Call{Server: "x", Tool: "staged", Risk: ModeBlock}); d.ShadowRule != "staged" {
		t.Errorf("the shadow rule is still reported under block: %+v", d)
	}
	var nilSet *Set
	if d := nilSet.Evaluate(&Call{Server: "x", Tool: "y"}); d.Action != Allow || d.Rule != "" {
		t.Errorf("nil set: %+v", d)
	}
	if d := nilSet.Evaluate(&Call{Server: "x", Tool: "y", Risk: ModeBlock}); d.Action != Deny {
		t.Errorf("nil set under block: %+v", d)
	}
}

func TestSettings(t *testing.T) {
	s := mustCompile(t, "t", `drift:
  - {tenant: t, posture: strict, on_drift: alert, guard: true, hash: sha512}
  - {tenant: t, server: legacy, posture: discovery, annotations: false}
  - {tenant: u, posture: discovery}
risk:
  - {tenant: t, modes: {critical: block, high: quarantine}}
  - {tenant: t, server: trusted, modes: {high: allow}}
`)
	yes, no := true, false
	if got := s.Drift("web"); got.Posture != "strict" || got.OnDrift != "alert" || got.Guard == nil || *got.Guard != yes || got.Hash != SHA512 || got.Annotations != nil || got.Server != "web" || got.Tenant != "t" {
		t.Errorf("Drift(web) = %+v", got)
	}
	got := s.Drift("legacy")
	if got.Posture != "discovery" || got.OnDrift != "alert" || got.Hash != SHA512 || got.Annotations == nil || *got.Annotations != no {
		t.Errorf("Drift(legacy) = %+v", got)
	}
	for _, tt := range []struct {
		server string
		band   Band
		want   Mode
	}{
		{"web", BandCritical, ModeBlock}, {"web", BandHigh, ModeQuarantine}, {"web", BandLow, ModeAllow},
		{"trusted", BandHigh, ModeAllow}, {"trusted", BandCritical, ModeBlock},
	} {
		if got := s.RiskMode(tt.server, tt.band); got != tt.want {
			t.Errorf("RiskMode(%s, %s) = %q; want %q", tt.server, tt.band, got, tt.want)
		}
	}
	var nilSet *Set
	if nilSet.RiskMode("x", BandCritical) != ModeAllow || nilSet.Drift("x").Posture != "" || nilSet.Version() != 0 || nilSet.Hash() != "" {
		t.Errorf("nil set settings")
	}
}

func TestHashAndStored(t *testing.T) {
	d, err := Parse([]byte(issueExample + "  - tenant: other\n    posture: strict\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Tenants(); len(got) != 2 || got[0] != "default" || got[1] != "other" {
		t.Fatalf("Tenants = %v", got)
	}
	part := d.For("default")
	if len(part.Rules) != 1 || len(part.Drift) != 1 {
		t.Fatalf("For(default) = %+v", part)
	}
	h := Hash(&part)
	if !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 || Hash(&part) != h {
		t.Fatalf("Hash = %q", h)
	}
	s, err := CompileStored(&Stored{Tenant: "default", Version: 7, Hash: h, Document: part})
	if err != nil || s.Version() != 7 || s.Hash() != h {
		t.Fatalf("CompileStored = %v, %v", s, err)
	}
	s2, _ := Compile("default", d)
	if s2.Hash() != h {
		t.Errorf("Compile's hash %q differs from Hash of the tenant's part %q", s2.Hash(), h)
	}
}

func TestRedact(t *testing.T) {
	r := `"` + Redacted + `"`
	tests := []struct {
		name  string
		args  string
		paths []string
		want  string
	}{
		{"one", `{"a": "x", "b": 1}`, []string{"$.a"}, `{"a": ` + r + `, "b": 1}`},
		{"nested and array", `{"a":{"b":[1,{"c":"s3cret"}]}}`, []string{"$.a.b[1].c"}, `{"a":{"b":[1,{"c":` + r + `}]}}`},
		{"object value", `{"auth":{"user":"u","pass":"p"},"q":1}`, []string{"$.auth"}, `{"auth":` + r + `,"q":1}`},
		{"inside redacted", `{"auth":{"pass":"p"}}`, []string{"$.auth.pass", "$.auth"}, `{"auth":` + r + `}`},
		{"same twice", `{"a":1}`, []string{"$.a", "$.a"}, `{"a":` + r + `}`},
		{"missing", `{"a":1}`, []string{"$.b", "$.a.c"}, `{"a":1}`},
		{"escaped key", `{"p\u0061ss":"x"}`, []string{"$.pass"}, `{"p\u0061ss":` + r + `}`},
		{"empty", ``, []string{"$.a"}, ``},
		{"null", `null`, []string{"$.a"}, `null`},
		{"order kept", `{"z":1,"a":2,"m":3}`, []string{"$.m", "$.z"}, `{"z":` + r + `,"a":2,"m":` + r + `}`},
		// What a case-insensitive server reads as pass is redacted.
		{"other case", `{"Pass":"x","q":1}`, []string{"$.pass"}, `{"Pass":` + r + `,"q":1}`},
		{"long s", `{"pa\u017fs":"x"}`, []string{"$.pass"}, `{"pa\u017fs":` + r + `}`},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			got, err := Redact([]byte(tt.args), tt.paths)
			if err != nil || string(got) != tt.want {
				t.Errorf("Redact = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1,"A":2}`, "{\"a\":\"\xff\"}", `[1]`, `{"a":`} {
		if _, err := Redact([]byte(bad), []string{"$.a"}); err == nil || Errors(err)[0].Code != CodeUnreadableArgs {
			t.Errorf("Redact(%q) = %v; want %s", bad, err, CodeUnreadableArgs)
		}
	}
	for _, bad := range []string{"$", "a", "$..a"} {
		if _, err := Redact([]byte(`{"a":1}`), []string{bad}); err == nil || Errors(err)[0].Code != CodeBadPath {
			t.Errorf("Redact path %q = %v; want %s", bad, err, CodeBadPath)
		}
	}
}

// TestExamplePolicy: docs/examples/policy.yaml decides as its comments say.
func TestExamplePolicy(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := mustCompile(t, "default", string(raw))
	tests := []struct {
		call           Call
		rule           string
		action         Action
		shadow         string
		redactedTokens bool
	}{
		{Call{Server: "notes", Tool: "search_notes", Arguments: []byte(`{"query":"the secret plan"}`)}, "no-secret-search", Deny, "", false},
		{Call{Server: "fs", Tool: "read_file", Arguments: []byte(`{"path":"/home/u/.ssh/id_rsa"}`)}, "no-key-paths", Deny, "", false},
		{Call{Server: "fs", Tool: "read_file", Arguments: []byte(`{"path":"/home/u/notes.txt"}`)}, "", Allow, "", false},
		{Call{Server: "web", Tool: "fetch", Arguments: []byte(`{"host":"169.254.169.254"}`)}, "no-internal-fetch", Deny, "", false},
		{Call{Server: "web", Tool: "fetch", Arguments: []byte(`{"host":"93.184.216.34"}`)}, "", Allow, "", false},
		{Call{Server: "billing", Tool: "pay", Arguments: []byte(`{"amount":"5000"}`)}, "big-payments", PendingApproval, "", false},
		{Call{Server: "crm", Tool: "update", Arguments: []byte(`{"api_token":"t0k","auth":{"bearer":"b"},"name":"x"}`)}, "scrub-tokens", Sanitize, "", true},
		{Call{Server: "ops", Tool: "delete_vm", Arguments: []byte(`{"confirm":false}`)}, "", Allow, "deletes-from-ci-only", false},
		{Call{Server: "ops", Tool: "list_vms", Drifted: true}, "drifted-audit", Audit, "", false},
		{Call{Server: "ops", Tool: "list_vms", Risk: ModeQuarantine}, "", PendingApproval, "", false},
	}
	for _, tt := range tests {
		d := s.Evaluate(&tt.call)
		if d.Rule != tt.rule || d.Action != tt.action || d.ShadowRule != tt.shadow {
			t.Errorf("%s/%s %s: %+v; want %s by %q, shadow %q", tt.call.Server, tt.call.Tool, tt.call.Arguments, d, tt.action, tt.rule, tt.shadow)
		}
		if tt.redactedTokens {
			out, err := Redact(tt.call.Arguments, d.Redact)
			if err != nil || strings.Contains(string(out), "t0k") || strings.Contains(string(out), `"b"`) || !strings.Contains(string(out), `"name":"x"`) {
				t.Errorf("sanitized: %s, %v", out, err)
			}
		}
	}
}
