package policy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// issueExample is the file of issue 14, which must be accepted as written
// (testdata/issue14.yaml; the drift service's and driftctl's tests apply it
// too).
var issueExample = func() string {
	b, err := os.ReadFile("testdata/issue14.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestParseIssueExample(t *testing.T) {
	d, err := Parse([]byte(issueExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(d.Rules) != 1 || len(d.Drift) != 1 {
		t.Fatalf("got %d rules, %d drift settings; want 1 and 1", len(d.Rules), len(d.Drift))
	}
	r := d.Rules[0]
	if r.ID != "no-secret-search" || r.Tenant != "default" || r.Server != "notes" || r.Tool != "search_*" ||
		r.Action != Deny || r.Reason != "searching for secrets is not allowed" {
		t.Errorf("rule = %+v", r)
	}
	if len(r.Args) != 1 || r.Args[0] != (Clause{Path: "$.query", Op: OpContains, Value: "secret"}) {
		t.Errorf("args = %+v", r.Args)
	}
	if d.Drift[0] != (DriftSetting{Tenant: "default", Posture: "discovery", OnDrift: "block"}) {
		t.Errorf("drift = %+v", d.Drift[0])
	}
	s, err := Compile("default", d)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	got := s.Evaluate(&Call{Server: "notes", Tool: "search_notes", Arguments: []byte(`{"query":"my secret key"}`)})
	if got.Action != Deny || got.Rule != "no-secret-search" || got.Reason != "searching for secrets is not allowed" {
		t.Errorf("Evaluate = %+v", got)
	}
	if got := s.Evaluate(&Call{Server: "notes", Tool: "search_notes", Arguments: []byte(`{"query":"groceries"}`)}); got.Action != Allow || got.Rule != "" {
		t.Errorf("Evaluate(harmless) = %+v", got)
	}
}

// TestDocumentedExamplesParse: the example file and every YAML block of
// docs/policy.md are accepted as written.
func TestDocumentedExamplesParse(t *testing.T) {
	docs := map[string]string{}
	ex, err := os.ReadFile("../../../docs/examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs["docs/examples/policy.yaml"] = string(ex)
	md, err := os.ReadFile("../../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range strings.Split(string(md), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(body, "args:") {
			// A fragment of a rule: complete it.
			body = "rules:\n  - id: r\n    tenant: t\n    action: deny\n    " + strings.ReplaceAll(strings.TrimSpace(body), "\n", "\n    ") + "\n"
		}
		docs[fmt.Sprintf("docs/policy.md block %d", i)] = body
	}
	for name, doc := range docs {
		d, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, tenant := range d.Tenants() {
			if _, err := Compile(tenant, d); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	if len(docs) < 4 {
		t.Errorf("found %d examples, want the file and at least 3 blocks", len(docs))
	}
}

func TestParseJSON(t *testing.T) {
	doc := `{"rules":[{"id":"r1","tenant":"t","tool":"exec","args":[{"path":"$.n","op":"gt","value":9007199254740993}],"action":"deny"}],
	"risk":[{"tenant":"t","modes":{"critical":"block","high":"quarantine"}}]}`
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s, err := Compile("t", d)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if got := s.RiskMode("any", BandCritical); got != ModeBlock {
		t.Errorf("RiskMode(critical) = %q", got)
	}
	// 2^53+1 read exactly: 2^53+1 is not greater than itself, 2^53+2 is.
	if got := s.Evaluate(&Call{Server: "x", Tool: "exec", Arguments: []byte(`{"n":9007199254740993}`)}); got.Action != Allow {
		t.Errorf("n = 2^53+1: %+v", got)
	}
	if got := s.Evaluate(&Call{Server: "x", Tool: "exec", Arguments: []byte(`{"n":9007199254740994}`)}); got.Action != Deny {
		t.Errorf("n = 2^53+2: %+v", got)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# nothing\n", "~", "{}"} {
		d, err := Parse([]byte(in))
		if err != nil || len(d.Rules)+len(d.Drift)+len(d.Risk) != 0 {
			t.Errorf("Parse(%q) = %+v, %v; want an empty document", in, d, err)
		}
	}
}

type want struct{ code, rule, field string }

func TestParseRefusedWhole(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []want
	}{
		{"syntax", "rules: [", []want{{CodeSyntax, "", ""}}},
		{"two documents", "rules: []\n---\nrules: []\n", []want{{CodeSyntax, "", ""}}},
		{"not a mapping", "- a\n- b\n", []want{{CodeBadType, "", ""}}},
		{"unknown top field", "rule: []\n", []want{{CodeUnknownField, "", "rule"}}},
		{"unknown fields everywhere", `
rules:
  - id: r1
    tenant: t
    action: deny
    actoin: allow
    args:
      - path: $.a
        op: eq
        value: 1
        nott: true
drift:
  - tenant: t
    postur: strict
risk:
  - tenant: t
    modes: {high: block}
    mode: x
`, []want{{CodeUnknownField, "r1", "actoin"}, {CodeUnknownField, "r1", "args[0].nott"}, {CodeUnknownField, "drift[0]", "postur"}, {CodeUnknownField, "risk[0]", "mode"}}},
		{"duplicate key", "rules:\n  - id: a\n    id: b\n    tenant: t\n    action: deny\n", []want{{CodeSyntax, "", ""}}},
		{"wrong type", "rules:\n  - id: r1\n    tenant: t\n    action: deny\n    priority: high\n", []want{{CodeBadType, "", ""}}},
		{"every rule error at once", `
rules:
  - tenant: t
    action: deny
  - id: "bad id!"
    tenant: t
    action: deny
  - id: dup
    tenant: t
    action: deny
  - id: dup
    tenant: t
    action: allow
  - id: dup
    tenant: other
    action: allow
  - id: no-tenant
    action: deny
  - id: bad-tenant
    tenant: "a.b"
    action: deny
  - id: globs
    tenant: t
    server: "notes.*"
    tool: "a\tb"
    action: deny
  - id: no-action
    tenant: t
  - id: bad-action
    tenant: t
    action: block
  - id: sanitize-nothing
    tenant: t
    action: sanitize
  - id: redact-on-deny
    tenant: t
    action: deny
    redact: [$.a]
  - id: redact-root
    tenant: t
    action: sanitize
    redact: [$]
`, []want{
			{CodeMissingID, "rules[0]", "id"},
			{CodeBadID, "rules[1]", "id"},
			{CodeDuplicateID, "dup", "id"},
			{CodeMissingTenant, "no-tenant", "tenant"},
			{CodeBadTenant, "bad-tenant", "tenant"},
			{CodeBadGlob, "globs", "server"},
			{CodeBadGlob, "globs", "tool"},
			{CodeBadAction, "no-action", "action"},
			{CodeBadAction, "bad-action", "action"},
			{CodeBadRedact, "sanitize-nothing", "redact"},
			{CodeBadRedact, "redact-on-deny", "redact"},
			{CodeBadPath, "redact-root", "redact[0]"},
		}},
		{"every clause error at once", `
rules:
  - id: c
    tenant: t
    action: deny
    args:
      - {path: "a.b", op: eq, value: 1}
      - {path: "$.a[*]", op: eq, value: 1}
      - {path: "$..a", op: eq, value: 1}
      - {path: "$.a[-1]", op: eq, value: 1}
      - {path: $.a, op: like, value: 1}
      - {path: $.a, op: regex, value: "(unclosed"}
      - {path: $.a, op: regex, value: 5}
      - {path: $.a, op: cidr_match, value: "10.0.0.0/33"}
      - {path: $.a, op: cidr_match, value: ["10.0.0.0/8", 7]}
      - {path: $.a, op: gt, value: "5"}
      - {path: $.a, op: lt}
      - {path: $.a, op: in, value: []}
      - {path: $.a, op: in, value: 3}
      - {path: $.a}
`, []want{
			{CodeBadPath, "c", "args[0].path"},
			{CodeBadPath, "c", "args[1].path"},
			{CodeBadPath, "c", "args[2].path"},
			{CodeBadPath, "c", "args[3].path"},
			{CodeBadOp, "c", "args[4].op"},
			{CodeBadRegex, "c", "args[5].value"},
			{CodeBadValue, "c", "args[6].value"},
			{CodeBadCIDR, "c", "args[7].value"},
			{CodeBadCIDR, "c", "args[8].value"},
			{CodeBadValue, "c", "args[9].value"},
			{CodeBadValue, "c", "args[10].value"},
			{CodeBadValue, "c", "args[11].value"},
			{CodeBadValue, "c", "args[12].value"},
			{CodeBadValue, "c", "args[13].value"},
		}},
		{"settings", `
drift:
  - posture: discovery
  - tenant: t
    server: "a b"
    posture: lax
    on_drift: ignore
    hash: md5
    form: v2
  - tenant: t2
  - tenant: t2
risk:
  - tenant: t
  - tenant: t
    server: s
    modes: {extreme: block, high: deny}
`, []want{
			{CodeMissingTenant, "drift[0]", "tenant"},
			{CodeBadServer, "drift[1]", "server"},
			{CodeBadSetting, "drift[1]", "posture"},
			{CodeBadSetting, "drift[1]", "on_drift"},
			{CodeBadSetting, "drift[1]", "hash"},
			{CodeBadSetting, "drift[1]", "form"},
			{CodeDuplicateSetting, "drift[3]", ""},
			{CodeBadSetting, "risk[0]", "modes"},
			{CodeBadBand, "risk[1]", "modes.extreme"},
			{CodeBadMode, "risk[1]", "modes.high"},
		}},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			d, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", d)
			}
			if d != nil {
				t.Errorf("Parse returned a document with its error")
			}
			var got []want
			for _, e := range Errors(err) {
				got = append(got, want{e.Code, e.Rule, e.Field})
				var c coded.Coder
				if !errors.As(error(e), &c) || c.ErrorCode() != e.Code {
					t.Errorf("%v is not a coded.Coder with its code", e)
				}
			}
			for _, w := range tt.want {
				if w.rule == "" && w.field == "" {
					if !slices.ContainsFunc(got, func(g want) bool { return g.code == w.code }) {
						t.Errorf("missing %s; got %v", w.code, got)
					}
					continue
				}
				if !slices.Contains(got, w) {
					t.Errorf("missing %+v\nin %v\n(err: %v)", w, got, err)
				}
			}
			if len(tt.want) > 1 && len(got) < len(tt.want) {
				t.Errorf("got %d errors, want at least %d: %v", len(got), len(tt.want), got)
			}
		})
	}
}

func TestParseErrorsHaveLines(t *testing.T) {
	_, err := Parse([]byte("rules:\n  - id: a\n    tenant: t\n    action: nope\n"))
	es := Errors(err)
	if len(es) != 1 || es[0].Line != 2 || es[0].Rule != "a" || es[0].Code != CodeBadAction {
		t.Fatalf("errors = %+v", es)
	}
	if s := es[0].Error(); !strings.HasPrefix(s, "policy_bad_action: line 2: a: action: ") {
		t.Errorf("Error() = %q", s)
	}
	if !errors.Is(err, &Error{Code: CodeBadAction}) {
		t.Errorf("errors.Is does not match the code's sentinel")
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, MaxBytes+1))
	if coded.CodeOf(err) != CodeTooLarge {
		t.Fatalf("err = %v", err)
	}
	if _, err := Parse([]byte("rules: [\xff]")); coded.CodeOf(err) != CodeSyntax {
		t.Fatalf("invalid UTF-8: err = %v", err)
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		path string
		want []step
		bad  bool
	}{
		{path: "$", want: nil},
		{path: "$.a.b[0].c", want: []step{{"a", -1}, {"b", -1}, {index: 0}, {"c", -1}}},
		{path: "$['a.b']", want: []step{{"a.b", -1}}},
		{path: `$["it's"]`, want: []step{{"it's", -1}}},
		{path: `$['it\'s \\ ok']`, want: []step{{`it's \ ok`, -1}}},
		{path: "$.é_1-x", want: []step{{"é_1-x", -1}}},
		{path: "$[12][3]", want: []step{{index: 12}, {index: 3}}},
		{path: "", bad: true},
		{path: "a", bad: true},
		{path: "$.", bad: true},
		{path: "$..a", bad: true},
		{path: "$.*", bad: true},
		{path: "$[*]", bad: true},
		{path: "$[-1]", bad: true},
		{path: "$[01]", bad: true},
		{path: "$[1", bad: true},
		{path: "$['a", bad: true},
		{path: `$['a\n']`, bad: true},
		{path: "$[99999999999]", bad: true},
		{path: "$.a b", bad: true},
		{path: "$a", bad: true},
	}
	for _, tt := range tests {
		got, msg := parsePath(tt.path)
		if tt.bad {
			if msg == "" {
				t.Errorf("parsePath(%q) accepted: %v", tt.path, got)
			}
			continue
		}
		if msg != "" || !slices.Equal(got, tt.want) {
			t.Errorf("parsePath(%q) = %v, %q; want %v", tt.path, got, msg, tt.want)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		p, name string
		want    bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"search_*", "search_notes", true},
		{"search_*", "search_", true},
		{"search_*", "xsearch_notes", false},
		{"*_notes", "search_notes", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbYcZ", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "aéc", true},
		{"a*", "b", false},
		{"**", "x", true},
		{"notes", "notes", true},
		{"notes", "notes2", false},
		{"*a*a*a*a*b", strings.Repeat("a", 200), false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.p, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.p, tt.name, got)
		}
	}
}

func TestDecimal(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1", "1.0", 0}, {"1", "1e0", 0}, {"100", "1e2", 0}, {"0.001", "1E-3", 0},
		{"-0", "0", 0}, {"0.0", "-0e5", 0},
		{"9007199254740993", "9007199254740992", 1},
		{"-9007199254740993", "-9007199254740992", -1},
		{"1e400", "1e399", 1}, {"-1e400", "5", -1}, {"1e-400", "0", 1},
		{"12.5", "12.25", 1}, {"0.5", "0.05", 1}, {"10", "9.99", 1},
		{"123456789012345678901234567890", "123456789012345678901234567891", -1},
		{"1.10", "1.1", 0},
	}
	for _, tt := range tests {
		a, ok1 := parseDecimal([]byte(tt.a))
		b, ok2 := parseDecimal([]byte(tt.b))
		if !ok1 || !ok2 {
			t.Fatalf("parseDecimal(%q, %q) refused", tt.a, tt.b)
		}
		if got := a.cmp(&b); got != tt.want {
			t.Errorf("cmp(%s, %s) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
		if got := b.cmp(&a); got != -tt.want {
			t.Errorf("cmp(%s, %s) = %d; want %d", tt.b, tt.a, got, -tt.want)
		}
	}
	for _, bad := range []string{"", "-", "01", "1.", ".5", "1e", "+1", "1x", "0x10", " 1"} {
		if _, ok := parseDecimal([]byte(bad)); ok {
			t.Errorf("parseDecimal(%q) accepted", bad)
		}
	}
}

// TestParseOnDrift: each action on drift is accepted, per tenant and per
// server, and resolves for the server it names; anything else is refused.
func TestParseOnDrift(t *testing.T) {
	for _, tt := range []struct {
		onDrift string
		ok      bool
	}{
		{"block", true},
		{"alert", true},
		{"withhold_changed", true},
		{"withhold", false},
		{"Withhold_Changed", false},
		{"withhold_changed ", false},
	} {
		t.Run(strings.TrimSpace(tt.onDrift), func(t *testing.T) {
			doc := fmt.Sprintf("drift:\n  - tenant: default\n    on_drift: block\n  - tenant: default\n    server: notes\n    on_drift: %q\n", tt.onDrift)
			d, err := Parse([]byte(doc))
			if !tt.ok {
				if err == nil || !slices.ContainsFunc(Errors(err), func(e *Error) bool { return e.Code == CodeBadSetting && e.Field == "on_drift" }) {
					t.Fatalf("Parse = %v, want %s on on_drift", err, CodeBadSetting)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			s, err := Compile("default", d)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if got := s.Drift("notes").OnDrift; got != tt.onDrift {
				t.Errorf("Drift(notes).OnDrift = %q, want %q", got, tt.onDrift)
			}
			if got := s.Drift("other").OnDrift; got != "block" {
				t.Errorf("Drift(other).OnDrift = %q, want the tenant's block", got)
			}
		})
	}
}
