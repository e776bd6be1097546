package state

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

func TestParseItemRef(t *testing.T) {
	tests := []struct {
		in   string
		want ItemRef
		err  bool
	}{
		{"tool:search_notes", ItemRef{"tool", "search_notes"}, false},
		{"resource:ui://notes/view.html", ItemRef{"resource", "ui://notes/view.html"}, false},
		{"resourceTemplate:file:///{path}", ItemRef{"resourceTemplate", "file:///{path}"}, false},
		{"prompt:a b", ItemRef{"prompt", "a b"}, false},
		{"instructions", ItemRef{"instructions", ""}, false},
		{"instructions:", ItemRef{}, true},
		{"instructions:x", ItemRef{}, true},
		{"server", ItemRef{"server", ""}, false},
		{"server:x", ItemRef{}, true},
		{"uiContent:ui://notes/view.html", ItemRef{"uiContent", "ui://notes/view.html"}, false},
		{"uiContent", ItemRef{}, true},
		{"promptMessages:summarize", ItemRef{"promptMessages", "summarize"}, false},
		{"promptMessages", ItemRef{}, true},
		{"tool:", ItemRef{}, true},
		{"tool", ItemRef{}, true},
		{"tools:x", ItemRef{}, true},
		{"Tool:x", ItemRef{}, true},
		{"listing:tools", ItemRef{}, true},
		{"", ItemRef{}, true},
	}
	for _, tt := range tests {
		t.Run(strings.NewReplacer(":", "_", "/", "_", " ", "_").Replace(tt.in), func(t *testing.T) {
			got, err := ParseItemRef(tt.in)
			if tt.err {
				if !errors.Is(err, ErrItemInvalid) {
					t.Fatalf("ParseItemRef(%q) = %v, %v; want item_invalid", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseItemRef(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q (the spelling read back)", got.String(), tt.in)
			}
		})
	}
	refs, err := ParseItemRefs([]string{"tool:a", "tool:b", "tool:a"})
	if err != nil || !slices.Equal(refs, []ItemRef{{"tool", "a"}, {"tool", "b"}}) {
		t.Fatalf("ParseItemRefs = %v, %v; want tool:a, tool:b once each", refs, err)
	}
	if _, err := ParseItemRefs(nil); !errors.Is(err, ErrItemInvalid) {
		t.Fatalf("ParseItemRefs(nil) = %v; want item_invalid", err)
	}
}

func it(kind, name, hash string) Item { return Item{Kind: kind, Name: name, Hash: hash} }

func items(listed []string, its ...Item) *Items {
	return &Items{Surface: "sha256:whatever", Listed: listed, Items: its}
}

func TestPickItems(t *testing.T) {
	tools := []string{"tool"}
	a1, a2 := it("tool", "a", "sha256:a1"), it("tool", "a", "sha256:a2")
	b1, b2 := it("tool", "b", "sha256:b1"), it("tool", "b", "sha256:b2")
	c := it("tool", "c", "sha256:c")
	p := it("prompt", "p", "sha256:p")
	ins1, ins2 := it("instructions", "", "sha256:i1"), it("instructions", "", "sha256:i2")
	srv1, srv2 := it("server", "", "sha256:s1"), it("server", "", "sha256:s2")
	tests := []struct {
		name       string
		base, live *Items
		refs       []ItemRef
		wantItems  []Item
		wantListed []string
		remaining  []string
		err        error
	}{
		{"one_of_two_changed", items(tools, a1, b1), items(tools, a2, b2), []ItemRef{{"tool", "a"}},
			[]Item{a2, b1}, tools, []string{"tool b"}, nil},
		{"both_changed", items(tools, a1, b1), items(tools, a2, b2), []ItemRef{{"tool", "a"}, {"tool", "b"}},
			[]Item{a2, b2}, tools, nil, nil},
		{"added", items(tools, a1), items(tools, a1, c), []ItemRef{{"tool", "c"}},
			[]Item{a1, c}, tools, nil, nil},
		{"removed", items(tools, a1, c), items(tools, a1), []ItemRef{{"tool", "c"}},
			[]Item{a1}, tools, nil, nil},
		{"removed_kept_other", items(tools, a1, c), items(tools, a2), []ItemRef{{"tool", "c"}},
			[]Item{a1}, tools, []string{"tool a"}, nil},
		{"new_kind_listed", items(tools, a1), items([]string{"tool", "prompt"}, a1, p), []ItemRef{{"prompt", "p"}},
			[]Item{a1, p}, []string{"tool", "prompt"}, nil, nil},
		{"other_kind_listing_stays", items(tools, a1), items([]string{"tool", "prompt"}, a2), []ItemRef{{"tool", "a"}},
			[]Item{a2}, tools, []string{"listing prompt"}, nil},
		{"last_of_kind_removed_unlists_as_live", items([]string{"tool", "prompt"}, a1, p), items(tools, a1), []ItemRef{{"prompt", "p"}},
			[]Item{a1}, tools, nil, nil},
		{"instructions", items(tools, ins1, a1), items(tools, ins2, a2), []ItemRef{{"instructions", ""}},
			[]Item{a1, ins2}, tools, []string{"tool a"}, nil},
		{"server", items(tools, srv1, a1), items(tools, srv2, a2), []ItemRef{{"server", ""}},
			[]Item{a1, srv2}, tools, []string{"tool a"}, nil},
		{"server_gone", items(tools, srv1, a1), items(tools, a1), []ItemRef{{"server", ""}},
			[]Item{a1}, tools, nil, nil},
		{"unchanged", items(tools, a1, b1), items(tools, a1, b2), []ItemRef{{"tool", "a"}}, nil, nil, nil, ErrItemUnchanged},
		{"unknown", items(tools, a1), items(tools, a2), []ItemRef{{"tool", "zzz"}}, nil, nil, nil, ErrItemUnknown},
		{"unknown_kind_of_name", items(tools, a1), items(tools, a2), []ItemRef{{"prompt", "a"}}, nil, nil, nil, ErrItemUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PickItems(tt.base, tt.live, tt.refs)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("PickItems = %+v, %v; want %v", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Items, tt.wantItems) || !slices.Equal(got.Listed, tt.wantListed) || !slices.Equal(got.Remaining, tt.remaining) {
				t.Fatalf("PickItems: items %v listed %v remaining %v; want %v %v %v", got.Items, got.Listed, got.Remaining, tt.wantItems, tt.wantListed, tt.remaining)
			}
			if !slices.Equal(got.Approved, tt.refs) {
				t.Fatalf("approved %v, want %v", got.Approved, tt.refs)
			}
		})
	}
}

func TestApproveItems(t *testing.T) {
	changed := func(st Status) *Record {
		r := &Record{Tenant: "acme", Server: "fs", Variant: "v0", Policy: discover, Status: st, Reason: ReasonDrift,
			BaselineVersion: 2, BaselineHash: "sha256:base", LiveHash: "sha256:live", LiveObservedMs: t0.UnixMilli(), DriftAtMs: t0.UnixMilli() + 5}
		return r
	}
	partial := ItemsApproval{Hash: "sha256:live", From: "sha256:base",
		Picked:   Picked{Approved: []ItemRef{{"tool", "a"}}, Remaining: []string{"tool b"}},
		Baseline: &Items{Surface: "sha256:mixed", Listed: []string{"tool"}, Items: []Item{it("tool", "a", "sha256:a2"), it("tool", "b", "sha256:b1")}},
		Assess:   Assessment{Severity: "high"}}
	whole := partial
	whole.Picked = Picked{Approved: []ItemRef{{"tool", "a"}, {"tool", "b"}}}
	whole.Baseline = &Items{Surface: "sha256:live", Listed: []string{"tool"}, Items: []Item{it("tool", "a", "sha256:a2"), it("tool", "b", "sha256:b2")}}
	now := t0.Add(time.Hour)
	tests := []struct {
		name   string
		rec    *Record
		a      ItemsApproval
		status Status
		reason string
		serve  bool
		code   string
	}{
		{"partial_stays_changed", changed(Changed), partial, Changed, ReasonApprovedItems, false, ""},
		{"partial_pending_stays_pending", changed(Pending), partial, Pending, ReasonApprovedItems, false, ""},
		{"partial_quarantined_stays", changed(Quarantined), partial, Quarantined, ReasonApprovedItems, false, ""},
		{"all_verifies", changed(Changed), whole, Verified, ReasonApproved, true, ""},
		{"quarantined_all_verifies", changed(Quarantined), whole, Verified, ReasonApproved, true, ""},
		{"stale", changed(Changed), func() ItemsApproval { a := partial; a.Hash = "sha256:old"; return a }(), "", "", false, "stale_hash"},
		{"no_record", nil, partial, "", "", false, "not_found"},
		{"unfingerprintable", func() *Record { r := changed(Changed); r.LiveError = "invalid_utf8"; return r }(), partial, "", "", false, "unfingerprintable"},
		{"no_baseline", func() *Record { r := changed(Pending); r.BaselineHash, r.BaselineVersion = "", 0; return r }(), partial, "", "", false, "no_baseline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := ApproveItems(tt.rec, tt.a, "alice", now)
			if tt.code != "" {
				if coded.CodeOf(err) != tt.code {
					t.Fatalf("ApproveItems = %v; want %s", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := out.Record
			if !out.Write || !out.Announce || out.NewBaseline == nil || out.Previous != tt.rec.Status {
				t.Fatalf("outcome write %v announce %v baseline %v previous %s", out.Write, out.Announce, out.NewBaseline, out.Previous)
			}
			if r.Status != tt.status || r.Reason != tt.reason || r.Serve() != tt.serve {
				t.Fatalf("status %s reason %s serve %v; want %s %s %v (%s)", r.Status, r.Reason, r.Serve(), tt.status, tt.reason, tt.serve, r.ReasonText)
			}
			b := out.NewBaseline
			if r.BaselineVersion != 3 || b.Version != 3 || r.BaselineHash != tt.a.Baseline.Surface || b.Hash != r.BaselineHash ||
				b.ApprovedBy != "alice" || b.Reason != ReasonApprovedItems || !b.Items.Of(b.Hash) || r.ApprovedBy != "alice" || r.Actor != "alice" {
				t.Fatalf("baseline %+v record v%d %s by %s", b, r.BaselineVersion, r.BaselineHash, r.ApprovedBy)
			}
			if !strings.Contains(r.ReasonText, "tool:a") {
				t.Fatalf("reason text %q does not name the item approved", r.ReasonText)
			}
			if tt.status != Verified {
				if !strings.Contains(r.ReasonText, "tool b") || r.Severity != "high" {
					t.Fatalf("reason text %q severity %q: want what remains (tool b) and its severity", r.ReasonText, r.Severity)
				}
				if tt.status == Changed && r.DriftAtMs != tt.rec.DriftAtMs {
					t.Fatalf("drift at %d, want the onset kept (%d)", r.DriftAtMs, tt.rec.DriftAtMs)
				}
			} else if r.DriftAtMs != 0 || r.Severity != "" {
				t.Fatalf("verified with drift at %d severity %q", r.DriftAtMs, r.Severity)
			}
		})
	}
}

// FuzzParseItemRef: whatever an admin types, a ref is read back as typed,
// names a kind of the engine, and has a name exactly when its kind has
// names; anything else is item_invalid.
func FuzzParseItemRef(f *testing.F) {
	for _, s := range []string{"tool:search_notes", "resource:ui://notes/view.html", "instructions", "instructions:x", "tool:", ":", "prompt:a:b", "resourceTemplate:file:///{p}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseItemRef(s)
		if err != nil {
			if coded.CodeOf(err) != ErrItemInvalid.Code {
				t.Fatalf("ParseItemRef(%q): %v, want item_invalid", s, err)
			}
			return
		}
		k, ok := surface.KindNamed(r.Kind)
		if !ok || (k == surface.KindInstructions) != (r.Name == "") || r.String() != s {
			t.Fatalf("ParseItemRef(%q) = %+v (%q)", s, r, r.String())
		}
	})
}
