package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// namedRecordJSON is a status record as the drift service writes it now:
// without its baseline's item hashes, naming the baseline version whose
// entry holds them.
func namedRecordJSON(st string, sf *surface.Surface, version int64) []byte {
	rec := status.Record{Tenant: tenant, Status: status.Status(st), Policy: status.Policy{Posture: status.Discovery, OnDrift: status.Block},
		BaselineVersion: version, BaselineItemsVersion: version, BaselineHash: sf.Hash.String(), LiveHash: sf.Hash.String(),
		Reason: "first_baseline", UpdatedAtMs: 1}
	data, err := status.Encode(&rec)
	if err != nil {
		panic(err)
	}
	return data
}

// baselineJSON is a baseline version's entry holding the items its.
func baselineJSON(sf *surface.Surface, version int64, its *status.Items) []byte {
	data, err := json.Marshal(status.Baseline{Version: version, Hash: sf.Hash.String(), ApprovedAtMs: 1, ApprovedBy: "system:tofu", Reason: "first_baseline", Items: its})
	if err != nil {
		panic(err)
	}
	return data
}

// TestGateItemsFromBaselineVersion: a record that names its baseline
// version instead of holding the item hashes is served once the gate has
// fetched that version's entry and checked its items against the baseline
// hash; before (the entry not written yet, as a site's mirror may lag) it
// is withheld, and items that do not make up the hash fail it closed.
func TestGateItemsFromBaselineVersion(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	_, other := fixture(t, "filesystem/2025.8.21.json")
	putStatus := func(server string, value []byte) {
		t.Helper()
		if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, server, "default"), value); err != nil {
			t.Fatal(err)
		}
	}
	putBaseline := func(server string, value []byte) {
		t.Helper()
		if _, err := b.Handles.Baselines.Put(ctx, bus.BaselineKey(tenant, server, "default", 1), value); err != nil {
			t.Fatal(err)
		}
	}
	putBaseline("ready", baselineJSON(sf, 1, status.ItemsOf(sf)))
	putStatus("ready", namedRecordJSON("verified", sf, 1))
	putStatus("late", namedRecordJSON("verified", sf, 1))
	putBaseline("bad", baselineJSON(sf, 1, status.ItemsOf(other)))
	putStatus("bad", namedRecordJSON("verified", sf, 1))

	w, err := NewStatusWatch(b.JS, tenant, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string]*Gate{}
	for _, srv := range []string{"ready", "late", "bad"} {
		if gates[srv], err = w.Gate(srv, testLog(t)); err != nil {
			t.Fatal(err)
		}
	}
	runInBackground(t, w.Run)

	v, ok := view(gates["ready"], "default", 10*time.Second)
	if !ok || !v.Serve || !maps.Equal(v.Items, itemsOf(sf)) {
		t.Fatalf("ready: %v; want served with the version's items", seen("", v, ok))
	}
	if v, ok := view(gates["late"], "default", 300*time.Millisecond); !ok || v.Serve {
		t.Fatalf("late, before its version's entry: %v; want withheld", seen("", v, ok))
	}
	putBaseline("late", baselineJSON(sf, 1, status.ItemsOf(sf)))
	poll.Eventually(t, 15*time.Second, func() error {
		v, ok := view(gates["late"], "default", time.Second)
		if ok && v.Serve && maps.Equal(v.Items, itemsOf(sf)) {
			return nil
		}
		return seen("late served once its version's entry is there", v, ok)
	})
	if v, ok := view(gates["bad"], "default", 5*time.Second); !ok || v.Serve || v.Status != string(status.Unknown) {
		t.Fatalf("bad (items of another surface): %v; want status unknown, withheld", seen("", v, ok))
	}
}

// TestGateCopyKeepsBaselineItems: the status copy keeps the baseline
// versions' entries whose items records name, so that a proxy restarted
// while NATS is unreachable serves a verified server from the copy.
func TestGateCopyKeepsBaselineItems(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	c := openCopies(t, filepath.Join(t.TempDir(), "status"), nil)
	if _, err := b.Handles.Baselines.Put(ctx, bus.BaselineKey(tenant, "mem", "default", 1), baselineJSON(sf, 1, status.ItemsOf(sf))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "mem", "default"), namedRecordJSON("verified", sf, 1)); err != nil {
		t.Fatal(err)
	}
	first, firstWatch := gateWithCopy(t, b.JS, "mem", c)
	stop := runInBackground(t, firstWatch.Run)
	if v, ok := view(first, "default", 10*time.Second); !ok || !v.Serve {
		t.Fatalf("live: %v; want served", seen("", v, ok))
	}
	poll.Eventually(t, 10*time.Second, func() error {
		doc, err := c.read(tenant, "mem")
		if err != nil {
			return fmt.Errorf("the copy: %w", err)
		}
		if len(doc.Baselines) != 1 {
			return fmt.Errorf("the copy holds %d baseline versions, want 1", len(doc.Baselines))
		}
		return nil
	})
	stop()
	stopBus(t, b)
	g, _ := gateWithCopy(t, offlineJS(t), "mem", c)
	checkView(t, g, "default", want{true, "verified", true}, map[string]int{"default": len(sf.Items)})
	if !g.CopyStats().InUse {
		t.Error(errors.New("the copy is not in use with NATS down"))
	}
}
