package status_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// realCaptures returns every real capture of the surface package's
// testdata, by path.
func realCaptures(t testing.TB) map[string]*surface.Surface {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "surface", "testdata", "real", "*", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no real captures: %v", err)
	}
	out := map[string]*surface.Surface{}
	for _, p := range paths {
		out[p] = parse(t, p)
	}
	return out
}

func parse(t testing.TB, path string) *surface.Surface {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{})
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	return sf
}

func parseJSON(t testing.TB, capture string) *surface.Surface {
	t.Helper()
	sf, err := surface.Parse([]byte(capture), surface.Options{})
	if err != nil {
		t.Fatalf("parsing %s: %v", capture, err)
	}
	return sf
}

// eventItems are a surface's items as the Fingerprint event carries them.
func eventItems(sf *surface.Surface) []status.Item {
	return status.ItemsOf(sf).Items
}

// TestNewItems: the item hashes a fingerprint event carries make up its
// surface hash, with the kinds listed found (also a kind listed empty),
// and anything else is refused.
func TestNewItems(t *testing.T) {
	cases := realCaptures(t)
	cases["tools_and_empty_prompts"] = parseJSON(t, `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"prompts":[]}`)
	cases["nothing_listed_but_tools_empty"] = parseJSON(t, `{"tools":[]}`)
	for name, sf := range cases {
		if strings.HasSuffix(name, ".json") {
			name = filepath.Base(filepath.Dir(name)) + "/" + filepath.Base(name)
		}
		t.Run(name, func(t *testing.T) {
			got, err := status.NewItems(sf.Hash.String(), eventItems(sf))
			if err != nil {
				t.Fatal(err)
			}
			want := status.ItemsOf(sf)
			if !slices.Equal(got.Listed, want.Listed) || !slices.Equal(got.Items, want.Items) || got.Surface != want.Surface {
				t.Fatalf("NewItems = %+v, want %+v", got, want)
			}
			parsed, err := got.Verify()
			if err != nil || len(parsed) != len(sf.Items) {
				t.Fatalf("Verify: %d items, %v", len(parsed), err)
			}
		})
	}

	sf := parseJSON(t, `{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"b","inputSchema":{"type":"object"}}]}`)
	items := eventItems(sf)
	other := parseJSON(t, `{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}`)
	for _, tt := range []struct {
		name  string
		hash  string
		items []status.Item
		want  error
	}{
		{"an_item_missing", sf.Hash.String(), items[:1], status.ErrItemsMismatch},
		{"another_surface", other.Hash.String(), items, status.ErrItemsMismatch},
		{"a_hash_changed", sf.Hash.String(), []status.Item{items[0], {Kind: "tool", Name: "b", Hash: items[0].Hash}}, status.ErrItemsMismatch},
		{"unknown_kind", sf.Hash.String(), []status.Item{{Kind: "widget", Name: "a", Hash: items[0].Hash}}, nil},
		{"bad_hash", sf.Hash.String(), []status.Item{{Kind: "tool", Name: "a", Hash: "md5:00"}}, nil},
		{"twice", sf.Hash.String(), []status.Item{items[0], items[0], items[1]}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := status.NewItems(tt.hash, tt.items)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("NewItems = %+v, %v; want an error (%v)", got, err, tt.want)
			}
		})
	}
}

// TestVerify: item hashes checked against their label, as the proxy does.
func TestVerify(t *testing.T) {
	sf := parse(t, filepath.Join("..", "surface", "testdata", "real", "memory", "2025.9.25.json"))
	good := status.ItemsOf(sf)
	mislabelled := status.ItemsOf(sf)
	mislabelled.Surface = "sha256:" + strings.Repeat("0", 64)
	unlisted := status.ItemsOf(sf)
	unlisted.Listed = nil
	extraListing := status.ItemsOf(sf)
	extraListing.Listed = append(extraListing.Listed, "prompt")
	tampered := status.ItemsOf(sf)
	tampered.Items = slices.Clone(tampered.Items)
	tampered.Items[0].Hash = tampered.Items[1].Hash
	for _, tt := range []struct {
		name string
		its  *status.Items
		ok   bool
	}{
		{"as_computed", good, true},
		{"mislabelled", mislabelled, false},
		{"kind_not_listed", unlisted, false},
		{"a_listing_more", extraListing, false},
		{"an_item_hash_changed", tampered, false},
		{"nil", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.its.Verify(); (err == nil) != tt.ok {
				t.Fatalf("Verify: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestServe is the serve rule, the one every reader of a record uses.
func TestServe(t *testing.T) {
	const h = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	items := &status.Items{Surface: h, Items: []status.Item{}}
	block := status.Policy{Posture: status.Discovery, OnDrift: status.Block}
	alert := status.Policy{Posture: status.Discovery, OnDrift: status.Alert}
	rec := func(st status.Status, pol status.Policy, hash string, its *status.Items) *status.Record {
		return &status.Record{Status: st, Policy: pol, BaselineHash: hash, BaselineItems: its}
	}
	withhold := status.Policy{Posture: status.Discovery, OnDrift: status.WithholdChanged}
	const l = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	live := func(r *status.Record, hash string, f *status.InstructionsFinding) *status.Record {
		r.LiveHash, r.Instructions = hash, f
		return r
	}
	failed := func(r *status.Record) *status.Record {
		r.LiveError = "invalid_json"
		return r
	}
	held := &status.Server{Held: true}
	for _, tt := range []struct {
		name string
		srv  *status.Server
		rec  *status.Record
		want bool
	}{
		{"verified", nil, rec(status.Verified, block, h, items), true},
		{"verified_without_items", nil, rec(status.Verified, block, h, nil), false},
		{"verified_items_of_another_baseline", nil, rec(status.Verified, block, h, &status.Items{Surface: "sha256:2"}), false},
		{"verified_without_baseline", nil, rec(status.Verified, block, "", nil), false},
		{"changed_block", nil, rec(status.Changed, block, h, items), false},
		{"changed_alert", nil, rec(status.Changed, alert, h, items), true},
		{"changed_alert_without_baseline", nil, rec(status.Changed, alert, "", nil), false},
		{"changed_withhold_instructions_kept", nil, live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l}), true},
		{"changed_withhold_instructions_changed", nil, live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l, Changed: true}), false},
		{"changed_withhold_never_compared", nil, live(rec(status.Changed, withhold, h, items), l, nil), false},
		{"changed_withhold_finding_of_another_live", nil, live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: "sha256:3"}), false},
		{"changed_withhold_finding_of_another_baseline", nil, live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: "sha256:3", Live: l}), false},
		{"changed_withhold_live_reverted", nil, live(rec(status.Changed, withhold, h, items), h, nil), true},
		{"changed_withhold_live_unfingerprintable", nil, failed(live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l})), false},
		{"changed_withhold_without_items", nil, live(rec(status.Changed, withhold, h, nil), l, &status.InstructionsFinding{Baseline: h, Live: l}), false},
		{"verified_withhold", nil, rec(status.Verified, withhold, h, items), true},
		{"pending_withhold", nil, live(rec(status.Pending, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l}), false},
		{"quarantined_withhold", nil, live(rec(status.Quarantined, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l}), false},
		{"held_server_withhold", held, live(rec(status.Changed, withhold, h, items), l, &status.InstructionsFinding{Baseline: h, Live: l}), false},
		{"pending", nil, rec(status.Pending, alert, h, items), false},
		{"quarantined", nil, rec(status.Quarantined, alert, h, items), false},
		{"unknown_status", nil, rec("reviewing", alert, h, items), false},
		{"held_server", held, rec(status.Verified, block, h, items), false},
		{"released_server", &status.Server{Held: false}, rec(status.Verified, block, h, items), true},
		{"no_record", nil, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Serves(tt.srv, tt.rec); got != tt.want {
				t.Fatalf("Serves = %v, want %v", got, tt.want)
			}
			v := status.View{Hold: tt.srv}
			if tt.rec != nil {
				v.Variants = []status.Record{*tt.rec}
				if sh := status.ShowServer(&v); sh.Serve != tt.want || sh.Variants[0].Serve != tt.want || sh.Held != (tt.srv != nil && tt.srv.Held) {
					t.Fatalf("ShowServer = %+v, want serve %v", sh, tt.want)
				}
			}
		})
	}
}

// TestDecode: what a reader fails closed on.
func TestDecode(t *testing.T) {
	for _, tt := range []struct {
		name  string
		value string
		ok    bool
	}{
		{"record", `{"status":"verified","baseline_hash":"sha256:1"}`, true},
		{"record_without_status", `{"baseline_hash":"sha256:1"}`, false},
		{"record_broken", `{"status":`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := status.DecodeRecord([]byte(tt.value)); (err == nil) != tt.ok {
				t.Fatalf("DecodeRecord(%s): %v, want ok %v", tt.value, err, tt.ok)
			}
		})
	}
	for _, tt := range []struct {
		name  string
		value string
		held  bool
		ok    bool
	}{
		{"held", `{"held":true}`, true, true},
		{"released", `{"held":false,"released_by":"bob"}`, false, true},
		{"no_held", `{"first_variant":"v1"}`, false, false},
		{"broken", `{"held":`, false, false},
	} {
		t.Run("server_"+tt.name, func(t *testing.T) {
			srv, err := status.DecodeServer([]byte(tt.value))
			if (err == nil) != tt.ok || srv.Held != tt.held {
				t.Fatalf("DecodeServer(%s) = %+v, %v; want held %v ok %v", tt.value, srv, err, tt.held, tt.ok)
			}
		})
	}
}

// manyTools is a surface of n tools with long names.
func manyTools(t testing.TB, n int) *surface.Surface {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"tools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_with_a_rather_long_name_%06d","inputSchema":{"type":"object"}}`, i)
	}
	b.WriteString(`]}`)
	return parseJSON(t, b.String())
}

// fullRecord is a record as large as the state machine makes one: a
// baseline, a different live manifest, every field set.
func fullRecord(base, live *surface.Surface) *status.Record {
	r := &status.Record{Tenant: strings.Repeat("t", 64), Server: strings.Repeat("s", 64), Variant: strings.Repeat("v", 64),
		Status: status.Changed, Policy: status.Policy{Posture: status.Discovery, OnDrift: status.Block, Guard: true},
		BaselineVersion: 12, BaselineHash: base.Hash.String(), CapturedAtMs: 1, ApprovedAtMs: 1, ApprovedBy: strings.Repeat("a", 64),
		BaselineItems: status.ItemsOf(base), LiveHash: live.Hash.String(), LiveObservedMs: 1, LiveItems: status.ItemsOf(live),
		DriftAtMs: 1, Severity: "critical", ReferenceVariant: strings.Repeat("v", 64), ReferenceHash: base.Hash.String(),
		Reason: "drift", ReasonText: strings.Repeat("r", 400), Actor: "system", UpdatedAtMs: 1}
	for i := range 64 {
		r.Applied = append(r.Applied, fmt.Sprintf("fp-obs-%058d", i))
	}
	return r
}

// TestRecordSize: a record does not grow with its manifest. With its
// baseline's items in the baseline version's entry (the drift service's
// records), the record of the largest real capture and one of 12,000 tools
// take the same bytes; live items are never stored. A record whose
// baseline version holds no items (kept before versions held them) keeps
// the baseline's items while they fit, and is not served without them.
func TestRecordSize(t *testing.T) {
	var largest *surface.Surface
	var largestPath string
	for p, sf := range realCaptures(t) {
		if largest == nil || len(sf.Items) > len(largest.Items) {
			largest, largestPath = sf, p
		}
	}
	keyed := func(base, live *surface.Surface) *status.Record {
		r := fullRecord(base, live)
		r.BaselineItemsVersion = r.BaselineVersion
		return r
	}
	small, err := status.Encode(keyed(largest, largest))
	if err != nil {
		t.Fatal(err)
	}
	huge, err := status.Encode(keyed(manyTools(t, 12000), manyTools(t, 12001)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest real capture %s: %d items, its record takes %d bytes; one of 12,000 tools %d bytes",
		largestPath, len(largest.Items), len(small), len(huge))
	if len(small) != len(huge) {
		t.Errorf("the record of %d items takes %d bytes, of 12,000 items %d: it grows with the manifest", len(largest.Items), len(small), len(huge))
	}
	if got, err := status.DecodeRecord(huge); err != nil || got.BaselineItems != nil || got.LiveItems != nil || !got.ItemsInBaseline() {
		t.Fatalf("stored: items %v live %v in baseline %v (%v); want neither, named in the baseline", got.BaselineItems != nil, got.LiveItems != nil, got.ItemsInBaseline(), err)
	} else if got.Status = status.Verified; !got.Serve() {
		t.Error("a verified record whose baseline version holds its items is not served")
	}

	for _, tt := range []struct {
		name                       string
		n                          int
		wantBaseline               bool
		wantServedIfVerified, omit bool
	}{
		{"fits", 1000, true, true, false},
		{"left_out", 12000, false, false, true},
	} {
		t.Run("unversioned_"+tt.name, func(t *testing.T) {
			base := manyTools(t, tt.n)
			live := manyTools(t, tt.n+1)
			rec := fullRecord(base, live)
			data, err := status.Encode(rec)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d tools: %d bytes stored", tt.n, len(data))
			if len(data) > status.MaxRecordBytes {
				t.Fatalf("stored %d bytes, more than %d", len(data), status.MaxRecordBytes)
			}
			got, err := status.DecodeRecord(data)
			if err != nil {
				t.Fatal(err)
			}
			if (got.BaselineItems != nil) != tt.wantBaseline || got.LiveItems != nil || got.ItemsOmitted != tt.omit {
				t.Fatalf("stored baseline items %v live items %v omitted %v; want %v false %v",
					got.BaselineItems != nil, got.LiveItems != nil, got.ItemsOmitted, tt.wantBaseline, tt.omit)
			}
			if (rec.BaselineItems != nil) != tt.wantBaseline || rec.ItemsOmitted != tt.omit || rec.LiveItems != nil {
				t.Fatal("Encode did not leave rec as it stored it")
			}
			got.Status = status.Verified
			if got.Serve() != tt.wantServedIfVerified {
				t.Fatalf("Serve of the stored record, verified: %v, want %v", got.Serve(), tt.wantServedIfVerified)
			}
		})
	}
}

// TestMaxRecordBytesIsTheBucketLimit: the limit Encode keeps to is the
// status bucket's.
func TestMaxRecordBytesIsTheBucketLimit(t *testing.T) {
	b := natstest.StartBus(t)
	info, err := b.JS.Stream(context.Background(), "KV_"+bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	if int(cfg.MaxMsgSize) < status.MaxRecordBytes {
		t.Fatalf("the status bucket takes values of %d bytes, Encode keeps to %d", cfg.MaxMsgSize, status.MaxRecordBytes)
	}
	// A record of MaxRecordBytes is stored.
	rec := fullRecord(manyTools(t, 12000), manyTools(t, 12001))
	data, err := status.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handles.Status.Put(context.Background(), "t.s.v", data); err != nil {
		t.Fatalf("storing a record of %d bytes: %v", len(data), err)
	}
}

// TestConfirms: a record confirms its live hash for compact re-listings
// only when a whole manifest of it could change nothing but the
// observation time.
func TestConfirms(t *testing.T) {
	parse := func(tools string) *surface.Surface {
		sf, err := surface.Parse([]byte(`{"tools":[`+tools+`]}`), surface.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return sf
	}
	base, live := parse(`{"name":"a"}`), parse(`{"name":"a"},{"name":"b"}`)
	b, l := base.Hash.String(), live.Hash.String()
	wants := status.Hashing{Hash: "sha512", Annotations: true}
	withhold := status.Policy{Posture: status.Discovery, OnDrift: status.WithholdChanged}
	for _, tc := range []struct {
		name string
		rec  status.Record
		want string
	}{
		{"verified", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: b}, b},
		{"verified_named", status.Record{BaselineVersion: 2, BaselineItemsVersion: 2, BaselineHash: b, LiveHash: b}, b},
		{"changed", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l}, l},
		{"no_live_hash", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base)}, ""},
		{"unfingerprintable", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveError: "duplicate_tool"}, ""},
		{"baseline_items_to_fill", status.Record{BaselineHash: b, LiveHash: b}, ""},
		{"named_version_not_this_one", status.Record{BaselineVersion: 3, BaselineItemsVersion: 2, BaselineHash: b, LiveHash: b}, ""},
		{"items_omitted", status.Record{BaselineHash: b, LiveHash: l, ItemsOmitted: true}, l},
		{"policy_wants_a_live_hash", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: b, PolicyWants: &wants}, ""},
		{"policy_wants_it_made", status.Record{BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: b, PolicyWants: &wants, PolicyWantsLiveHash: "sha512:00"}, b},
		{"withhold_instructions_compared", status.Record{Status: status.Changed, Policy: withhold, BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l,
			Instructions: &status.InstructionsFinding{Baseline: b, Live: l}}, l},
		{"withhold_instructions_changed", status.Record{Status: status.Changed, Policy: withhold, BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l,
			Instructions: &status.InstructionsFinding{Baseline: b, Live: l, Changed: true}}, l},
		{"withhold_instructions_to_compare", status.Record{Status: status.Changed, Policy: withhold, BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l}, ""},
		{"withhold_instructions_of_another_baseline", status.Record{Status: status.Changed, Policy: withhold, BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l,
			Instructions: &status.InstructionsFinding{Baseline: "sha256:3", Live: l}}, ""},
		{"block_instructions_never_compared", status.Record{Status: status.Changed, Policy: status.Policy{OnDrift: status.Block}, BaselineHash: b, BaselineItems: status.ItemsOf(base), LiveHash: l}, l},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rec.Confirms(); got != tc.want {
				t.Errorf("Confirms() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHashingForm: a record that names no form was hashed in mcpdrift/v1,
// a server first seen gets the newest, and the engine is told which; an
// unknown form hashes nothing.
func TestHashingForm(t *testing.T) {
	if h := (status.Policy{}).Hashing(); h.Form != status.FormV1 || h == status.DefaultHashing {
		t.Fatalf("a record without a form: %+v", h)
	}
	if status.DefaultHashing.Form != status.FormLatest || status.FormLatest != surface.FormLatest.String() {
		t.Fatalf("defaults: %+v", status.DefaultHashing)
	}
	p := (status.Policy{}).WithHashing(status.DefaultHashing)
	if p.Form != status.FormV2 || p.Hashing() != status.DefaultHashing {
		t.Fatalf("WithHashing: %+v", p)
	}
	if p := (status.Policy{}).WithHashing(status.Hashing{Hash: "sha256", Annotations: true}); p.Form != "" || p.Hash != "" || p.Annotations != nil {
		t.Fatalf("v1 defaults written out: %+v", p)
	}
	for form, want := range map[string]surface.Form{status.FormV1: surface.FormV1, status.FormV2: surface.FormV2} {
		opt, err := status.Hashing{Hash: "sha256", Annotations: true, Form: form}.Options()
		if err != nil || opt.Form != want {
			t.Errorf("form %q: %+v %v", form, opt, err)
		}
	}
	for _, bad := range []string{"mcpdrift/v1", "mcpdrift/v3", "v2"} {
		if _, err := (status.Hashing{Hash: "sha256", Annotations: true, Form: bad}).Options(); err == nil {
			t.Errorf("form %q accepted", bad)
		}
		if err := (status.Policy{Posture: status.Discovery, OnDrift: status.Block, Form: bad}).Validate(); err == nil {
			t.Errorf("policy form %q accepted", bad)
		}
	}
	if h, err := status.HashingOf("sha512:"+strings.Repeat("ab", 64), false, status.FormV2); err != nil || h != (status.Hashing{Hash: "sha512", Form: status.FormV2}) {
		t.Fatalf("HashingOf: %+v %v", h, err)
	}
}

// TestItemsOfFormV2: the item hashes of a v2 surface, the server item
// among them, make up its hash as a proxy checks them, whatever the form.
func TestItemsOfFormV2(t *testing.T) {
	raw := []byte(`{"initialize":{"serverInfo":{"name":"s","version":"1"},"instructions":"hi"},"tools":{"pages":[{"tools":[{"name":"a","_meta":{"ui":{"resourceUri":"ui://a"}}}]}]},"prompts":{"pages":[{"prompts":[]}]}}`)
	for _, form := range []surface.Form{surface.FormV1, surface.FormV2} {
		sf, err := surface.Parse(raw, surface.Options{Form: form})
		if err != nil {
			t.Fatal(err)
		}
		its := status.ItemsOf(sf)
		if _, err := its.Verify(); err != nil {
			t.Fatalf("%s: Verify: %v", form, err)
		}
		var items []status.Item
		for _, it := range sf.Items {
			items = append(items, status.Item{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()})
		}
		got, err := status.NewItems(sf.Hash.String(), items)
		if err != nil || !slices.Equal(got.Listed, []string{"tool", "prompt"}) {
			t.Fatalf("%s: NewItems: %+v %v", form, got, err)
		}
	}
}
