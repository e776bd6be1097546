package console

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPolicyPage: the policy page shows each tenant's stored policy as the
// admin API serves it: rules in evaluation order with their clauses, the
// drift and risk settings, version and who applied it; text from the
// document is escaped; both roles may read it, and the read is audited.
func TestPolicyPage(t *testing.T) {
	s := startStack(t)
	reader := s.client()
	reader.login(readSecret)
	a := reader.get("/policy")
	must(t, a, http.StatusOK)
	contains(t, a.body, "No tenant has a policy")

	doc := `rules:
  - id: low-first
    tenant: acme
    tool: "read_*"
    action: audit
  - id: no-secret-search
    tenant: acme
    server: notes
    tool: "search_*"
    priority: 10
    args:
      - path: $.query
        op: contains
        value: secret
      - path: $.limit
        op: gt
        value: 100
        not: true
    action: deny
    reason: "searching for secrets <b>is not</b> allowed"
  - id: watch-drifted
    tenant: acme
    drifted: true
    action: pending_approval
    shadow: true
drift:
  - tenant: acme
    posture: strict
    on_drift: alert
  - tenant: acme
    server: notes
    guard: false
risk:
  - tenant: acme
    modes:
      critical: block
  - tenant: acme
    server: build-bot
    modes:
      high: allow
`
	req, err := http.NewRequest(http.MethodPut, s.srv.URL+"/v1/policy", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+writeSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: HTTP %d", resp.StatusCode)
	}

	a = reader.get("/policy")
	must(t, a, http.StatusOK)
	contains(t, a.body, `id="tenant-acme"`, "version 1", "applied by alice", `href="/policy" class="on"`,
		`$.query contains &#34;secret&#34;`, `$.limit not gt 100`, "searching for secrets &lt;b&gt;is not&lt;/b&gt; allowed",
		"shadow: recorded, not enforced", "drifted only", "strict", "alert", "every server of the tenant",
		"low: allow, medium: allow, high: allow, critical: block",
		"low: the tenant&#39;s, medium: the tenant&#39;s, high: allow, critical: the tenant&#39;s")
	lacks(t, a.body, "<b>is not</b>")
	// Evaluation order: priority 10 first, then the others as written.
	first, second, third := strings.Index(a.body, `data-rule="no-secret-search"`), strings.Index(a.body, `data-rule="low-first"`), strings.Index(a.body, `data-rule="watch-drifted"`)
	if first < 0 || !(first < second && second < third) {
		t.Errorf("rules not in evaluation order: no-secret-search at %d, low-first at %d, watch-drifted at %d", first, second, third)
	}
	// One tenant, and one without a policy.
	a = reader.get("/policy?tenant=acme")
	contains(t, a.body, `id="tenant-acme"`)
	a = reader.get("/policy?tenant=other")
	must(t, a, http.StatusOK)
	contains(t, a.body, "Tenant other has no policy.")
	a = reader.get("/policy?tenant=bad%20id")
	must(t, a, http.StatusBadRequest)

	// The reads went through the API as the reader, audited.
	deadline := time.After(5 * time.Second)
	for {
		select {
		case act := <-s.actions:
			if act.Action == "policy_list" && act.Actor == "reader" {
				return
			}
		case <-deadline:
			t.Fatal("no audited policy_list by the reader")
		}
	}
}
