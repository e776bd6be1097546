package policystore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// racingKV is the real policy bucket, with another writer that changes
// one key just before this store's compare-and-set on it.
type racingKV struct {
	jetstream.KeyValue
	key string
}

func (k *racingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if key == k.key {
		if _, err := k.KeyValue.Put(ctx, key, []byte(`{"tenant":"`+key+`","version":41,"hash":"other"}`)); err != nil {
			return 0, err
		}
	}
	return k.KeyValue.Update(ctx, key, value, rev)
}

func doc(t *testing.T, tenants ...string) *policy.Document {
	t.Helper()
	var d policy.Document
	for _, tn := range tenants {
		d.Rules = append(d.Rules, policy.Rule{ID: "r", Tenant: tn, Tool: "rm", Action: policy.Deny})
	}
	if err := policy.Validate(&d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestApplyConflictRestores: a write that loses its compare-and-set to
// another writer fails the apply with policy_conflict, and what the apply
// had written already is undone: an updated record is restored, a created
// one deleted.
func TestApplyConflictRestores(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := bus.Setup(ctx, js, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(h.Policy, nil)
	if _, err := s.Apply(ctx, doc(t, "a", "b"), nil, "alice"); err != nil {
		t.Fatal(err)
	}
	before, err := h.Policy.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	racing := New(&racingKV{KeyValue: h.Policy, key: "b"}, nil)
	d := doc(t, "a", "a0", "b")
	for i := range d.Rules {
		d.Rules[i].Action = policy.Audit // a and b change too
	}
	_, err = racing.Apply(ctx, d, nil, "bob")
	if coded.CodeOf(err) != CodeConflict {
		t.Fatalf("Apply = %v; want %s", err, CodeConflict)
	}
	after, err := h.Policy.Get(ctx, "a")
	if err != nil || string(after.Value()) != string(before.Value()) {
		t.Fatalf("a after the failed apply: %v %s; want %s", err, after.Value(), before.Value())
	}
	if _, err := h.Policy.Get(ctx, "a0"); err != jetstream.ErrKeyNotFound {
		t.Fatalf("a0, created by the failed apply, is still there: %v", err)
	}
	var b policy.Stored
	e, _ := h.Policy.Get(ctx, "b")
	if err := json.Unmarshal(e.Value(), &b); err != nil || b.Version != 41 {
		t.Fatalf("b is the other writer's: %s", e.Value())
	}
	// Applied again, it goes through: versions move on from what is stored.
	applied, err := s.Apply(ctx, d, nil, "bob")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"a": 2, "a0": 1, "b": 42}
	for _, a := range applied {
		if !a.Changed || a.Version != want[a.Tenant] {
			t.Errorf("%+v; want version %d", a, want[a.Tenant])
		}
	}
	if st, err := s.Get(ctx, "a"); err != nil || st.UpdatedBy != "bob" || st.Document.Rules[0].Action != policy.Audit {
		t.Errorf("Get(a) = %+v, %v", st, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 3 || list[0].Tenant != "a" || list[2].Tenant != "b" {
		t.Errorf("List = %+v, %v", list, err)
	}
	if st, err := s.Get(ctx, "nobody"); st != nil || err != nil {
		t.Errorf("Get(nobody) = %+v, %v", st, err)
	}
}
