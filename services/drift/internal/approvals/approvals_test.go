package approvals

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

func request(t *testing.T, tenant, server string, wait time.Duration) (*mcpdriftv1.ApprovalRequest, []byte) {
	t.Helper()
	now := time.Now()
	r := &mcpdriftv1.ApprovalRequest{Id: approval.NewID(), Tenant: tenant, Server: server, Proxy: "node-1", Tool: "read",
		Rule: "hold", RequestedAtUnixMs: now.UnixMilli(), ExpiresAtUnixMs: now.Add(wait).UnixMilli()}
	data, err := approval.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return r, data
}

func ask(t *testing.T, b *natstest.Bus, subject string, data []byte) approval.Reply {
	t.Helper()
	msg, err := b.NC.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply approval.Reply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// TestRequestsAndResolutions: a request is stored once (asked again, it
// keeps its resolution), one on another tenant's subject is refused, a
// resolution is written once, and an expired request cannot be resolved;
// what is stored outlives the service.
func TestRequestsAndResolutions(t *testing.T) {
	b := natstest.StartBus(t)
	start := func() (*Service, func()) {
		s, err := New(Deps{NC: b.NC, KV: b.Handles.Approvals, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return s, func() { cancel(); <-done }
	}
	s, stop := start()
	r, data := request(t, "acme", "notes", time.Hour)
	// Run subscribes in its goroutine: ask until it answers.
	var reply approval.Reply
	for range 50 {
		msg, err := b.NC.Request(approval.RequestSubject("acme", "notes"), data, 100*time.Millisecond)
		if err == nil {
			_ = json.Unmarshal(msg.Data, &reply)
			break
		}
	}
	if !reply.OK {
		t.Fatalf("the request was not stored: %+v", reply)
	}
	if got := ask(t, b, approval.RequestSubject("other", "notes"), data); got.OK || got.Code != CodeInvalid {
		t.Errorf("a request on another tenant's subject: %+v", got)
	}
	ctx := context.Background()
	sh, err := s.Resolve(ctx, r.GetId(), true, "alice", "fine")
	if err != nil || sh.State != approval.Approved || sh.Actor != "alice" {
		t.Fatalf("approve: %+v %v", sh, err)
	}
	if got := ask(t, b, approval.RequestSubject("acme", "notes"), data); !got.OK {
		t.Errorf("the same request asked again: %+v", got)
	}
	if _, err := s.Resolve(ctx, r.GetId(), false, "bob", ""); coded.CodeOf(err) != CodeResolved {
		t.Errorf("resolving twice: %v", err)
	}
	stop()

	// Another instance finds what the first stored.
	s2, stop2 := start()
	defer stop2()
	pending, recent, err := s2.List(ctx)
	if err != nil || len(pending) != 0 || len(recent) != 1 || recent[0].State != approval.Approved {
		t.Fatalf("list after a restart: %+v %+v %v", pending, recent, err)
	}
	expired, data := request(t, "acme", "notes", time.Millisecond)
	if got := ask(t, b, approval.RequestSubject("acme", "notes"), data); !got.OK {
		t.Fatalf("storing: %+v", got)
	}
	later, err := New(Deps{NC: b.NC, KV: b.Handles.Approvals, Log: zerolog.Nop(), Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.Resolve(ctx, expired.GetId(), true, "alice", ""); coded.CodeOf(err) != CodeExpired {
		t.Errorf("approving an expired request: %v", err)
	}
	if _, err := s2.Resolve(ctx, approval.NewID(), true, "alice", ""); coded.CodeOf(err) != CodeNotFound {
		t.Errorf("an unknown id: %v", err)
	}
	if _, err := s2.Resolve(ctx, "../x", true, "alice", ""); coded.CodeOf(err) != CodeBadID {
		t.Errorf("a malformed id: %v", err)
	}
}
