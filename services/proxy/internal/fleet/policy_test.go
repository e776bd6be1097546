package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// storedPolicy is the stored record of a policy denying tool "read" of
// tenant for a rule id.
func storedPolicy(t testing.TB, tenant string, version int64, rule string) []byte {
	t.Helper()
	data, err := json.Marshal(policy.Stored{Tenant: tenant, Version: version, Document: policy.Document{Rules: []policy.Rule{
		{ID: rule, Tenant: tenant, Tool: "read", Action: policy.Deny, Reason: "no"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// decided evaluates a call of tool "read" and says what was decided.
func decided(p *Policy) string {
	d, code := p.Evaluate(context.Background(), &policy.Call{Server: "files", Tool: "read", Arguments: []byte(`{}`)})
	if code != "" {
		return "refused " + string(code)
	}
	return string(d.Action) + " " + d.Rule
}

func expectDecided(t *testing.T, p *Policy, want string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		if got := decided(p); got != want {
			return fmt.Errorf("want %q, decided %q (stats %+v)", want, got, p.Stats())
		}
		return nil
	})
}

func TestPolicyBucketIsTheContractsBucket(t *testing.T) {
	if policy.Bucket != bus.BucketPolicy || approval.Bucket != bus.BucketApprovals {
		t.Fatalf("bus names the buckets %q %q, the contracts %q %q", bus.BucketPolicy, bus.BucketApprovals, policy.Bucket, approval.Bucket)
	}
}

// TestPolicyKeepsTheLastGood: no key is no rules; a good value is enforced;
// a bad one (undecodable, another tenant's, not compiling) never replaces
// it and is counted; the copy on disk serves a proxy restarted without
// NATS, and one that was tampered with is ignored (the proxy then fails
// closed, policy_unknown).
func TestPolicyKeepsTheLastGood(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	dir := t.TempDir()
	copies := func() *StatusCopies {
		c, err := OpenStatusCopies(CopyConfig{Dir: dir, Proxy: "node-1", MaxAge: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p, err := NewPolicy(b.JS, "default", time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p.UseCopies(copies())
	stop := runInBackground(t, p.Run)
	expectDecided(t, p, "allow ")

	if _, err := b.Handles.Policy.Put(ctx, "default", storedPolicy(t, "default", 1, "r1")); err != nil {
		t.Fatal(err)
	}
	expectDecided(t, p, "deny r1")
	for i, bad := range [][]byte{
		[]byte(`{"tenant":`),
		storedPolicy(t, "acme", 2, "r2"),
		storedPolicy(t, "default", 3, ""), // a rule without an id does not compile
	} {
		if _, err := b.Handles.Policy.Put(ctx, "default", bad); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 10*time.Second, func() error {
			if st := p.Stats(); st.Rejected != uint64(i+1) {
				return fmt.Errorf("want %d rejected, stats %+v", i+1, st)
			}
			return nil
		})
		if got := decided(p); got != "deny r1" {
			t.Fatalf("after bad value %d the policy enforces %q, want the last good one", i, got)
		}
	}
	if st := p.Stats(); st.Version != 1 || !st.Known {
		t.Errorf("stats %+v, want version 1 known", st)
	}
	stop()

	// Restarted while NATS is unreachable: the copy answers.
	b.Stop()
	again, err := NewPolicy(b.JS, "default", time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	again.UseCopies(copies())
	if got := decided(again); got != "deny r1" {
		t.Errorf("restarted from the copy: %q", got)
	}

	// A copy changed on disk is not believed.
	path := filepath.Join(dir, "default"+policyCopySuffix)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, ' '), 0o600); err != nil {
		t.Fatal(err)
	}
	tampered, err := NewPolicy(b.JS, "default", time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	tampered.UseCopies(copies())
	if got := decided(tampered); got != "refused "+string(session.PolicyUnknown) {
		t.Errorf("with a tampered copy and no NATS: %q", got)
	}
}

// TestPolicyInvalidFirstFailsClosed: when the only value a proxy ever saw
// is bad there is no last good policy: every call is refused.
func TestPolicyInvalidFirstFailsClosed(t *testing.T) {
	b := natstest.StartBus(t)
	if _, err := b.Handles.Policy.Put(context.Background(), "default", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(b.JS, "default", time.Second, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, p.Run)
	expectDecided(t, p, "refused "+string(session.PolicyInvalid))
	if _, err := b.Handles.Policy.Put(context.Background(), "default", storedPolicy(t, "default", 1, "r1")); err != nil {
		t.Fatal(err)
	}
	expectDecided(t, p, "deny r1")
}

// TestApprovalsReadTheResolutionAfterAReconnect: a held call's proxy loses
// its connection; the resolution written meanwhile is read by the watch it
// starts again.
func TestApprovalsReadTheResolutionAfterAReconnect(t *testing.T) {
	b := natstest.StartBus(t)
	// The drift service's part: store the request, answer ok.
	sub, err := b.NC.Subscribe(approval.RequestSubjects, func(m *nats.Msg) {
		r, err := approval.DecodeRequest(m.Data)
		if err == nil {
			err = approval.ValidRequest(r, m.Subject)
		}
		if err != nil {
			t.Errorf("request: %v", err)
			return
		}
		v, _ := approval.Encode(&mcpdriftv1.Approval{Request: r})
		// A request sent again (its answer was late on a loaded machine)
		// finds its record stored: fine, as for the drift service.
		if _, err := b.Handles.Approvals.Create(context.Background(), approval.Key(r.GetTenant(), r.GetId()), v); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			t.Errorf("storing: %v", err)
		}
		_ = m.Respond([]byte(`{"ok":true}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	nc, js := b.Server.Connect(t)
	var waited atomic.Int64 // the clock of the approvals: when the call was held, plus waited
	held := time.Unix(1_900_000_000, 0)
	now := func() time.Time { return held.Add(time.Duration(waited.Load())) }
	ap, err := NewApprovals(js, ApprovalsConfig{Tenant: "default", Proxy: "node-1", Wait: time.Minute, Now: now}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan session.Approval, 1)
	go func() {
		done <- ap.Await(context.Background(), session.ApprovalRequest{Server: "files", Tool: "read", Rule: "hold", Arguments: []byte(`{"path":"/etc"}`)})
	}()
	var key string
	poll.Eventually(t, 10*time.Second, func() error {
		keys, err := b.Handles.Approvals.Keys(context.Background())
		if err != nil || len(keys) != 1 {
			return fmt.Errorf("want one request stored, have %v (%v)", keys, err)
		}
		key = keys[0]
		return nil
	})
	waited.Store(int64(90 * time.Second))
	if n, oldest := ap.Held(); n != 1 || oldest != 90*time.Second {
		t.Errorf("held while waiting: %d calls, the oldest for %v; want 1 for 1m30s", n, oldest)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	e, err := b.Handles.Approvals.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := approval.Decode(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	a.Resolution = &mcpdriftv1.ApprovalResolution{Id: a.GetRequest().GetId(), Tenant: "default", Outcome: approval.Approved, Actor: "alice"}
	v, _ := approval.Encode(a)
	if _, err := b.Handles.Approvals.Update(context.Background(), key, v, e.Revision()); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got.Outcome != session.ApprovalApproved || got.Actor != "alice" || got.ID != a.GetRequest().GetId() {
			t.Errorf("await: %+v", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resolution did not reach the waiting proxy")
	}
	if n := ap.Outcomes(); n[0] != 1 {
		t.Errorf("outcomes %v, want one approved", n)
	}
	if n, oldest := ap.Held(); n != 0 || oldest != 0 {
		t.Errorf("held once resolved: %d calls, the oldest for %v; want none", n, oldest)
	}
}
