package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// TestLastPerSubject checks the batch direct get against what a KV holds:
// the newest value of every key the filter matches, deletes as their
// markers, other keys left out, and no match as an empty answer.
func TestLastPerSubject(t *testing.T) {
	nb := natstest.StartBus(t)
	ctx := context.Background()
	kv := nb.Handles.Status
	for _, kvp := range []struct{ k, v string }{
		{"t.s", "server"}, {"t.s.a", "a1"}, {"t.s.b", "b1"}, {"t.s.a", "a2"}, {"t.s.c", "c1"}, {"t.other.a", "x"},
	} {
		if _, err := kv.PutString(ctx, kvp.k, kvp.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "t.s.c"); err != nil {
		t.Fatal(err)
	}
	msgs, err := bus.LastPerSubject(ctx, nb.JS, "KV_"+bus.BucketStatus, "$KV."+bus.BucketStatus+".t.s.*")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range msgs {
		v := string(m.Data)
		if op := m.Header.Get("KV-Operation"); op != "" {
			v = op
		}
		got[m.Subject] = v
		e, err := kv.Get(ctx, m.Subject[len("$KV."+bus.BucketStatus+"."):])
		if err == nil && e.Revision() != m.Sequence {
			t.Errorf("%s: sequence %d, the KV's revision %d", m.Subject, m.Sequence, e.Revision())
		}
	}
	want := map[string]string{
		"$KV." + bus.BucketStatus + ".t.s.a": "a2",
		"$KV." + bus.BucketStatus + ".t.s.b": "b1",
		"$KV." + bus.BucketStatus + ".t.s.c": "DEL",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	none, err := bus.LastPerSubject(ctx, nb.JS, "KV_"+bus.BucketStatus, "$KV."+bus.BucketStatus+".nobody.*.*")
	if err != nil || len(none) != 0 {
		t.Errorf("no match: %v, %v; want nothing and no error", none, err)
	}
}

// TestReadObject reads objects of one and of several chunks by direct get
// and checks them against ObjectStore.Get; a missing or deleted object is
// ErrObjectNotFound.
func TestReadObject(t *testing.T) {
	nb := natstest.StartBus(t)
	ctx := context.Background()
	obs := nb.Handles.Manifests
	for _, size := range []int{0, 10, 128 << 10, 300 << 10} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			data := bytes.Repeat([]byte{byte(size % 251)}, size)
			for i := range data {
				data[i] = byte(i * 7 % 251)
			}
			name := fmt.Sprintf("obj-%d", size)
			if _, err := obs.PutBytes(ctx, name, data); err != nil {
				t.Fatal(err)
			}
			got, err := bus.ReadObject(ctx, nb.JS, obs, bus.BucketManifests, name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, wrote %d (equal: false)", len(got), len(data))
			}
		})
	}
	if _, err := bus.ReadObject(ctx, nb.JS, obs, bus.BucketManifests, "never-written"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("missing object: %v, want ErrObjectNotFound", err)
	}
	if _, err := obs.PutBytes(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.ReadObject(ctx, nb.JS, obs, bus.BucketManifests, "gone"); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("deleted object: %v, want ErrObjectNotFound", err)
	}
}

// TestPutObject writes objects of no, one and several chunks with
// PutObject and reads them back with the object store's own Get and
// GetInfo, and with ReadObject.
func TestPutObject(t *testing.T) {
	nb := natstest.StartBus(t)
	ctx := context.Background()
	obs := nb.Handles.Manifests
	for _, size := range []int{0, 10, 128 << 10, 300 << 10} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 13 % 251)
			}
			name := fmt.Sprintf("put-%d", size)
			if err := bus.PutObject(ctx, nb.JS, bus.BucketManifests, name, data); err != nil {
				t.Fatal(err)
			}
			info, err := obs.GetInfo(ctx, name)
			if err != nil || info.Size != uint64(size) || info.Deleted {
				t.Fatalf("info %+v, %v: want %d bytes", info, err, size)
			}
			got, err := obs.GetBytes(ctx, name)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ObjectStore.GetBytes: %d bytes, %v; want the %d written", len(got), err, size)
			}
			if got, err = bus.ReadObject(ctx, nb.JS, obs, bus.BucketManifests, name); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadObject: %d bytes, %v; want the %d written", len(got), err, size)
			}
		})
	}
}
