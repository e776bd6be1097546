package sink

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// TestDecodePartitionedSubjects: an observation stored under a partition
// token (bus.SplitPartition) is audited as the one published without it;
// an event naming another server than its subject is still poison; and an
// event with no id gets the same fallback id whether partitioned or not.
func TestDecodePartitionedSubjects(t *testing.T) {
	s := &Service{cfg: DefaultConfig}
	now := time.UnixMilli(1_760_000_000_000)
	list := func(server string) []byte {
		b, err := proto.Marshal(&mcpdriftv1.ListObservation{EventId: "e1", Tenant: "acme", Server: server, Capture: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := &batch{}
	if p := s.decode(envelope{subject: bus.ListObservationSubject("acme", "s1") + ".3", seq: 1, stamp: now}, list("s1"), b); p != nil {
		t.Fatalf("partitioned list observation: %v", p)
	}
	if b.lists.len() != 1 || b.lists.tenant[0] != "acme" || b.lists.server[0] != "s1" {
		t.Fatalf("rows: tenant %q server %q, want one of acme/s1", b.lists.tenant, b.lists.server)
	}
	if p := s.decode(envelope{subject: bus.CallObservationsSubject("acme", "s1") + ".0", seq: 2, stamp: now},
		marshalBatch(t, batchCalls("s1", 0, 2)), b); p != nil {
		t.Fatalf("partitioned call batch: %v", p)
	}
	if b.calls.len() != 2 {
		t.Fatalf("%d call rows, want 2", b.calls.len())
	}
	p := s.decode(envelope{subject: bus.ListObservationSubject("acme", "s1") + ".3", seq: 3, stamp: now}, list("s2"), &batch{})
	if coded.CodeOf(p) != bus.CodeSubjectMismatch {
		t.Fatalf("s2's observation on s1's partitioned subject: %v, want %s", p, bus.CodeSubjectMismatch)
	}
	plain := envelope{subject: bus.ListObservationSubject("acme", "s1")}
	parted := envelope{subject: bus.ListObservationSubject("acme", "s1") + ".7"}
	if a, b := fallbackID(plain, []byte("x")), fallbackID(parted, []byte("x")); a != b {
		t.Fatalf("fallback ids %s and %s differ with the partition", a, b)
	}
}
