package settings

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// entry is one value of the policy bucket as a watch delivers it.
type entry struct {
	key   string
	value []byte
	rev   uint64
	op    jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return policy.Bucket }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// TestWatchNotifiesChanges: a new policy, a new revision of it and its
// removal are each notified once; the same values delivered again (a
// watch started again after a failure) are not; Revision follows the
// highest revision taken in.
func TestWatchNotifiesChanges(t *testing.T) {
	w := &Watch{log: zerolog.Nop(), policies: map[string]*policy.Set{}, revs: map[string]uint64{}, loaded: make(chan struct{})}
	var notified []string
	w.Notify(func(tenant string) { notified = append(notified, tenant) })
	stored, err := json.Marshal(policy.Stored{Tenant: "acme", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	put := func(rev uint64) entry { return entry{key: "acme", value: stored, rev: rev, op: jetstream.KeyValuePut} }
	del := entry{key: "acme", rev: 7, op: jetstream.KeyValueDelete}
	for i, step := range []struct {
		e        entry
		notified int
		tenants  int
	}{
		{put(5), 1, 1},
		{put(5), 1, 1}, // delivered again
		{put(6), 2, 1},
		{del, 3, 0},
		{del, 3, 0}, // delivered again
		{put(8), 4, 1},
	} {
		w.apply(step.e)
		if len(notified) != step.notified || w.Tenants() != step.tenants || w.Revision() != step.e.rev {
			t.Fatalf("step %d (revision %d): %d notified, %d tenants, revision %d; want %d, %d, %d",
				i, step.e.rev, len(notified), w.Tenants(), w.Revision(), step.notified, step.tenants, step.e.rev)
		}
	}
}
