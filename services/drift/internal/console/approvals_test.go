package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
)

// hold stores a pending request as the drift service does when a proxy
// asks, and returns its id.
func (s *stack) hold(tool, args string) string {
	s.t.Helper()
	id := approval.NewID()
	now := time.Now()
	v, err := approval.Encode(&mcpdriftv1.Approval{Request: &mcpdriftv1.ApprovalRequest{Id: id, Tenant: "acme", Server: "notes",
		Proxy: "node-1", Tool: tool, Rule: "hold-etc", Reason: "needs a human", Arguments: []byte(args),
		RequestedAtUnixMs: now.UnixMilli(), ExpiresAtUnixMs: now.Add(time.Hour).UnixMilli()}})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.b.Handles.Approvals.Create(context.Background(), approval.Key("acme", id), v); err != nil {
		s.t.Fatal(err)
	}
	return id
}

// TestHeldCallsPage: the held calls page lists pending requests with their
// arguments as text; approve and deny go through the admin API with the
// session's CSRF token and the write role, and are audited.
func TestHeldCallsPage(t *testing.T) {
	s := startStack(t)
	approveID := s.hold("read", `{"path":"/etc/<script>alert(1)</script>"}`)
	denyID := s.hold("read", `{"path":"/etc/shadow"}`)

	reader := s.client()
	reader.login(readSecret)
	a := reader.get("/approvals")
	must(t, a, http.StatusOK)
	contains(t, a.body, approveID, denyID, "/etc/shadow", "&lt;script&gt;alert(1)&lt;/script&gt;", "read only")
	lacks(t, a.body, "<script>alert", `action="/approvals/`+approveID+`/approve"`)
	// The read role cannot resolve, whatever it posts.
	token := reader.csrf("/approvals")
	must(t, reader.do(http.MethodPost, "/approvals/"+approveID+"/approve", url.Values{"csrf": {token}}, nil), http.StatusForbidden)

	c := s.client()
	c.login(writeSecret)
	a = c.get("/approvals")
	contains(t, a.body, `action="/approvals/`+approveID+`/approve"`, `action="/approvals/`+denyID+`/deny"`)
	// Without the CSRF token nothing is resolved.
	must(t, c.do(http.MethodPost, "/approvals/"+approveID+"/approve", url.Values{}, nil), http.StatusForbidden)
	token = c.csrf("/approvals")
	must(t, c.do(http.MethodPost, "/approvals/"+approveID+"/approve", url.Values{"csrf": {token}, "reason": {"fine"}}, nil), http.StatusSeeOther)
	must(t, c.do(http.MethodPost, "/approvals/"+denyID+"/deny", url.Values{"csrf": {token}, "reason": {"no"}}, nil), http.StatusSeeOther)
	// Twice: refused, the resolution stays.
	a = c.do(http.MethodPost, "/approvals/"+approveID+"/deny", url.Values{"csrf": {token}}, nil)
	must(t, a, http.StatusConflict)
	for id, want := range map[string]string{approveID: approval.Approved, denyID: approval.Denied} {
		e, err := s.b.Handles.Approvals.Get(context.Background(), approval.Key("acme", id))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := approval.Decode(e.Value())
		if err != nil || rec.GetResolution().GetOutcome() != want || rec.GetResolution().GetActor() != "alice" {
			t.Errorf("%s: %v %v, want %s by alice", id, rec.GetResolution(), err, want)
		}
	}
	a = c.get("/approvals?done=denied")
	contains(t, a.body, "No call is waiting.", "Denied: the proxy")
	var seen []string
	for len(seen) < 10 {
		select {
		case act := <-s.actions:
			seen = append(seen, act.Action+":"+act.Actor+":"+act.ApprovalId)
			if act.Action == "deny_call" && act.ApprovalId == denyID && act.Ok && act.Tenant == "acme" && act.Server == "notes" {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no audited deny_call; saw %s", strings.Join(seen, " "))
		}
	}
	t.Fatalf("no audited deny_call; saw %s", strings.Join(seen, " "))
}
