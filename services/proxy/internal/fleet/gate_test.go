package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

const tenant = "acme"

// statusJSON is a status record as an earlier drift service wrote it,
// without its baseline's item hashes.
func statusJSON(status, onDrift, baseline string) []byte {
	return fmt.Appendf(nil, `{"tenant":%q,"status":%q,"policy":{"posture":"discovery","on_drift":%q,"guard":false},`+
		`"baseline_version":1,"baseline_hash":%q,"live_hash":%q,"reason":"drift","updated_at_ms":1}`,
		tenant, status, onDrift, baseline, baseline)
}

// recordJSON is a status record as the drift service writes it, with the
// item hashes of its baseline sf.
func recordJSON(st, onDrift string, sf *surface.Surface) []byte {
	rec := status.Record{Tenant: tenant, Status: status.Status(st), Policy: status.Policy{Posture: status.Discovery, OnDrift: onDrift},
		BaselineVersion: 1, BaselineHash: sf.Hash.String(), BaselineItems: status.ItemsOf(sf), LiveHash: sf.Hash.String(),
		Reason: "drift", UpdatedAtMs: 1}
	data, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	return data
}

func itemsOf(sf *surface.Surface) map[session.ItemKey]surface.Digest {
	m := map[session.ItemKey]surface.Digest{}
	for _, it := range sf.Items {
		m[session.ItemKey{Kind: it.Kind, Name: it.Name}] = it.Hash
	}
	return m
}

func startGate(t *testing.T, b *natstest.Bus, server string) *Gate {
	t.Helper()
	g, w := watchedGate(t, b.JS, tenant, server)
	runInBackground(t, w.Run)
	return g
}

// view asks as a session that awaits the verdict on a surface it published.
func view(g *Gate, variant string, wait time.Duration) (session.View, bool) {
	return g.View(context.Background(), variant, true, wait)
}

func TestGateView(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	// The manifests object store is empty: the gate takes the item hashes
	// from the record (it once read and parsed the baseline manifest).
	_, sf := fixture(t, "memory/2025.9.25.json")
	// Item hashes labelled with a surface hash they do not make up.
	_, other := fixture(t, "memory/2025.11.25.json")
	mislabelled := status.Record{Tenant: tenant, Status: status.Verified, Policy: status.Policy{Posture: status.Discovery, OnDrift: status.Block},
		BaselineVersion: 1, BaselineHash: other.Hash.String(), BaselineItems: status.ItemsOf(sf)}
	mislabelled.BaselineItems.Surface = other.Hash.String()
	notItsHash, err := json.Marshal(mislabelled)
	if err != nil {
		t.Fatal(err)
	}
	want := itemsOf(sf)
	// Changed under withhold_changed, live manifest other than the
	// baseline: served only once the drift service found its instructions
	// the baseline's.
	withheld := func(finding *status.InstructionsFinding) []byte {
		rec := status.Record{Tenant: tenant, Status: status.Changed, Policy: status.Policy{Posture: status.Discovery, OnDrift: status.WithholdChanged},
			BaselineVersion: 1, BaselineHash: sf.Hash.String(), BaselineItems: status.ItemsOf(sf), LiveHash: other.Hash.String(),
			Instructions: finding, Reason: "drift", UpdatedAtMs: 1}
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	tests := []struct {
		name       string
		value      []byte
		wantStatus string
		wantServe  bool
		wantItems  bool
	}{
		{"verified_serves_baseline_items", recordJSON("verified", "block", sf), "verified", true, true},
		{"verified_alert_serves", recordJSON("verified", "alert", sf), "verified", true, true},
		{"changed_alert_serves", recordJSON("changed", "alert", sf), "changed", true, true},
		{"changed_block_withholds", recordJSON("changed", "block", sf), "changed", false, true},
		{"changed_withhold_changed_serves", withheld(&status.InstructionsFinding{Baseline: sf.Hash.String(), Live: other.Hash.String()}), "changed", true, true},
		{"changed_withhold_changed_instructions_changed", withheld(&status.InstructionsFinding{Baseline: sf.Hash.String(), Live: other.Hash.String(), Changed: true}), "changed", false, true},
		{"changed_withhold_changed_not_compared", withheld(nil), "changed", false, true},
		{"verified_withhold_changed_serves", recordJSON("verified", "withhold_changed", sf), "verified", true, true},
		{"quarantined_withholds", recordJSON("quarantined", "alert", sf), "quarantined", false, true},
		{"pending_without_baseline_withholds", statusJSON("pending", "block", ""), "pending", false, false},
		{"items_missing_fails_closed", statusJSON("verified", "block", sf.Hash.String()), "verified", false, false},
		{"items_not_its_hash_is_unknown", notItsHash, "unknown", false, false},
		{"unreadable_record_fails_closed", []byte(`{"status":`), "unknown", false, false},
		{"future_status_withholds", recordJSON("reviewing", "alert", sf), "reviewing", false, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := fmt.Sprintf("srv%d", i)
			g := startGate(t, b, server)
			if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, server, "default"), tt.value); err != nil {
				t.Fatal(err)
			}
			v, ok := view(g, "default", 10*time.Second)
			if !ok {
				t.Fatal("View: ok false, want the record")
			}
			if v.Status != tt.wantStatus || v.Serve != tt.wantServe {
				t.Errorf("View = status %q serve %v, want %q %v", v.Status, v.Serve, tt.wantStatus, tt.wantServe)
			}
			if wantAlert := bytes.Contains(tt.value, []byte(`"alert"`)); v.Alert != wantAlert {
				t.Errorf("View alert %v, want %v", v.Alert, wantAlert)
			}
			if wantWithhold := bytes.Contains(tt.value, []byte(`"withhold_changed"`)); v.Withhold != wantWithhold {
				t.Errorf("View withhold %v, want %v", v.Withhold, wantWithhold)
			}
			if got := v.Items != nil; got != tt.wantItems {
				t.Fatalf("View items present %v, want %v", got, tt.wantItems)
			}
			if tt.wantItems && !maps.Equal(v.Items, want) {
				t.Errorf("View items differ from the baseline manifest's: got %d items, want %d", len(v.Items), len(want))
			}
		})
	}
}

func TestGateFirstSight(t *testing.T) {
	b := natstest.StartBus(t)
	g := startGate(t, b, "fresh")

	start := time.Now()
	if v, ok := view(g, "default", 300*time.Millisecond); ok {
		t.Fatalf("View of a server never seen = %+v, want ok false", v)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("View gave up after %v; it should wait for its context (300ms)", waited)
	}

	// A View waiting when the record is written sees it.
	got := make(chan bool, 1)
	go func() {
		v, ok := view(g, "v123", 20*time.Second)
		got <- ok && v.Status == "pending"
	}()
	if _, err := b.Handles.Status.Put(context.Background(), bus.StatusKey(tenant, "fresh", "v123"), statusJSON("pending", "block", "")); err != nil {
		t.Fatal(err)
	}
	if !<-got {
		t.Error("waiting View did not see the record written meanwhile")
	}
	// Another variant of the same server is still unknown, and another
	// server's key is not seen at all.
	if _, err := b.Handles.Status.Put(context.Background(), bus.StatusKey(tenant, "fresher", "default"), statusJSON("verified", "block", "")); err != nil {
		t.Fatal(err)
	}
	if _, ok := view(g, "default", 200*time.Millisecond); ok {
		t.Error("View of variant default: ok true, want false (only v123 and another server have records)")
	}
}

func TestGateFollowsRecord(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf1 := fixture(t, "memory/2025.9.25.json")
	_, sf2 := fixture(t, "memory/2026.8.31.json")
	g := startGate(t, b, "mem")
	key := bus.StatusKey(tenant, "mem", "default")

	steps := []struct {
		name       string
		value      []byte // nil deletes the key
		wantOK     bool
		wantStatus string
		wantServe  bool
		wantHash   string
	}{
		{"first_baseline", recordJSON("verified", "block", sf1), true, "verified", true, sf1.Hash.String()},
		{"drift_withholds", recordJSON("changed", "block", sf1), true, "changed", false, sf1.Hash.String()},
		{"approval_moves_baseline", recordJSON("verified", "block", sf2), true, "verified", true, sf2.Hash.String()},
		{"deleted_is_unknown", nil, false, "", false, ""},
	}
	for _, st := range steps {
		if st.value == nil {
			if err := b.Handles.Status.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		} else if _, err := b.Handles.Status.Put(ctx, key, st.value); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 10*time.Second, func() error {
			v, ok := view(g, "default", 50*time.Millisecond)
			if ok == st.wantOK && v.Status == st.wantStatus && v.Serve == st.wantServe && v.BaselineHash == st.wantHash {
				return nil
			}
			return seen(fmt.Sprintf("%s: %s (serve %v, baseline %q, known %v)", st.name, st.wantStatus, st.wantServe, st.wantHash, st.wantOK), v, ok)
		})
		if v, ok := view(g, "default", time.Second); ok && st.wantServe {
			want := sf1
			if st.wantHash == sf2.Hash.String() {
				want = sf2
			}
			if !maps.Equal(v.Items, itemsOf(want)) {
				t.Errorf("%s: items are not those of baseline %s", st.name, st.wantHash)
			}
		}
	}
}

// TestGateWatchOutlivesBind: the status watch keeps running after the bind
// deadline has passed; it once shared that deadline and was closed and
// restarted every ten seconds, missing updates in between.
func TestGateWatchOutlivesBind(t *testing.T) {
	b := natstest.StartBus(t)
	g, w := watchedGate(t, b.JS, tenant, "mem")
	w.bindTimeout = 50 * time.Millisecond
	runInBackground(t, w.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if n := w.Watches(); n != 1 {
			return fmt.Errorf("%d status watches started, want 1", n)
		}
		return nil
	})
	time.Sleep(10 * w.bindTimeout) // well past the bind deadline
	key := bus.StatusKey(tenant, "mem", "default")
	if _, err := b.Handles.Status.Put(context.Background(), key, statusJSON("changed", "block", "")); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g, "default", 50*time.Millisecond)
		if ok && v.Status == "changed" {
			return nil
		}
		return seen("the record's changed", v, ok)
	})
	if n := w.Watches(); n != 1 {
		t.Errorf("the status watch was started %d times, want once", n)
	}
}

// TestGateItemsArriveLater: a record written by an earlier drift service,
// without its baseline's item hashes, is not served; once the drift
// service writes them (on the next listing of the variant, docs/bus.md)
// it is.
func TestGateItemsArriveLater(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	g := startGate(t, b, "late")
	key := bus.StatusKey(tenant, "late", "default")
	if _, err := b.Handles.Status.Put(ctx, key, statusJSON("verified", "block", sf.Hash.String())); err != nil {
		t.Fatal(err)
	}
	if v, ok := view(g, "default", 5*time.Second); !ok || v.Serve || v.Status != "verified" {
		t.Fatalf("View before the items are written = %+v, %v; want ok, verified, not served", v, ok)
	}
	if _, err := b.Handles.Status.Put(ctx, key, recordJSON("verified", "block", sf)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g, "default", time.Second)
		if ok && v.Serve && maps.Equal(v.Items, itemsOf(sf)) {
			return nil
		}
		return seen(fmt.Sprintf("the record served with its %d items", len(itemsOf(sf))), v, ok)
	})
}

func TestGateSurvivesNATSRestart(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	g := startGate(t, b, "mem")
	if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "mem", "default"), recordJSON("verified", "block", sf)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "mem", "vq"), recordJSON("quarantined", "block", sf)); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g, "default", time.Second)
		if !ok || !v.Serve || len(v.Items) == 0 {
			return seen("default served with its items", v, ok)
		}
		if q, qok := view(g, "vq", time.Second); !qok || q.Serve {
			return seen("vq withheld", q, qok)
		}
		return nil
	})

	port := stopBus(t, b)

	tests := []struct {
		name      string
		variant   string
		wantOK    bool
		wantServe bool
	}{
		{"verified_stays_verified", "default", true, true},
		{"quarantined_stays_withheld", "vq", true, false},
		{"unknown_stays_unknown", "never", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			v, ok := view(g, tt.variant, 2*time.Second)
			if ok != tt.wantOK || v.Serve != tt.wantServe {
				t.Errorf("View while NATS is down = %+v, %v; want ok %v serve %v", v, ok, tt.wantOK, tt.wantServe)
			}
			if tt.wantServe && len(v.Items) != len(sf.Items) {
				t.Errorf("cached items: %d, want %d", len(v.Items), len(sf.Items))
			}
			if waited := time.Since(start); waited > time.Second {
				t.Errorf("View took %v while NATS is down; it should answer from memory at once", waited)
			}
		})
	}

	restartBus(t, b, port)
	// The drift service writes a verdict after the outage: the gate's new
	// watch must deliver it.
	poll.Eventually(t, 30*time.Second, func() error {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := b.Handles.Status.Put(wctx, bus.StatusKey(tenant, "mem", "default"), recordJSON("changed", "block", sf)); err != nil {
			return fmt.Errorf("writing the status record after the restart: %w", err)
		}
		return nil
	})
	poll.Eventually(t, 30*time.Second, func() error {
		v, ok := view(g, "default", time.Second)
		if ok && v.Status == "changed" && !v.Serve {
			return nil
		}
		return seen("changed and withheld, once the watch resumed after NATS came back", v, ok)
	})
}

func TestNewGateRejectsBadIDs(t *testing.T) {
	b := natstest.StartBus(t)
	for _, tt := range []struct{ name, tenant, server string }{
		{"empty_tenant", "", "fs"},
		{"dotted_server", "acme", "fs.x"},
		{"wildcard_server", "acme", "*"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewStatusWatch(b.JS, tt.tenant, testLog(t))
			if err == nil {
				_, err = w.Gate(tt.server, testLog(t))
			}
			if err == nil {
				t.Errorf("a gate of server %q in tenant %q: nil error", tt.server, tt.tenant)
			}
		})
	}
}

// A View that awaits no verdict waits only while the gate is loading the
// records that exist: a record there before the gate started is seen, and
// an unknown variant is answered at once after the load (first sight does
// not stall an initialize).
func TestGateViewNotAwaiting(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "known", "default"), recordJSON("verified", "block", sf)); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, b, "known")
	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if v, ok := g.View(long, "default", false, 0); !ok || !v.Serve {
		t.Fatalf("the record there before the gate started: %+v %v", v, ok)
	}
	// The record is answered as soon as the watch delivered it, which can
	// be before the watch's last initial value: the load ends a little
	// later.
	poll.Eventually(t, 10*time.Second, func() error {
		if !g.Watching() {
			return errors.New("Watching false after the load")
		}
		return nil
	})
	if v, ok := g.View(long, "never-seen", false, 0); ok || long.Err() != nil {
		t.Fatalf("an unknown variant: %+v %v, waited for its context: %v", v, ok, long.Err())
	}
}

// TestGateServerHold: the server record's hold withholds every listing
// variant, those with a record and those without; only the record saying
// held false (or its deletion) serves them again, and a record that cannot
// be read holds the server.
func TestGateServerHold(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	server := "held"
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := b.Handles.Status.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	// Held before the proxy starts: its first answer already withholds.
	put(bus.ServerKey(tenant, server), []byte(`{"tenant":"acme","server":"held","held":true,"held_by":"alice","updated_at_ms":1}`))
	put(bus.StatusKey(tenant, server, "v1"), recordJSON("verified", "block", sf))
	g := startGate(t, b, server)

	type want struct {
		ok     bool
		status string
		serve  bool
	}
	check := func(step string, variant string, w want) {
		t.Helper()
		poll.Eventually(t, 10*time.Second, func() error {
			v, ok := view(g, variant, 50*time.Millisecond)
			if ok == w.ok && v.Status == w.status && v.Serve == w.serve {
				return nil
			}
			return seen(fmt.Sprintf("%s: %s (serve %v, known %v)", step, w.status, w.serve, w.ok), v, ok)
		})
	}
	steps := []struct {
		name   string
		value  []byte // the server record; nil deletes it
		v1, v9 want
		serves bool
	}{
		{"held_at_start", nil, want{true, "quarantined", false}, want{true, "quarantined", false}, false},
		{"released", []byte(`{"held":false,"released_by":"bob"}`), want{true, "verified", true}, want{false, "", false}, true},
		{"held_again", []byte(`{"held":true}`), want{true, "quarantined", false}, want{true, "quarantined", false}, false},
		{"deleted", nil, want{true, "verified", true}, want{false, "", false}, true},
		{"unreadable_holds", []byte(`{"held":`), want{true, "quarantined", false}, want{true, "quarantined", false}, false},
		{"no_held_field_holds", []byte(`{"first_variant":"v1"}`), want{true, "quarantined", false}, want{true, "quarantined", false}, false},
		{"claim_only_serves", []byte(`{"held":false,"first_variant":"v1"}`), want{true, "verified", true}, want{false, "", false}, true},
	}
	// There is no implicit variant: a session that named none is answered
	// nothing at once (quarantined while the server is held).
	put(bus.StatusKey(tenant, server, "default"), recordJSON("verified", "block", sf))
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			switch {
			case i == 0:
			case st.value == nil:
				if err := b.Handles.Status.Delete(ctx, bus.ServerKey(tenant, server)); err != nil {
					t.Fatal(err)
				}
			default:
				put(bus.ServerKey(tenant, server), st.value)
			}
			check("variant with a record", "v1", st.v1)
			check("variant without a record", "v9", st.v9)
			start := time.Now()
			if v, ok := view(g, "", 5*time.Second); ok != st.v9.ok || v.Status != st.v9.status || v.Serve || time.Since(start) > 2*time.Second {
				t.Errorf("View of no variant = %+v %v after %v, want %+v at once", v, ok, time.Since(start), st.v9)
			}
			if g.Serving() != st.serves {
				t.Errorf("Serving() = %v, want %v", g.Serving(), st.serves)
			}
		})
	}
}

// TestGateHoldRemovedWhileAway: a hold lifted while the proxy was not
// watching is forgotten by the next watch's initial values.
func TestGateHoldRemovedWhileAway(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "away", "v1"), recordJSON("verified", "block", sf)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handles.Status.Put(ctx, bus.ServerKey(tenant, "away"), []byte(`{"held":true}`)); err != nil {
		t.Fatal(err)
	}
	g := startGate(t, b, "away")
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g, "v1", 50*time.Millisecond)
		if ok && v.Status == "quarantined" {
			return nil
		}
		return seen("held (quarantined)", v, ok)
	})
	g.mu.Lock()
	g.held = true // as a watch left it
	g.mu.Unlock()
	g.retain(map[string]bool{"v1": true}, false)
	if v, ok := view(g, "v1", 50*time.Millisecond); !ok || !v.Serve {
		t.Fatalf("after a watch without the server record: %+v %v", v, ok)
	}
}

// TestGateHeldFromTheStart: a proxy that starts while its server is held
// never serves it, not even between the variant records' arrival and the
// server record's: the first answer is already quarantined.
func TestGateHeldFromTheStart(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	for round := range 10 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			server := fmt.Sprint("start", round)
			if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, server, "v1"), recordJSON("verified", "block", sf)); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Handles.Status.Put(ctx, bus.ServerKey(tenant, server), []byte(`{"held":true}`)); err != nil {
				t.Fatal(err)
			}
			g := startGate(t, b, server)
			for !g.Watching() {
				if v, ok := g.View(ctx, "v1", false, 5*time.Second); ok && (v.Serve || v.Status != "quarantined") {
					t.Fatalf("a held server answered %+v while the watch started", v)
				}
			}
			if v, ok := view(g, "v1", time.Second); !ok || v.Serve || v.Status != "quarantined" {
				t.Fatalf("a held server: %+v %v", v, ok)
			}
		})
	}
}
