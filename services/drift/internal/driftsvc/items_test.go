package driftsvc

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// itemsOfFixture is what the record must carry for a stored manifest.
func itemsOfFixture(t *testing.T, path string) *status.Items {
	t.Helper()
	return status.ItemsOf(parseFixture(t, path))
}

func parseFixture(t *testing.T, path string) *surface.Surface {
	t.Helper()
	return parseFixtureForm(t, path, surface.FormLatest)
}

func parseFixtureForm(t *testing.T, path string, form surface.Form) *surface.Surface {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{Form: form})
	if err != nil {
		t.Fatal(err)
	}
	return sf
}

func sameItems(a, b *status.Items) bool {
	return a != nil && b != nil && a.Surface == b.Surface && slices.Equal(a.Listed, b.Listed) && slices.Equal(a.Items, b.Items)
}

// baselineItems are the baseline's item hashes of r as a proxy finds them:
// in the baseline version's entry it names, or in the record itself.
func (e *env) baselineItems(t *testing.T, r *state.Record) *status.Items {
	t.Helper()
	if !r.ItemsInBaseline() {
		return r.BaselineItems
	}
	if r.BaselineItems != nil {
		t.Fatalf("the stored record holds the items its baseline version %d holds", r.BaselineVersion)
	}
	en, err := e.h.Baselines.Get(context.Background(), bus.BaselineKey(r.Tenant, r.Server, r.Variant, r.BaselineItemsVersion))
	if err != nil {
		t.Fatal(err)
	}
	b, err := status.DecodeBaseline(en.Value())
	if err != nil {
		t.Fatal(err)
	}
	return b.Items
}

// TestRecordCarriesFingerprintItems: the baseline's item hashes are the
// fingerprint event's, kept in the baseline version's entry that the record
// names (the record does not hold them, nor the live ones); an approve reads
// the live manifest's from the stored manifest, so that a proxy learns them
// from the status and baselines buckets alone.
func TestRecordCarriesFingerprintItems(t *testing.T) {
	e := newEnv(t)
	a, b := e.manifest(fixA), e.manifest(fixB)
	svc, _ := e.start(Config{})
	t0 := time.Now()

	e.publish("mem", "o1", a, "", t0, "")
	r := e.waitVariant(svc, "mem", "v0", func(r *state.Record) bool { return r.Status == state.Verified })
	if !sameItems(e.baselineItems(t, r), itemsOfFixture(t, fixA)) || !r.Serve() || !r.ItemsInBaseline() {
		t.Fatalf("first baseline: items %+v serve %v named %v", e.baselineItems(t, r), r.Serve(), r.ItemsInBaseline())
	}
	if _, err := e.baselineItems(t, r).Verify(); err != nil {
		t.Fatal(err)
	}
	e.publish("mem", "o2", b, "", t0.Add(time.Second), "")
	r = e.waitVariant(svc, "mem", "v0", func(r *state.Record) bool { return r.Status == state.Changed })
	if r.LiveItems != nil || !e.baselineItems(t, r).Of(a) {
		t.Fatalf("drift: live items %+v baseline items of %v", r.LiveItems, e.baselineItems(t, r).Of(a))
	}
	v, _, err := svc.Approve(context.Background(), "acme", "mem", "v0", b, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Variants[0]; !sameItems(e.baselineItems(t, &got), itemsOfFixture(t, fixB)) || got.LiveItems != nil || !got.Serve() {
		t.Fatalf("approved: baseline items %+v live %+v serve %v", e.baselineItems(t, &got), got.LiveItems, got.Serve())
	}

	// A fingerprint whose items do not make up its hash: no items kept,
	// and the baseline it sets is not served.
	e.items.Store(a, e.itemsOf(b)) // a's fingerprint now carries b's items
	e.publish("other", "p1", a, "", t0, "")
	r = e.waitVariant(svc, "other", "v0", func(r *state.Record) bool { return r.Status == state.Verified })
	if r.BaselineItems != nil || r.ItemsInBaseline() || r.Serve() {
		t.Fatalf("items that do not make up the hash: %+v serve %v", r.BaselineItems, r.Serve())
	}
}

// TestUpgradeFillsInItems: a record written by an earlier drift service,
// without item hashes, is not served (its verdict says so once it is
// rewritten), and the next listing of its baseline fills them in; an
// approve of a live manifest whose items the record lacks reads them from
// the stored manifest.
func TestUpgradeFillsInItems(t *testing.T) {
	e := newEnv(t)
	e.legacy = true // the records of an earlier drift service are of form v1
	a, b := e.manifest(fixA), e.manifest(fixB)
	ctx := context.Background()
	put := func(server string, rec map[string]any) {
		t.Helper()
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.h.Status.Put(ctx, bus.StatusKey("acme", server, "v0"), data); err != nil {
			t.Fatal(err)
		}
	}
	// As an earlier version wrote them: no baseline_items, no live_items.
	old := func(server, st, live string) map[string]any {
		return map[string]any{"tenant": "acme", "server": server, "variant": "v0", "status": st,
			"policy":           map[string]any{"posture": "discovery", "on_drift": "block", "guard": false},
			"baseline_version": 1, "baseline_hash": a, "live_hash": live, "live_observed_ms": 1, "reason": "first_baseline", "updated_at_ms": 1}
	}
	put("verified", old("verified", "verified", a))
	put("changed", old("changed", "changed", b))
	svc, _ := e.start(Config{})
	if r := e.variant(svc, "verified", "v0"); r.Serve() {
		t.Fatal("a record without item hashes is served")
	}

	e.publish("verified", "o1", a, "", time.Now(), "")
	r := e.waitVariant(svc, "verified", "v0", func(r *state.Record) bool { return r.BaselineItems != nil })
	if !sameItems(r.BaselineItems, status.ItemsOf(parseFixtureForm(t, fixA, surface.FormV1))) || !r.Serve() || r.Status != state.Verified || r.BaselineVersion != 1 {
		t.Fatalf("filled in: %+v", r)
	}
	poll.Eventually(t, wait, e.hasVerdict("server verified, serve true", func(v map[string]any) bool {
		return v["server"] == "verified" && v["serve"] == true
	}))

	v, _, err := svc.Approve(ctx, "acme", "changed", "v0", b, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Variants[0]; !sameItems(e.baselineItems(t, &got), status.ItemsOf(parseFixtureForm(t, fixB, surface.FormV1))) || !got.Serve() {
		t.Fatalf("approved without live items in the record: baseline items %+v serve %v", e.baselineItems(t, &got), got.Serve())
	}
}
