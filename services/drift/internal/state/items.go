package state

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// ReasonApprovedItems: an admin approved the live definitions of some
// items (a per-item approve) and differences remain that nobody approved:
// the variant keeps its status (changed, pending, quarantined) with the
// new baseline version. A per-item approve after which the baseline is the
// live manifest is an approve like any other (ReasonApproved).
const ReasonApprovedItems = "approved_items"

// Errors of a per-item approve beside those of Approve.
var (
	// ErrItemUnchanged: a named item has the same definition in the
	// baseline and the live manifest: there is nothing of it to approve.
	ErrItemUnchanged = coded.New("item_unchanged", "")
	// ErrItemUnknown: a named item is neither in the baseline nor in the
	// live manifest.
	ErrItemUnknown = coded.New("item_unknown", "")
	// ErrItemInvalid: not a KIND:NAME an item is named by.
	ErrItemInvalid = coded.New("item_invalid", "")
)

// ItemRef names an item as an admin names it for a per-item approve:
// KIND:NAME with the fingerprint engine's kind names (tool:search_notes,
// prompt:summarize, resource:ui://notes/view.html,
// resourceTemplate:file:///{path}, uiContent:ui://notes/view.html for what
// a UI resource's read returns, promptMessages:greet for what a prompts/get
// of an argument-less prompt returns), and "instructions" and "server" alone
// for the server's instructions and its own description (form v2), which
// have no name.
type ItemRef struct {
	Kind, Name string
}

func (r ItemRef) String() string {
	if r.Kind == surface.KindInstructions.String() || r.Kind == surface.KindServer.String() {
		return r.Kind
	}
	return r.Kind + ":" + r.Name
}

// ParseItemRef reads KIND:NAME (the name is everything after the first
// colon, colons included), "instructions" or "server".
func ParseItemRef(s string) (ItemRef, error) {
	kind, name, hasName := strings.Cut(s, ":")
	k, ok := surface.KindNamed(kind)
	unnamed := k == surface.KindInstructions || k == surface.KindServer
	switch {
	case !ok:
		return ItemRef{}, coded.Errorf(ErrItemInvalid.Code, "%q: want KIND:NAME with KIND one of tool, prompt, resource, resourceTemplate, uiContent, promptMessages, or instructions or server", clip(s))
	case unnamed && hasName:
		return ItemRef{}, coded.Errorf(ErrItemInvalid.Code, "%q: the %s has no name; name it as %s", clip(s), kind, kind)
	case !unnamed && name == "":
		return ItemRef{}, coded.Errorf(ErrItemInvalid.Code, "%q: want %s:NAME, the %s's name", clip(s), kind, kind)
	}
	return ItemRef{Kind: kind, Name: name}, nil
}

// ParseItemRefs reads every ref, in order, without repeats.
func ParseItemRefs(ss []string) ([]ItemRef, error) {
	if len(ss) == 0 {
		return nil, coded.New(ErrItemInvalid.Code, "name at least one item (KIND:NAME)")
	}
	var out []ItemRef
	for _, s := range ss {
		r, err := ParseItemRef(s)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Picked is the baseline a per-item approve makes: the kinds it lists and
// its items (status.Items without the surface hash, which the fingerprint
// engine computes from their definitions), which of them come from the
// live manifest, and the differences from the live manifest that remain.
type Picked struct {
	Listed []string
	Items  []Item
	// Approved are the named items as they were approved: each is added,
	// changed or removed by the approve.
	Approved []ItemRef
	// Remaining names what still differs from the live manifest ("tool
	// delete_note", "listing prompts"); empty: the baseline is the live
	// manifest.
	Remaining []string
}

// PickItems returns the items of a per-item approve's baseline: the old
// baseline's, with each named item replaced by its live definition (added
// when the baseline did not have it, removed when the live manifest no
// longer has it). A named item that is the same in both is ErrItemUnchanged;
// one in neither, ErrItemUnknown. A kind is listed when the new baseline has
// items of it; otherwise, as in the live manifest when an item of that kind
// was named, and as in the old baseline when none was.
func PickItems(base, live *Items, refs []ItemRef) (Picked, error) {
	if base == nil || live == nil {
		return Picked{}, fmt.Errorf("picking items: the item hashes of the baseline and of the live manifest are both needed")
	}
	in := func(its *Items) map[ItemRef]Item {
		m := make(map[ItemRef]Item, len(its.Items))
		for _, it := range its.Items {
			m[ItemRef{it.Kind, it.Name}] = it
		}
		return m
	}
	b, l := in(base), in(live)
	next := in(base)
	touched := map[string]bool{}
	var out Picked
	for _, r := range refs {
		bi, inBase := b[r]
		li, inLive := l[r]
		switch {
		case !inBase && !inLive:
			return Picked{}, coded.Errorf(ErrItemUnknown.Code, "%s is neither in the baseline nor in the live manifest (driftctl diff --live shows what differs)", r)
		case inBase && inLive && bi.Hash == li.Hash:
			return Picked{}, coded.Errorf(ErrItemUnchanged.Code, "%s is the same in the baseline and in the live manifest: there is nothing of it to approve", r)
		case inLive:
			next[r] = li
		default:
			delete(next, r)
		}
		touched[r.Kind] = true
		out.Approved = append(out.Approved, r)
	}
	for _, it := range next {
		out.Items = append(out.Items, it)
	}
	slices.SortFunc(out.Items, compareItems)
	for _, k := range listable {
		has := slices.ContainsFunc(out.Items, func(it Item) bool { return it.Kind == k })
		switch {
		case has, touched[k] && slices.Contains(live.Listed, k), !touched[k] && slices.Contains(base.Listed, k):
			out.Listed = append(out.Listed, k)
		}
	}
	// What remains: every item whose definition differs from the live
	// manifest's, and every listing that does.
	for r, li := range l {
		if ni, ok := next[r]; !ok || ni.Hash != li.Hash {
			out.Remaining = append(out.Remaining, li.String())
		}
	}
	for r, ni := range next {
		if _, ok := l[r]; !ok {
			out.Remaining = append(out.Remaining, ni.String())
		}
	}
	slices.Sort(out.Remaining)
	for _, k := range listable {
		if slices.Contains(out.Listed, k) != slices.Contains(live.Listed, k) {
			out.Remaining = append(out.Remaining, "listing "+k)
		}
	}
	return out, nil
}

// listable are the kinds with a listing, in the engine's order.
var listable = []string{
	surface.KindTool.String(), surface.KindPrompt.String(), surface.KindResource.String(), surface.KindResourceTemplate.String(),
}

// compareItems orders items as a surface does: by kind, then by name in
// UTF-16 code unit order.
func compareItems(x, y Item) int {
	kx, _ := surface.KindNamed(x.Kind)
	ky, _ := surface.KindNamed(y.Kind)
	if kx != ky {
		return int(kx) - int(ky)
	}
	return canonjson.CompareUTF16(x.Name, y.Name)
}

// ItemsApproval is a per-item approve as the caller prepared it: the live
// hash the admin reviewed, the baseline the items were picked from, the
// items named, and the new baseline, whose manifest the caller composed from
// the definitions and stored (its item hashes, made by the fingerprint
// engine, name its hash: Baseline.Surface).
type ItemsApproval struct {
	Hash     string
	From     string
	Picked   Picked
	Baseline *Items
	// Assess is the new baseline against the live manifest, when they
	// differ.
	Assess Assessment
}

// ApproveItems makes a per-item approve's baseline the variant's next
// baseline version, approved by actor. The live manifest must be the hash
// the admin reviewed, as for Approve, and the items must have been picked
// from the record's current baseline. When the new baseline is the live
// manifest the variant is verified (an approve); otherwise it keeps its
// status (a verified one whose live manifest differs is changed), with
// the severity of what remains, and the reason says what was approved and
// what was not.
func ApproveItems(rec *Record, a ItemsApproval, actor string, now time.Time) (Outcome, error) {
	if err := approvable(rec, a.Hash); err != nil {
		return Outcome{}, err
	}
	if rec.BaselineHash == "" {
		return Outcome{}, coded.Errorf("no_baseline", "variant %s has no approved baseline to approve items into; approve the whole live manifest (%s)", rec.Variant, rec.LiveHash)
	}
	if a.From != rec.BaselineHash || !a.Baseline.Of(a.Baseline.Surface) || len(a.Picked.Approved) == 0 {
		return Outcome{}, fmt.Errorf("approving items: picked from baseline %s, the variant's is %s", a.From, rec.BaselineHash)
	}
	nowMs := now.UnixMilli()
	r := cloneRecord(rec)
	b := Baseline{Version: rec.BaselineVersion + 1, Hash: a.Baseline.Surface, CapturedAtMs: rec.LiveObservedMs, ApprovedAtMs: nowMs,
		ApprovedBy: actor, Reason: ReasonApprovedItems}
	setBaseline(&r, &b, a.Baseline)
	r.Actor, r.UpdatedAtMs = actor, nowMs
	named := make([]string, len(a.Picked.Approved))
	for i, it := range a.Picked.Approved {
		named[i] = it.String()
	}
	text := fmt.Sprintf("%s approved by %s as baseline v%d", clipList(named, 10), actor, b.Version)
	if b.Hash == rec.LiveHash {
		r.Status, r.Reason = Verified, ReasonApproved
		r.ReasonText = text + "; the baseline is now the live manifest"
		return Outcome{Record: r, Write: true, Announce: true, Previous: rec.Status, NewBaseline: &b}, nil
	}
	r.Severity, r.Benign = a.Assess.Severity, a.Assess.Benign
	// The new baseline against the live manifest: whether the live
	// instructions are still the approved ones decides, under
	// withhold_changed, whether the unchanged items are served.
	r.Instructions = &status.InstructionsFinding{Baseline: b.Hash, Live: rec.LiveHash, Changed: !a.Assess.InstructionsSame}
	r.Reason = ReasonApprovedItems
	rest := fmt.Sprintf("; unapproved, the live manifest %s still differs from it in %s (%s): %s",
		rec.LiveHash, plural(len(a.Picked.Remaining), "place"), a.Assess.Severity, clipList(a.Picked.Remaining, 10))
	switch rec.Status {
	case Verified, Changed:
		r.Status, r.DriftAtMs = Changed, rec.DriftAtMs
		if r.DriftAtMs == 0 {
			r.DriftAtMs = nowMs
		}
		r.ReasonText = text + rest
	case Pending:
		r.ReasonText = text + rest + "; still pending an approve"
	case Quarantined:
		r.ReasonText = text + rest + "; the variant stays quarantined until the live manifest is approved"
	}
	return Outcome{Record: r, Write: true, Announce: true, Previous: rec.Status, NewBaseline: &b}, nil
}
