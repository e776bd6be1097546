package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const acmePolicy = `
  - id: drifted-writes
    tenant: acme
    server: mem
    tool: "*"
    drifted: true
    action: pending_approval
  - id: staged
    tenant: acme
    shadow: true
    action: deny
    reason: trying it out
  - id: scrub
    tenant: acme
    tool: login
    action: sanitize
    redact: [$.password]
`

func policyKeys(t *testing.T, s *stack) []string {
	t.Helper()
	_, js := s.srv.Connect(t)
	kv, err := js.KeyValue(context.Background(), bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil && err != jetstream.ErrNoKeysFound {
		t.Fatal(err)
	}
	return keys
}

// TestPolicyAPI: a bad document is refused whole with every error coded and
// named by rule, nothing written; a good one is stored per tenant with
// versions; re-applying it changes nothing; clearing empties one tenant;
// test evaluates against the stored policy and the server's drift state;
// every apply is an audited admin action.
func TestPolicyAPI(t *testing.T) {
	s := startStack(t)
	nc, _ := s.srv.Connect(t)
	actions, err := nc.SubscribeSync(bus.Prefix + ".admin.>")
	if err != nil {
		t.Fatal(err)
	}
	// The server has the subscription before the first action is
	// published on another connection (it lost the first one now and then).
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../internal/policy/testdata/issue14.yaml")
	if err != nil {
		t.Fatal(err)
	}
	issuePolicy := string(raw)

	bad := issuePolicy + `  - tenant: default
    posture: lax
rules2: []
`
	bad = strings.Replace(bad, "op: contains", "op: like", 1)
	bad = strings.Replace(bad, "action: deny", "action: deny\n  - id: no-secret-search\n    tenant: default\n    action: allow", 1)
	code, body := s.doRaw("PUT", "/v1/policy", writeSecret, []byte(bad))
	var refused admin.Error
	if code != 400 || json.Unmarshal(body, &refused) != nil || refused.Error.Code != admin.CodePolicyInvalid {
		t.Fatalf("bad document: %d %s", code, body)
	}
	var got []string
	for _, e := range refused.Error.Errors {
		got = append(got, e.Code+" "+e.Rule+" "+e.Field)
	}
	for _, want := range []string{
		policy.CodeBadOp + " no-secret-search args[0].op",
		policy.CodeDuplicateID + " no-secret-search id",
		policy.CodeBadSetting + " drift[1] posture",
		policy.CodeUnknownField + "  rules2",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("refusal lacks %q: %v", want, got)
		}
	}
	if keys := policyKeys(t, s); len(keys) != 0 {
		t.Fatalf("a refused document wrote %v", keys)
	}

	// Applied: one record per tenant, version 1.
	doc := strings.Replace(issuePolicy, "drift:\n", strings.TrimPrefix(acmePolicy, "\n")+"drift:\n", 1)
	code, body = s.doRaw("PUT", "/v1/policy", writeSecret, []byte(doc))
	var applied policy.ApplyResult
	if code != 200 || json.Unmarshal(body, &applied) != nil || len(applied.Applied) != 2 {
		t.Fatalf("apply: %d %s", code, body)
	}
	for _, a := range applied.Applied {
		if a.Version != 1 || !a.Changed || !strings.HasPrefix(a.Hash, "sha256:") {
			t.Errorf("apply: %+v", a)
		}
	}
	// The same again: nothing moves.
	code, body = s.doRaw("PUT", "/v1/policy", writeSecret, []byte(doc))
	if code != 200 || json.Unmarshal(body, &applied) != nil || applied.Applied[0].Changed || applied.Applied[0].Version != 1 {
		t.Fatalf("re-apply: %d %s", code, body)
	}
	// A change to one tenant: only its version moves.
	changed := strings.Replace(doc, "searching for secrets is not allowed", "no secrets", 1)
	code, body = s.doRaw("PUT", "/v1/policy", writeSecret, []byte(changed))
	if code != 200 || json.Unmarshal(body, &applied) != nil {
		t.Fatalf("apply a change: %d %s", code, body)
	}
	versions := map[string]int64{}
	for _, a := range applied.Applied {
		versions[a.Tenant] = a.Version
	}
	if versions["default"] != 2 || versions["acme"] != 1 {
		t.Fatalf("versions after a change to default: %v", versions)
	}

	code, body = s.do("GET", "/v1/policy?tenant=default", readSecret, nil)
	var list []policy.Stored
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 || list[0].Version != 2 ||
		list[0].UpdatedBy != "alice" || list[0].Document.Rules[0].Reason != "no secrets" || len(list[0].Document.Drift) != 1 {
		t.Fatalf("list one tenant: %d %s", code, body)
	}
	code, body = s.do("GET", "/v1/policy", readSecret, nil)
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list) != 2 || list[0].Tenant != "acme" || list[1].Tenant != "default" {
		t.Fatalf("list: %d %s", code, body)
	}

	// Test: the stored policy decides; drift state from the status bucket.
	fx := "../internal/surface/testdata/real/memory/"
	t0 := time.Now()
	s.observe("mem", "o1", fx+"2025.8.4.json", t0)
	s.waitStatus("mem", "verified")
	tests := []struct {
		name   string
		req    policy.TestRequest
		action string
		rule   string
		shadow string
		from   string
	}{
		{"deny", policy.TestRequest{Tenant: "default", Server: "notes", Tool: "search_notes", Args: json.RawMessage(`{"query":"the secret"}`)}, "deny", "no-secret-search", "", "none"},
		{"allow", policy.TestRequest{Tenant: "default", Server: "notes", Tool: "search_notes", Args: json.RawMessage(`{"query":"lunch"}`)}, "allow", "", "", "none"},
		{"unreadable", policy.TestRequest{Tenant: "default", Server: "notes", Tool: "search_notes", Args: json.RawMessage(`{"query":"a","query":"secret"}`)}, "deny", "no-secret-search", "", "none"},
		{"not_drifted", policy.TestRequest{Tenant: "acme", Server: "mem", Tool: "write"}, "allow", "", "staged", "status"},
		{"drifted_override", policy.TestRequest{Tenant: "acme", Server: "mem", Tool: "write", Drifted: ptr(true)}, "pending_approval", "drifted-writes", "", "request"},
		{"risk_block", policy.TestRequest{Tenant: "acme", Server: "mem", Tool: "write", Risk: "block"}, "deny", "", "staged", "request"},
		{"sanitize", policy.TestRequest{Tenant: "acme", Server: "other", Tool: "login", Args: json.RawMessage(`{"user":"u","password":"hunter2"}`)}, "sanitize", "scrub", "staged", "none"},
		{"no_policy", policy.TestRequest{Tenant: "nobody", Server: "x", Tool: "y"}, "allow", "", "", "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.do("POST", "/v1/policy/test", readSecret, tt.req)
			var res policy.TestResult
			if code != 200 || json.Unmarshal(body, &res) != nil || string(res.Action) != tt.action || res.Rule != tt.rule || res.ShadowRule != tt.shadow || res.StateFrom != tt.from {
				t.Fatalf("%d %s; want %s by %q, shadow %q, state from %s", code, body, tt.action, tt.rule, tt.shadow, tt.from)
			}
			if tt.name == "sanitize" && (strings.Contains(string(res.Sanitized), "hunter2") || !strings.Contains(string(res.Sanitized), policy.Redacted)) {
				t.Errorf("sanitized: %s", res.Sanitized)
			}
			if tt.name == "unreadable" && res.Code != policy.CodeUnreadableArgs {
				t.Errorf("unreadable: code %q", res.Code)
			}
		})
	}
	// Drift seen by the drift service gates the rule without an override.
	s.observe("mem", "o2", fx+"2025.9.25.json", t0.Add(time.Second))
	s.waitStatus("mem", "changed")
	code, body = s.do("POST", "/v1/policy/test", readSecret, policy.TestRequest{Tenant: "acme", Server: "mem", Tool: "write"})
	if !strings.Contains(string(body), `"rule":"drifted-writes"`) || !strings.Contains(string(body), `"drifted":true`) || code != 200 {
		t.Fatalf("test on a drifted server: %d %s", code, body)
	}

	// Clearing a tenant: an empty policy, its version moved on.
	code, body = s.doRaw("PUT", "/v1/policy?clear=acme", writeSecret, nil)
	if code != 200 || !strings.Contains(string(body), `"tenant":"acme","version":2`) || !strings.Contains(string(body), `"cleared":true`) {
		t.Fatalf("clear: %d %s", code, body)
	}
	code, body = s.do("GET", "/v1/policy?tenant=acme", readSecret, nil)
	list = nil
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 || len(list[0].Document.Rules) != 0 {
		t.Fatalf("after clear: %d %s", code, body)
	}

	for _, tt := range []struct {
		name, method, path, secret string
		body                       []byte
		status                     int
		code                       string
	}{
		{"read_cannot_apply", "PUT", "/v1/policy", readSecret, raw, 403, "forbidden"},
		{"no_token", "GET", "/v1/policy", "", nil, 401, "unauthenticated"},
		{"empty_document", "PUT", "/v1/policy", writeSecret, []byte("# nothing\n"), 400, "bad_request"},
		{"clear_and_name", "PUT", "/v1/policy?clear=default", writeSecret, raw, 400, "policy_clear_named"},
		{"clear_bad_id", "PUT", "/v1/policy?clear=a.b", writeSecret, nil, 400, "invalid_id"},
		{"list_bad_tenant", "GET", "/v1/policy?tenant=a.b", readSecret, nil, 400, "invalid_id"},
		{"test_bad_body", "POST", "/v1/policy/test", readSecret, []byte(`{"tenant":"t","server":"s","tool":"x","bogus":1}`), 400, "bad_request"},
		{"test_no_tool", "POST", "/v1/policy/test", readSecret, []byte(`{"tenant":"t","server":"s"}`), 400, "bad_request"},
		{"test_bad_risk", "POST", "/v1/policy/test", readSecret, []byte(`{"tenant":"t","server":"s","tool":"x","risk":"panic"}`), 400, "bad_request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.doRaw(tt.method, tt.path, tt.secret, tt.body)
			if code != tt.status || errorCode(body) != tt.code {
				t.Fatalf("%d %s; want %d %s", code, body, tt.status, tt.code)
			}
		})
	}

	// Audited: who applied what (the document's hash), refusals included.
	seen := map[string]bool{}
	wants := []string{"policy_apply alice false policy_invalid ", "policy_apply alice true  ", "policy_apply alice true  acme",
		"policy_apply reader false forbidden ", "policy_list reader true  default", "policy_test reader true  acme"}
	poll.Eventually(t, 15*time.Second, func() error {
		for {
			m, err := actions.NextMsg(10 * time.Millisecond)
			if err != nil {
				break
			}
			var act struct {
				Action, Actor, Tenant, Hash string
				Ok                          bool
				ErrorCode                   string `json:"error_code"`
				ErrorMessage                string `json:"error_message"`
			}
			if err := json.Unmarshal(m.Data, &act); err != nil {
				t.Fatalf("admin action is not JSON: %s", m.Data)
			}
			if act.Action == "policy_apply" && act.Ok && !strings.HasPrefix(act.Hash, "sha256:") {
				t.Errorf("an apply audited without the document's hash: %s", m.Data)
			}
			if act.ErrorCode == admin.CodePolicyInvalid && !strings.Contains(act.ErrorMessage, "policy_bad_op") {
				t.Errorf("a refusal audited without its errors: %s", m.Data)
			}
			seen[fmt.Sprint(act.Action, " ", act.Actor, " ", act.Ok, " ", act.ErrorCode, " ", act.Tenant)] = true
		}
		for _, want := range wants {
			if !seen[want] {
				return fmt.Errorf("no admin action %q among %v", want, seen)
			}
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }
