package surface

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// Severity ranks a change. A change no rule describes is Critical.
type Severity int

// Severities, from nothing to worst.
const (
	SeverityNone Severity = iota
	SeverityInfo
	SeverityLow
	SeverityMedium
	SeverityHigh
	SeverityCritical
)

var severityNames = [...]string{"none", "info", "low", "medium", "high", "critical"}

func (s Severity) String() string {
	if s >= 0 && int(s) < len(severityNames) {
		return severityNames[s]
	}
	return "critical"
}

// MarshalText implements encoding.TextMarshaler.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Severity) UnmarshalText(b []byte) error {
	i := slices.Index(severityNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("parsing severity %q: want one of %s", b, strings.Join(severityNames[:], ", "))
	}
	*s = Severity(i)
	return nil
}

// Change kinds. Each is a stable string; docs/canonical-form.md lists them
// with their severities.
const (
	ChangeItemAdded          = "added" // prefixed with the item kind: tool_added, prompt_added, ...
	ChangeItemRemoved        = "removed"
	ChangeDestructiveAdded   = "destructive_tool_added"
	ChangeBecameDestructive  = "became_destructive" // an approved tool now declares itself destructive
	ChangeListingAdded       = "listing_added"
	ChangeListingRemoved     = "listing_removed"
	ChangeDescription        = "description_changed"
	ChangeTitle              = "title_changed"
	ChangeInstructions       = "instructions_changed"
	ChangeParamAddedOptional = "param_added_optional"
	ChangeParamAddedRequired = "param_added_required"
	ChangeParamRemoved       = "param_removed"
	ChangeRequiredExpanded   = "required_expanded"
	ChangeRequiredRelaxed    = "required_relaxed"
	ChangeTypeChanged        = "type_changed"
	ChangeEnumRemoved        = "enum_values_removed"
	ChangeEnumAdded          = "enum_values_added"
	ChangeEnumReordered      = "enum_reordered"
	ChangeConstraintNarrowed = "constraint_narrowed"
	ChangeConstraintWidened  = "constraint_widened"
	ChangeConstraintChanged  = "constraint_changed"
	ChangeDefault            = "default_changed"
	ChangeExamples           = "examples_changed"
	ChangeSchemaMetadata     = "schema_metadata_changed"
	ChangeAnnotationRaised   = "annotation_risk_raised"
	ChangeAnnotationLowered  = "annotation_risk_lowered"
	ChangeAnnotation         = "annotation_changed"
	ChangeOutputAdded        = "output_schema_added"
	ChangeOutputChanged      = "output_schema_changed"
	ChangeOutputRemoved      = "output_schema_removed"
	ChangeArgAddedOptional   = "argument_added_optional"
	ChangeArgAddedRequired   = "argument_added_required"
	ChangeArgRemoved         = "argument_removed"
	ChangeMimeType           = "mime_type_changed"
	ChangeName               = "name_changed"
	ChangeRepresentation     = "representation_changed" // written differently, same meaning
	ChangeUnclassified       = "unclassified"
	MarkerPrefix             = "marker_" // marker_hidden_instructions, marker_secret_path, ...

	// Form v2 (docs/adr/0015).
	ChangeIcons            = "icons_changed"
	ChangeExecution        = "execution_changed"
	ChangeWebsite          = "website_changed"
	ChangeMeta             = "meta_changed"          // a member of _meta no rule below names
	ChangeUILinkAdded      = "ui_link_added"         // a tool now links a UI (MCP Apps, OpenAI Apps SDK): a new surface a host renders
	ChangeUILinkChanged    = "ui_link_changed"       // the UI a tool links is another resource
	ChangeUILinkRemoved    = "ui_link_removed"       // a tool no longer links a UI
	ChangeUIVisibility     = "ui_visibility_changed" // who may call a tool (the model, the app) changed
	ChangeUIPolicy         = "ui_policy_changed"     // a UI resource's sandbox (csp, permissions, domain) changed
	ChangeUIMeta           = "ui_meta_changed"       // another member of _meta.ui or an openai/ key changed
	ChangeUILinkUnlisted   = "ui_link_unlisted"      // a tool links a UI resource the surface does not list
	ChangeUIContentAdded   = "ui_content_added"      // the read contents of a UI resource, new: a UI a host renders
	ChangeUIContentChanged = "ui_content_changed"    // what a host renders for a UI resource changed (its HTML, a content added or removed)
	ChangeUIContentRemoved = "ui_content_removed"    // the contents of a UI resource are no longer part of the surface
	ChangeFormChanged      = "form_changed"          // the two surfaces were hashed in different canonical forms

	// Prompt messages (docs/adr/0017).
	ChangePromptMessagesAdded   = "prompt_messages_added"   // the got messages of an argument-less prompt, new
	ChangePromptMessagesChanged = "prompt_messages_changed" // what a host puts into the model's context for a prompt changed
	ChangePromptMessagesRemoved = "prompt_messages_removed" // the messages of a prompt are no longer part of the surface
)

var severityOf = map[string]Severity{
	ChangeListingAdded:          SeverityInfo,
	ChangeListingRemoved:        SeverityLow,
	ChangeDestructiveAdded:      SeverityHigh,
	ChangeBecameDestructive:     SeverityCritical,
	ChangeDescription:           SeverityMedium,
	ChangeTitle:                 SeverityLow,
	ChangeInstructions:          SeverityMedium,
	ChangeParamAddedOptional:    SeverityInfo,
	ChangeParamAddedRequired:    SeverityHigh,
	ChangeParamRemoved:          SeverityMedium,
	ChangeRequiredExpanded:      SeverityHigh,
	ChangeRequiredRelaxed:       SeverityLow,
	ChangeTypeChanged:           SeverityMedium,
	ChangeEnumRemoved:           SeverityMedium,
	ChangeEnumAdded:             SeverityLow,
	ChangeEnumReordered:         SeverityInfo,
	ChangeConstraintNarrowed:    SeverityMedium,
	ChangeConstraintWidened:     SeverityLow,
	ChangeConstraintChanged:     SeverityMedium,
	ChangeDefault:               SeverityMedium,
	ChangeExamples:              SeverityLow,
	ChangeSchemaMetadata:        SeverityLow,
	ChangeAnnotationRaised:      SeverityHigh,
	ChangeAnnotationLowered:     SeverityMedium,
	ChangeAnnotation:            SeverityLow,
	ChangeOutputAdded:           SeverityMedium,
	ChangeOutputChanged:         SeverityMedium,
	ChangeOutputRemoved:         SeverityLow,
	ChangeArgAddedOptional:      SeverityInfo,
	ChangeArgAddedRequired:      SeverityHigh,
	ChangeArgRemoved:            SeverityMedium,
	ChangeMimeType:              SeverityLow,
	ChangeName:                  SeverityLow,
	ChangeRepresentation:        SeverityInfo,
	ChangeUnclassified:          SeverityCritical,
	ChangeIcons:                 SeverityLow,
	ChangeExecution:             SeverityMedium,
	ChangeWebsite:               SeverityMedium,
	ChangeMeta:                  SeverityMedium,
	ChangeUILinkAdded:           SeverityHigh,
	ChangeUILinkChanged:         SeverityHigh,
	ChangeUILinkRemoved:         SeverityLow,
	ChangeUIVisibility:          SeverityMedium,
	ChangeUIPolicy:              SeverityHigh,
	ChangeUIMeta:                SeverityMedium,
	ChangeUILinkUnlisted:        SeverityCritical,
	ChangeUIContentAdded:        SeverityMedium,
	ChangeUIContentChanged:      SeverityHigh,
	ChangeUIContentRemoved:      SeverityLow,
	ChangeFormChanged:           SeverityInfo,
	ChangePromptMessagesAdded:   SeverityMedium,
	ChangePromptMessagesChanged: SeverityHigh,
	ChangePromptMessagesRemoved: SeverityLow,
}

// benignKinds are the changes the guard posture may accept on its own: new
// items, new optional parameters, and the same meaning written differently;
// nothing else.
var benignKinds = map[string]bool{
	"tool" + "_" + ChangeItemAdded:             true,
	"prompt" + "_" + ChangeItemAdded:           true,
	"resource" + "_" + ChangeItemAdded:         true,
	"resourceTemplate" + "_" + ChangeItemAdded: true,
	ChangeListingAdded:                         true,
	ChangeParamAddedOptional:                   true,
	ChangeArgAddedOptional:                     true,
	ChangeRepresentation:                       true,
}

// Change is one classified difference inside an item.
type Change struct {
	Kind     string   `json:"kind"`
	Path     string   `json:"path,omitempty"`
	Severity Severity `json:"severity"`
	Detail   string   `json:"detail,omitempty"`
}

// ItemDiff is what happened to one item.
type ItemDiff struct {
	Kind     string   `json:"kind"`
	Name     string   `json:"name"`
	OldHash  *Digest  `json:"oldHash,omitempty"`
	NewHash  *Digest  `json:"newHash,omitempty"`
	Severity Severity `json:"severity"`
	Benign   bool     `json:"benign"`
	Changes  []Change `json:"changes"`
}

// Report is the classified difference between two surfaces.
type Report struct {
	Drift    bool       `json:"drift"`
	Severity Severity   `json:"severity"`
	Benign   bool       `json:"benign"` // drift made only of benign changes
	OldHash  Digest     `json:"oldHash"`
	NewHash  Digest     `json:"newHash"`
	Added    []ItemDiff `json:"added"`
	Removed  []ItemDiff `json:"removed"`
	Changed  []ItemDiff `json:"changed"`
}

// Diff classifies what changed from old (the baseline) to new (the live
// surface). Every difference between the two surface hashes shows up in the
// report; one that no rule describes is reported as unclassified, Critical.
func Diff(old, new *Surface) *Report {
	r := &Report{OldHash: old.Hash, NewHash: new.Hash, Added: []ItemDiff{}, Removed: []ItemDiff{}, Changed: []ItemDiff{}}
	if old.Hash == new.Hash {
		return r
	}
	r.Drift = true
	if old.form != new.form {
		r.Changed = append(r.Changed, finish(ItemDiff{Kind: "surface", Changes: []Change{change(ChangeFormChanged, "",
			old.form.String()+" → "+new.form.String()+": the hashes are not comparable; the items below differ in what each form covers")}}))
	}
	for k := KindTool; k <= KindPromptMessages; k++ {
		olds, news := old.Of(k), new.Of(k)
		if old.listed[k] != new.listed[k] && k <= KindResourceTemplate {
			c := change(ChangeListingRemoved, "", "")
			if new.listed[k] {
				c = change(ChangeListingAdded, "", "")
			}
			if len(olds)+len(news) == 0 {
				// Listed with no items or not listed: a client sees nothing either way.
				c = change(ChangeRepresentation, "", "an empty listing is the same as none")
			}
			r.Changed = append(r.Changed, finish(ItemDiff{Kind: "listing", Name: k.ListKey(), Changes: []Change{c}}))
		}
		i, j := 0, 0
		for i < len(olds) || j < len(news) {
			switch {
			case j == len(news) || (i < len(olds) && compareNames(olds[i].Name, news[j].Name) < 0):
				r.Removed = append(r.Removed, removedItem(olds[i]))
				i++
			case i == len(olds) || compareNames(olds[i].Name, news[j].Name) > 0:
				r.Added = append(r.Added, addedItem(news[j]))
				j++
			default:
				if olds[i].Hash != news[j].Hash {
					r.Changed = append(r.Changed, changedItem(olds[i], news[j]))
				}
				i, j = i+1, j+1
			}
		}
	}
	r.unlistedLinks(old, new)
	r.Benign = true
	for _, list := range [][]ItemDiff{r.Added, r.Removed, r.Changed} {
		for _, it := range list {
			r.Severity = max(r.Severity, it.Severity)
			r.Benign = r.Benign && it.Benign
		}
	}
	if len(r.Added)+len(r.Removed)+len(r.Changed) == 0 {
		// The hashes differ, so something did; never let drift pass as nothing.
		r.Changed = append(r.Changed, finish(ItemDiff{Kind: "surface", Changes: []Change{{Kind: ChangeUnclassified,
			Severity: SeverityCritical, Detail: "the surface hash changed but no item did"}}}))
		r.Severity, r.Benign = SeverityCritical, false
	}
	return r
}

func compareNames(a, b string) int {
	switch {
	case a == b:
		return 0
	}
	return canonjson.CompareUTF16(a, b)
}

func digestPtr(d Digest) *Digest { return &d }

func decode(it Item) any {
	dec := json.NewDecoder(bytes.NewReader(it.Canonical))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		// Canonical bytes are our own output; this cannot happen.
		panic(fmt.Sprintf("surface: decoding canonical %s %q: %v", it.Kind, it.Name, err))
	}
	return v
}

func addedItem(it Item) ItemDiff {
	d := ItemDiff{Kind: it.Kind.String(), Name: it.Name, NewHash: digestPtr(it.Hash)}
	kind := it.Kind.String() + "_" + ChangeItemAdded
	sev := SeverityLow
	switch it.Kind {
	case KindInstructions, KindServer:
		sev = SeverityMedium // new text in the model's context, or the name a person trusts
	case KindUIContent:
		kind, sev = ChangeUIContentAdded, severityOf[ChangeUIContentAdded]
	case KindPromptMessages:
		kind, sev = ChangePromptMessagesAdded, severityOf[ChangePromptMessagesAdded]
	}
	d.Changes = append(d.Changes, Change{Kind: kind, Severity: sev})
	v := decode(it)
	if it.Kind == KindUIContent {
		v = uiContentText(v)
	}
	if it.Kind == KindTool && explicitlyDestructive(v) {
		d.Changes = append(d.Changes, Change{Kind: ChangeDestructiveAdded, Path: "annotations", Severity: severityOf[ChangeDestructiveAdded],
			Detail: "the new tool declares itself destructive"})
	}
	if it.Kind == KindTool {
		for _, l := range uiLinksOf(v) {
			d.Changes = append(d.Changes, change(ChangeUILinkAdded, l.path, "the new tool links the UI "+visible(clipText(l.uri))))
		}
	}
	d.Changes = appendMarkers(d.Changes, nil, scanValue(nil, "", v))
	return finish(d)
}

func removedItem(it Item) ItemDiff {
	kind := it.Kind.String() + "_" + ChangeItemRemoved
	switch it.Kind {
	case KindUIContent:
		kind = ChangeUIContentRemoved
	case KindPromptMessages:
		kind = ChangePromptMessagesRemoved
	}
	return finish(ItemDiff{Kind: it.Kind.String(), Name: it.Name, OldHash: digestPtr(it.Hash),
		Changes: []Change{{Kind: kind, Severity: SeverityLow}}})
}

func explicitlyDestructive(v any) bool {
	m, _ := v.(map[string]any)
	ann, _ := m["annotations"].(map[string]any)
	return ann["destructiveHint"] == true && ann["readOnlyHint"] != true
}

// effectivelyDestructive reads a tool's hints with their MCP defaults: a tool
// that says nothing may be destructive.
func effectivelyDestructive(v any) bool {
	ann := asMap(asMap(v)["annotations"])
	return !hintValue(ann, "readOnlyHint", false) && hintValue(ann, "destructiveHint", true)
}

func changedItem(o, n Item) ItemDiff {
	d := ItemDiff{Kind: n.Kind.String(), Name: n.Name, OldHash: digestPtr(o.Hash), NewHash: digestPtr(n.Hash)}
	ov, nv := decode(o), decode(n)
	var cs []Change
	switch n.Kind {
	case KindInstructions:
		cs = append(cs, change(ChangeInstructions, "", ""))
	case KindUIContent:
		cs = diffUIContent(cs, asMap(ov), asMap(nv))
		ov, nv = uiContentText(ov), uiContentText(nv)
	case KindPromptMessages:
		cs = diffPromptMessages(cs, asMap(ov), asMap(nv))
	default:
		cs = diffItem(n.Kind, ov.(map[string]any), nv.(map[string]any))
	}
	cs = appendMarkers(cs, scanValue(nil, "", ov), scanValue(nil, "", nv))
	if len(cs) == 0 {
		cs = append(cs, change(ChangeUnclassified, "", "the item's hash changed but no rule describes how"))
	}
	d.Changes = cs
	return finish(d)
}

// appendMarkers reports markers of the new version that the old one lacked,
// and every invisible character of the new version even when the old one
// had it too: text that hides text is never accepted again unseen, so an
// item that carries one is never benign (the guard posture never accepts
// it on its own), whatever else changed.
func appendMarkers(cs []Change, old, new []Marker) []Change {
	seen := make(map[Marker]bool, len(old))
	for _, m := range old {
		seen[m] = true
	}
	slices.SortFunc(new, func(a, b Marker) int {
		return strings.Compare(a.Path+"\x00"+a.Kind+"\x00"+a.Match, b.Path+"\x00"+b.Kind+"\x00"+b.Match)
	})
	for _, m := range new {
		switch {
		case !seen[m]:
			cs = append(cs, Change{Kind: MarkerPrefix + m.Kind, Path: m.Path, Severity: SeverityCritical, Detail: m.Match})
		case m.Kind == MarkerInvisibleChars:
			cs = append(cs, Change{Kind: MarkerPrefix + m.Kind, Path: m.Path, Severity: SeverityHigh, Detail: m.Match + " (kept from the baseline)"})
		}
	}
	return cs
}

func finish(d ItemDiff) ItemDiff {
	d.Benign = len(d.Changes) > 0
	for _, c := range d.Changes {
		d.Severity = max(d.Severity, c.Severity)
		d.Benign = d.Benign && benignKinds[c.Kind]
	}
	return d
}

func change(kind, path, detail string) Change {
	sev, ok := severityOf[kind]
	if !ok {
		sev = SeverityCritical
	}
	return Change{Kind: kind, Path: path, Severity: sev, Detail: detail}
}

func diffItem(kind Kind, o, n map[string]any) []Change {
	var cs []Change
	for _, key := range unionKeys(o, n) {
		ov, inOld := o[key]
		nv, inNew := n[key]
		if inOld && inNew && reflect.DeepEqual(ov, nv) {
			continue
		}
		switch {
		case key == "description":
			cs = append(cs, change(ChangeDescription, key, textDelta(ov, nv)))
		case key == "title":
			cs = append(cs, change(ChangeTitle, key, textDelta(ov, nv)))
		case kind == KindTool && key == "inputSchema":
			cs = diffRootSchema(cs, key, ov, nv, inOld && inNew)
		case kind == KindTool && key == "outputSchema":
			switch {
			case !inOld:
				cs = append(cs, change(ChangeOutputAdded, key, ""))
			case !inNew:
				cs = append(cs, change(ChangeOutputRemoved, key, ""))
			default:
				inner := diffRootSchema(nil, key, ov, nv, true)
				if len(inner) == 1 && inner[0].Kind == ChangeRepresentation && inner[0].Path == key {
					cs = append(cs, inner[0])
					continue
				}
				c := change(ChangeOutputChanged, key, strings.Join(changedPaths(inner), ", "))
				for _, ic := range inner {
					if ic.Kind == ChangeUnclassified {
						c.Severity = SeverityCritical // unclassified stays the most severe, inside an output schema too
					}
				}
				cs = append(cs, c)
			}
		case kind == KindTool && key == "annotations":
			before := len(cs)
			if cs = diffAnnotations(cs, asMap(ov), asMap(nv)); len(cs) == before {
				cs = append(cs, change(ChangeRepresentation, key, "no hint changed its effective value (defaults written out or dropped)"))
			}
			if !effectivelyDestructive(o) && explicitlyDestructive(n) {
				// Path "annotations" sorts before the hints' own changes.
				cs = slices.Insert(cs, before, change(ChangeBecameDestructive, key, "the tool did not declare itself destructive and now does"))
			}
		case kind == KindPrompt && key == "arguments":
			cs = diffArguments(cs, ov, nv)
		case key == "mimeType":
			cs = append(cs, change(ChangeMimeType, key, textDelta(ov, nv)))
		case key == "icons":
			cs = append(cs, change(ChangeIcons, key, iconsDelta(ov, nv)))
		case key == "websiteUrl" && kind == KindServer:
			cs = append(cs, change(ChangeWebsite, key, textDelta(ov, nv)))
		case key == "execution" && kind == KindTool:
			cs = append(cs, change(ChangeExecution, key, textDelta(jsonText(ov), jsonText(nv))))
		case key == "annotations" && (kind == KindResource || kind == KindResourceTemplate):
			o, n := asMap(ov), asMap(nv)
			for _, k := range unionKeys(o, n) {
				if reflect.DeepEqual(o[k], n[k]) {
					continue
				}
				if k == "audience" || k == "priority" {
					cs = append(cs, change(ChangeAnnotation, key+"."+k, textDelta(jsonText(o[k]), jsonText(n[k]))))
				} else {
					cs = append(cs, change(ChangeUnclassified, key+"."+k, "no rule for this annotation"))
				}
			}
		case key == "_meta":
			cs = diffMeta(cs, kind, asMap(ov), asMap(nv))
		case key == "name":
			cs = append(cs, change(ChangeName, key, textDelta(ov, nv)))
		default:
			cs = append(cs, change(ChangeUnclassified, key, "no rule for this field"))
		}
	}
	return cs
}

func changedPaths(cs []Change) []string {
	var ps []string
	for _, c := range cs {
		ps = append(ps, c.Path+" "+c.Kind)
	}
	return ps
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func textDelta(o, n any) string {
	show := func(v any) string {
		if v == nil {
			return "(none)"
		}
		return visible(clipText(fmt.Sprint(v)))
	}
	return show(o) + " → " + show(n)
}

// The MCP defaults of the tool annotation hints, and which value is riskier.
type hint struct {
	name       string
	def, risky bool
}

var hints = []hint{
	{"readOnlyHint", false, false},
	{"destructiveHint", true, true},
	{"openWorldHint", true, true},
	{"idempotentHint", false, false},
}

func diffAnnotations(cs []Change, o, n map[string]any) []Change {
	for _, h := range hints {
		ov, nv := hintValue(o, h.name, h.def), hintValue(n, h.name, h.def)
		switch {
		case ov == nv:
		case h.name == "idempotentHint":
			cs = append(cs, change(ChangeAnnotation, "annotations."+h.name, fmt.Sprintf("%v → %v", ov, nv)))
		case nv == h.risky:
			cs = append(cs, change(ChangeAnnotationRaised, "annotations."+h.name, fmt.Sprintf("%v → %v", ov, nv)))
		default:
			cs = append(cs, change(ChangeAnnotationLowered, "annotations."+h.name, fmt.Sprintf("%v → %v", ov, nv)))
		}
	}
	for _, key := range unionKeys(o, n) {
		if reflect.DeepEqual(o[key], n[key]) {
			continue
		}
		switch {
		case isHint(key) && boolOrAbsent(o[key]) && boolOrAbsent(n[key]):
			// compared above, with defaults
		case key == "title":
			cs = append(cs, change(ChangeAnnotation, "annotations.title", textDelta(o[key], n[key])))
		default:
			cs = append(cs, change(ChangeUnclassified, "annotations."+key, "no rule for this annotation"))
		}
	}
	return cs
}

func isHint(key string) bool {
	return slices.ContainsFunc(hints, func(h hint) bool { return h.name == key })
}

func boolOrAbsent(v any) bool {
	_, ok := v.(bool)
	return ok || v == nil
}

// hintValue reads a boolean hint; a missing hint takes the MCP default, and a
// hint of another type counts as missing (clients ignore it too).
func hintValue(m map[string]any, name string, def bool) bool {
	if b, ok := m[name].(bool); ok {
		return b
	}
	return def
}

func diffArguments(cs []Change, ov, nv any) []Change {
	index := func(v any) map[string]map[string]any {
		out := map[string]map[string]any{}
		list, _ := v.([]any)
		for _, a := range list {
			if m, ok := a.(map[string]any); ok {
				if name, ok := m["name"].(string); ok {
					out[name] = m
				}
			}
		}
		return out
	}
	o, n := index(ov), index(nv)
	for _, name := range unionKeys(o, n) {
		oa, inOld := o[name]
		na, inNew := n[name]
		path := "arguments." + name
		switch {
		case !inOld:
			kind := ChangeArgAddedOptional
			if na["required"] == true {
				kind = ChangeArgAddedRequired
			}
			cs = append(cs, change(kind, path, ""))
		case !inNew:
			cs = append(cs, change(ChangeArgRemoved, path, ""))
		default:
			for _, key := range unionKeys(oa, na) {
				if reflect.DeepEqual(oa[key], na[key]) {
					continue
				}
				switch key {
				case "required":
					if na[key] == true {
						cs = append(cs, change(ChangeRequiredExpanded, path, ""))
					} else {
						cs = append(cs, change(ChangeRequiredRelaxed, path, ""))
					}
				case "description":
					cs = append(cs, change(ChangeDescription, path+".description", textDelta(oa[key], na[key])))
				case "title":
					cs = append(cs, change(ChangeTitle, path+".title", textDelta(oa[key], na[key])))
				default:
					cs = append(cs, change(ChangeUnclassified, path+"."+key, "no rule for this argument field"))
				}
			}
		}
	}
	return cs
}

// Lower and upper bounds: raising a lower bound or lowering an upper one
// narrows what is accepted.
var (
	lowerBounds = map[string]bool{"minimum": true, "exclusiveMinimum": true, "minLength": true, "minItems": true, "minProperties": true, "minContains": true}
	upperBounds = map[string]bool{"maximum": true, "exclusiveMaximum": true, "maxLength": true, "maxItems": true, "maxProperties": true, "maxContains": true}
	shapeWords  = map[string]bool{"pattern": true, "format": true, "multipleOf": true, "contentEncoding": true, "contentMediaType": true, "const": true}
	metaWords   = map[string]bool{"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true}
)

// diffRootSchema classifies the differences between two whole schemas (an
// inputSchema or outputSchema; both is false when one side lacks it). Both
// are normalized first (schemanorm.go): when the normal forms are equal, the
// change is one representation_changed; otherwise the normal forms are
// compared keyword by keyword, so that a rewrite beside a real change does not
// make the real change look unclassifiable.
func diffRootSchema(cs []Change, path string, ov, nv any, both bool) []Change {
	if !both {
		return diffSchema(cs, path, ov, nv)
	}
	on, oRules := normalizeSchema(ov, false)
	nn, nRules := normalizeSchema(nv, false)
	if reflect.DeepEqual(on, nn) {
		return append(cs, change(ChangeRepresentation, narrowPath(path, ov, nv), "the same schema written differently: "+ruleList(oRules, nRules)))
	}
	return diffSchema(cs, path, on, nn)
}

// narrowPath follows a and b down while they differ in exactly one member
// that both have, to name where a rewrite happened.
func narrowPath(path string, a, b any) string {
	for {
		x, okA := a.(map[string]any)
		y, okB := b.(map[string]any)
		if !okA || !okB {
			return path
		}
		var diff []string
		for _, k := range unionKeys(x, y) {
			if !reflect.DeepEqual(x[k], y[k]) {
				diff = append(diff, k)
			}
		}
		if len(diff) != 1 {
			return path
		}
		_, inX := x[diff[0]]
		_, inY := y[diff[0]]
		if !inX || !inY {
			return path
		}
		path, a, b = path+"."+diff[0], x[diff[0]], y[diff[0]]
	}
}

func ruleList(a, b map[string]bool) string {
	var rules []string
	for r := range a {
		rules = append(rules, r)
	}
	for r := range b {
		if !a[r] {
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		return "no rewrite named"
	}
	sort.Strings(rules)
	return strings.Join(rules, "; ")
}

// diffSchema classifies the differences between two JSON Schemas at path,
// both in normal form when they come from diffRootSchema.
func diffSchema(cs []Change, path string, ov, nv any) []Change {
	if reflect.DeepEqual(ov, nv) {
		return cs
	}
	o, okO := ov.(map[string]any)
	n, okN := nv.(map[string]any)
	if !okO || !okN {
		return append(cs, change(ChangeUnclassified, path, "a schema that is not an object changed"))
	}
	o, n = alignEnumConst(o, n)
	oProps, nProps := asMap(o["properties"]), asMap(n["properties"])
	oReq, nReq := stringSet(o["required"]), stringSet(n["required"])
	for _, key := range unionKeys(o, n) {
		a, inOld := o[key]
		b, inNew := n[key]
		if inOld && inNew && reflect.DeepEqual(a, b) {
			continue
		}
		p := path + "." + key
		switch {
		case key == "properties":
			if (inOld && oProps == nil) || (inNew && nProps == nil) {
				cs = append(cs, change(ChangeUnclassified, p, "properties is not an object"))
				continue
			}
			for _, name := range unionKeys(oProps, nProps) {
				ps, inO := oProps[name]
				ns, inN := nProps[name]
				pp := p + "." + name
				switch {
				case !inO && nReq[name]:
					cs = append(cs, change(ChangeParamAddedRequired, pp, ""))
				case !inO:
					cs = append(cs, change(ChangeParamAddedOptional, pp, ""))
				case !inN:
					cs = append(cs, change(ChangeParamRemoved, pp, ""))
				default:
					cs = diffSchema(cs, pp, ps, ns)
				}
			}
		case key == "required":
			if reflect.DeepEqual(oReq, nReq) {
				cs = append(cs, change(ChangeRepresentation, p, "the same set of names, written differently"))
			}
			for _, name := range setKeys(nReq) {
				_, isNewProp := nProps[name]
				_, wasProp := oProps[name]
				if !oReq[name] && (wasProp || !isNewProp) {
					cs = append(cs, change(ChangeRequiredExpanded, path+".properties."+name, "now required"))
				}
			}
			for _, name := range setKeys(oReq) {
				if _, still := nProps[name]; !nReq[name] && (still || nProps == nil) {
					cs = append(cs, change(ChangeRequiredRelaxed, path+".properties."+name, "no longer required"))
				}
			}
		case key == "type":
			if !reflect.DeepEqual(typeSet(a), typeSet(b)) {
				cs = append(cs, change(ChangeTypeChanged, p, fmt.Sprintf("%v → %v", typeList(a), typeList(b))))
			} else {
				cs = append(cs, change(ChangeRepresentation, p, "the same types, written differently"))
			}
		case key == "enum":
			cs = diffEnum(cs, p, a, b)
		case key == "description":
			cs = append(cs, change(ChangeDescription, p, textDelta(a, b)))
		case key == "title":
			cs = append(cs, change(ChangeTitle, p, textDelta(a, b)))
		case key == "default":
			cs = append(cs, change(ChangeDefault, p, textDelta(a, b)))
		case key == "examples":
			cs = append(cs, change(ChangeExamples, p, ""))
		case metaWords[key]:
			cs = append(cs, change(ChangeSchemaMetadata, p, textDelta(a, b)))
		case lowerBounds[key] || upperBounds[key]:
			cs = append(cs, boundChange(p, key, a, b, inOld, inNew))
		case shapeWords[key] || key == "uniqueItems":
			switch {
			case key == "uniqueItems" && b == true && a != true, !inOld:
				cs = append(cs, change(ChangeConstraintNarrowed, p, textDelta(a, b)))
			case key == "uniqueItems" && a == true && b != true, !inNew:
				cs = append(cs, change(ChangeConstraintWidened, p, textDelta(a, b)))
			default:
				cs = append(cs, change(ChangeConstraintChanged, p, textDelta(a, b)))
			}
		case key == "additionalProperties":
			_, aObj := a.(map[string]any)
			_, bObj := b.(map[string]any)
			switch {
			case aObj && bObj:
				cs = diffSchema(cs, p, a, b)
			case allowsAny(a, inOld) && b == false:
				cs = append(cs, change(ChangeConstraintNarrowed, p, textDelta(a, b)))
			case a == false && allowsAny(b, inNew):
				cs = append(cs, change(ChangeConstraintWidened, p, textDelta(a, b)))
			case aObj && allowsAny(b, inNew):
				cs = diffSchema(cs, p, a, map[string]any{}) // absent, true and {} admit anything
			case allowsAny(a, inOld) && bObj:
				cs = diffSchema(cs, p, map[string]any{}, b)
			default:
				cs = append(cs, change(ChangeUnclassified, p, textDelta(a, b)))
			}
		case key == "items":
			_, aObj := a.(map[string]any)
			_, bObj := b.(map[string]any)
			switch {
			case aObj && bObj:
				cs = diffSchema(cs, p, a, b)
			case aObj && !inNew: // an absent items admits anything, as {} does
				cs = diffSchema(cs, p, a, map[string]any{})
			case !inOld && bObj:
				cs = diffSchema(cs, p, map[string]any{}, b)
			case textOnly(key, a, b):
				cs = diffText(cs, p, a, b, valueIsSchema(key, a))
			default:
				cs = append(cs, change(ChangeUnclassified, p, "items changed shape"))
			}
		case textOnly(key, a, b):
			// A keyword without a rule (anyOf, $defs, not, ...) whose
			// schemas differ only in annotations: report the text.
			cs = diffText(cs, p, a, b, valueIsSchema(key, a))
		case key == "anyOf" || key == "allOf":
			cs = diffMembers(cs, p, key, a, b)
		default:
			cs = append(cs, change(ChangeUnclassified, p, "no rule for this keyword"))
		}
	}
	return cs
}

// allowsAny reports whether an additionalProperties value admits anything.
func allowsAny(v any, present bool) bool {
	if !present || v == true {
		return true
	}
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

func boundChange(p, key string, a, b any, inOld, inNew bool) Change {
	narrowed, widened := ChangeConstraintNarrowed, ChangeConstraintWidened
	if upperBounds[key] {
		narrowed, widened = widened, narrowed // for an upper bound, a larger value widens
	}
	switch {
	case !inOld:
		return change(ChangeConstraintNarrowed, p, textDelta(a, b))
	case !inNew:
		return change(ChangeConstraintWidened, p, textDelta(a, b))
	}
	x, okA := number(a)
	y, okB := number(b)
	switch {
	case !okA || !okB:
		return change(ChangeUnclassified, p, "a bound that is not a number")
	case y > x:
		return change(narrowed, p, textDelta(a, b))
	default:
		return change(widened, p, textDelta(a, b))
	}
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return f, err == nil
}

func diffEnum(cs []Change, p string, a, b any) []Change {
	al, okA := a.([]any)
	bl, okB := b.([]any)
	if a == nil && okB {
		return append(cs, change(ChangeConstraintNarrowed, p, "enum added"))
	}
	if okA && b == nil {
		return append(cs, change(ChangeConstraintWidened, p, "enum removed"))
	}
	if !okA || !okB {
		return append(cs, change(ChangeUnclassified, p, "enum is not an array"))
	}
	as, bs := valueSet(al), valueSet(bl)
	var removed, added []string
	for k := range as {
		if !bs[k] {
			removed = append(removed, k)
		}
	}
	for k := range bs {
		if !as[k] {
			added = append(added, k)
		}
	}
	sort.Strings(removed)
	sort.Strings(added)
	if len(removed) > 0 {
		cs = append(cs, change(ChangeEnumRemoved, p, clipText(strings.Join(removed, ", "))))
	}
	if len(added) > 0 {
		cs = append(cs, change(ChangeEnumAdded, p, clipText(strings.Join(added, ", "))))
	}
	if len(removed)+len(added) == 0 {
		cs = append(cs, change(ChangeEnumReordered, p, ""))
	}
	return cs
}

func valueSet(l []any) map[string]bool {
	s := make(map[string]bool, len(l))
	for _, v := range l {
		b, _ := json.Marshal(v)
		s[string(b)] = true
	}
	return s
}

func stringSet(v any) map[string]bool {
	s := map[string]bool{}
	l, _ := v.([]any)
	for _, e := range l {
		if str, ok := e.(string); ok {
			s[str] = true
		}
	}
	return s
}

func setKeys(s map[string]bool) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func typeSet(v any) map[string]bool {
	if s, ok := v.(string); ok {
		return map[string]bool{s: true}
	}
	return stringSet(v)
}

func typeList(v any) string {
	if v == nil {
		return "(none)"
	}
	return strings.Join(setKeys(typeSet(v)), "|")
}

// alignEnumConst writes a const as a one-value enum when the other side has
// an enum, so that enum [a, b] becoming const a reads as the value b removed.
func alignEnumConst(o, n map[string]any) (map[string]any, map[string]any) {
	asEnum := func(s map[string]any) map[string]any {
		c := make(map[string]any, len(s))
		for k, v := range s {
			c[k] = v
		}
		c["enum"] = []any{c["const"]}
		delete(c, "const")
		return c
	}
	_, oConst := o["const"]
	_, nConst := n["const"]
	_, oEnum := o["enum"]
	_, nEnum := n["enum"]
	switch {
	case oConst && !oEnum && nEnum && !nConst:
		o = asEnum(o)
	case nConst && !nEnum && oEnum && !oConst:
		n = asEnum(n)
	}
	return o, n
}

// strippedKey is the JSON of a schema's normal form without annotations.
func strippedKey(v any) string {
	n, _ := normalizeSchema(v, true)
	b, _ := json.Marshal(n)
	return string(b)
}

// textOnly reports whether the values of keyword key in two schemas differ
// only in annotation keywords (description, title, examples, $comment) at
// schema positions.
func textOnly(key string, a, b any) bool {
	sa, _ := normalizeSchema(map[string]any{key: a}, true)
	sb, _ := normalizeSchema(map[string]any{key: b}, true)
	return reflect.DeepEqual(sa, sb)
}

// keywordHoldsSchema reports whether a keyword's value is a schema, or an
// object or array of schemas.
func keywordHoldsSchema(key string) bool {
	return schemaWords[key] || schemaMaps[key] || schemaLists[key] || key == "items" || key == "$defs" || key == "definitions"
}

// valueIsSchema reports whether keyword key holds one schema (rather than an
// array or object of them).
func valueIsSchema(key string, v any) bool {
	_, isList := v.([]any)
	return schemaWords[key] || (key == "items" && !isList)
}

// diffText reports the annotation differences between two values that are
// equal once annotations are left out (textOnly). atSchema says whether a
// and b sit at a schema position; otherwise they hold schemas as a keyword's
// value (an array of schemas, or an object of them).
func diffText(cs []Change, path string, a, b any, atSchema bool) []Change {
	if reflect.DeepEqual(a, b) {
		return cs
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		for _, k := range unionKeys(x, y) {
			u, v := x[k], y[k]
			if reflect.DeepEqual(u, v) {
				continue
			}
			p := path + "." + k
			switch {
			case atSchema && k == "description":
				cs = append(cs, change(ChangeDescription, p, textDelta(u, v)))
			case atSchema && k == "title":
				cs = append(cs, change(ChangeTitle, p, textDelta(u, v)))
			case atSchema && k == "examples":
				cs = append(cs, change(ChangeExamples, p, ""))
			case atSchema && k == "$comment":
				cs = append(cs, change(ChangeSchemaMetadata, p, textDelta(u, v)))
			case atSchema && (schemaWords[k] || k == "items"):
				cs = diffText(cs, p, u, v, true)
			case atSchema && keywordHoldsSchema(k):
				cs = diffText(cs, p, u, v, false)
			case !atSchema:
				cs = diffText(cs, p, u, v, true) // a member of properties, $defs, ...
			default:
				cs = append(cs, change(ChangeUnclassified, p, "no rule for this keyword"))
			}
		}
		return cs
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || atSchema {
			break
		}
		// Pair the members that are equal without their text; their order
		// may differ, since unordered lists are sorted with the text.
		free := map[string][]int{} // members of y by their form without text
		for j, v := range y {
			k := strippedKey(v)
			free[k] = append(free[k], j)
		}
		for _, u := range x {
			k := strippedKey(u)
			if len(free[k]) == 0 {
				return append(cs, change(ChangeUnclassified, path, "no rule for this change"))
			}
			j := free[k][0]
			free[k] = free[k][1:]
			cs = diffText(cs, path+"[]", u, y[j], true)
		}
		return cs
	}
	return append(cs, change(ChangeUnclassified, path, "no rule for this change"))
}

// diffMembers classifies a change of anyOf or allOf. Both are monotone: a
// member that accepts more makes the whole accept more or the same, so one
// member that changed is compared as a schema, with the same directions.
// A member added to anyOf widens it and one removed narrows it; allOf the
// other way round. Anything else is unclassified. (oneOf is not monotone:
// a branch that accepts more can make a value match two branches.)
func diffMembers(cs []Change, p, key string, a, b any) []Change {
	x, okA := a.([]any)
	y, okB := b.([]any)
	if !okA || !okB || len(x) == 0 || len(y) == 0 {
		return append(cs, change(ChangeUnclassified, p, "no rule for this change"))
	}
	left := map[string][]int{} // members of y not yet matched, by their JSON
	for j, v := range y {
		k, _ := json.Marshal(v)
		left[string(k)] = append(left[string(k)], j)
	}
	matched := make([]bool, len(y))
	var onlyX, onlyY []any
	for _, u := range x {
		k, _ := json.Marshal(u)
		if js := left[string(k)]; len(js) > 0 {
			matched[js[0]], left[string(k)] = true, js[1:]
			continue
		}
		onlyX = append(onlyX, u)
	}
	for j, v := range y {
		if !matched[j] {
			onlyY = append(onlyY, v)
		}
	}
	widens := key == "anyOf"
	switch {
	case len(onlyX) == 1 && len(onlyY) == 1:
		return diffSchema(cs, p+"[]", onlyX[0], onlyY[0])
	case len(onlyX) == 0 && len(onlyY) > 0:
		kind := ChangeConstraintNarrowed
		if widens {
			kind = ChangeConstraintWidened
		}
		return append(cs, change(kind, p, fmt.Sprintf("%d member(s) added", len(onlyY))))
	case len(onlyX) > 0 && len(onlyY) == 0:
		kind := ChangeConstraintWidened
		if widens {
			kind = ChangeConstraintNarrowed
		}
		return append(cs, change(kind, p, fmt.Sprintf("%d member(s) removed", len(onlyX))))
	}
	return append(cs, change(ChangeUnclassified, p, "members changed in a way no rule describes"))
}

// jsonText writes v as JSON for a detail; nil stays nil (printed "(none)").
func jsonText(v any) any {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// iconsDelta names the icon sources on each side.
func iconsDelta(o, n any) string {
	srcs := func(v any) any {
		list, _ := v.([]any)
		if list == nil {
			return nil
		}
		var out []string
		for _, ic := range list {
			if s, ok := asMap(ic)["src"].(string); ok {
				if strings.HasPrefix(s, "data:") {
					s = "data:… (" + strconv.Itoa(len(s)) + " bytes)"
				}
				out = append(out, s)
			}
		}
		return strings.Join(out, " ")
	}
	return textDelta(srcs(o), srcs(n))
}

// The _meta members a host acts on (MCP Apps, extension
// io.modelcontextprotocol/ui, and the OpenAI Apps SDK).
const (
	metaUI             = "ui"                    // MCP Apps: an object (resourceUri, visibility on a tool; csp, permissions, domain, prefersBorder on a UI resource)
	metaUILegacy       = "ui/resourceUri"        // MCP Apps before the ui object
	metaOpenAITemplate = "openai/outputTemplate" // OpenAI Apps SDK: the tool's UI resource
	metaOpenAIPrefix   = "openai/"
)

// uiPolicyKeys are the members of a UI resource's _meta.ui (and their
// OpenAI Apps SDK spellings) that decide what the rendered UI may reach.
var uiPolicyKeys = map[string]bool{"csp": true, "permissions": true, "domain": true, "openai/widgetCSP": true, "openai/widgetDomain": true}

// diffMeta classifies the changes of an item's _meta (form v2): the UI
// link of a tool and its visibility, a UI resource's sandbox, the other
// UI and Apps SDK members, and every other member as meta_changed.
func diffMeta(cs []Change, kind Kind, o, n map[string]any) []Change {
	if kind == KindTool {
		ol, nl := linkAt(uiLinksOf(map[string]any{"_meta": o})), linkAt(uiLinksOf(map[string]any{"_meta": n}))
		for _, p := range unionKeys(ol, nl) {
			a, inO := ol[p]
			b, inN := nl[p]
			switch {
			case !inO:
				cs = append(cs, change(ChangeUILinkAdded, p, textDelta(nil, b)))
			case !inN:
				cs = append(cs, change(ChangeUILinkRemoved, p, textDelta(a, nil)))
			case a != b:
				cs = append(cs, change(ChangeUILinkChanged, p, textDelta(a, b)))
			}
		}
	}
	for _, key := range unionKeys(o, n) {
		a, b := o[key], n[key]
		if reflect.DeepEqual(a, b) {
			continue
		}
		p := "_meta." + key
		switch {
		case key == metaUI:
			x, y := asMap(a), asMap(b)
			if (a != nil && x == nil) || (b != nil && y == nil) {
				cs = append(cs, change(ChangeUIMeta, p, textDelta(jsonText(a), jsonText(b))))
				continue
			}
			for _, k := range unionKeys(x, y) {
				u, v := x[k], y[k]
				if reflect.DeepEqual(u, v) || (kind == KindTool && k == "resourceUri") {
					continue // the link is reported above
				}
				switch {
				case kind == KindTool && k == "visibility":
					cs = append(cs, change(ChangeUIVisibility, p+"."+k, textDelta(jsonText(u), jsonText(v))))
				case kind != KindTool && uiPolicyKeys[k]:
					cs = append(cs, change(ChangeUIPolicy, p+"."+k, clipText(textDelta(jsonText(u), jsonText(v)))))
				default:
					cs = append(cs, change(ChangeUIMeta, p+"."+k, clipText(textDelta(jsonText(u), jsonText(v)))))
				}
			}
		case kind == KindTool && (key == metaUILegacy || key == metaOpenAITemplate):
			// reported above as a link
		case kind != KindTool && uiPolicyKeys[key]:
			cs = append(cs, change(ChangeUIPolicy, p, clipText(textDelta(jsonText(a), jsonText(b)))))
		case strings.HasPrefix(key, metaOpenAIPrefix):
			cs = append(cs, change(ChangeUIMeta, p, clipText(textDelta(jsonText(a), jsonText(b)))))
		default:
			cs = append(cs, change(ChangeMeta, p, clipText(textDelta(jsonText(a), jsonText(b)))))
		}
	}
	return cs
}

func linkAt(links []uiLink) map[string]any {
	m := map[string]any{}
	for _, l := range links {
		m[l.path] = l.uri
	}
	return m
}

// unlistedLinks reports, on the tool's entry, each UI link of new to a
// resource new does not list that old did not already report: a UI nobody
// could review. A tool whose hash did not change (the resource left the
// listing) gets an entry of its own.
func (r *Report) unlistedLinks(old, new *Surface) {
	before := map[UILink]bool{}
	for _, l := range old.UnlistedUILinks() {
		before[l] = true
	}
	for _, l := range new.UnlistedUILinks() {
		if before[l] {
			continue
		}
		c := change(ChangeUILinkUnlisted, "_meta", "links "+visible(clipText(l.URI))+", which the server does not list as a resource")
		if attachTo(r.Added, l.Tool, c) || attachTo(r.Changed, l.Tool, c) {
			continue
		}
		it, _ := new.Find(KindTool, l.Tool)
		entry := finish(ItemDiff{Kind: KindTool.String(), Name: l.Tool, OldHash: digestPtr(it.Hash), NewHash: digestPtr(it.Hash), Changes: []Change{c}})
		i := 0 // after the form entry, the tools listing entry and the tools named before it
		for ; i < len(r.Changed); i++ {
			e := r.Changed[i]
			if !(e.Kind == "surface" || (e.Kind == "listing" && e.Name == KindTool.ListKey()) ||
				(e.Kind == KindTool.String() && compareNames(e.Name, l.Tool) < 0)) {
				break
			}
		}
		r.Changed = slices.Insert(r.Changed, i, entry)
	}
}

func attachTo(list []ItemDiff, tool string, c Change) bool {
	for i := range list {
		if list[i].Kind == KindTool.String() && list[i].Name == tool {
			list[i].Changes = append(list[i].Changes, c)
			list[i] = finish(list[i])
			return true
		}
	}
	return false
}

// diffUIContent classifies the change of a UI resource's read contents:
// what a host renders (a content's text or blob, a content added or
// removed) is ui_content_changed, its mime type mime_type_changed, and its
// _meta as a resource's (the sandbox: ui_policy_changed). Contents are
// matched by position: a host renders them in order.
func diffUIContent(cs []Change, o, n map[string]any) []Change {
	ol, _ := o["contents"].([]any)
	nl, _ := n["contents"].([]any)
	if len(ol) != len(nl) {
		cs = append(cs, change(ChangeUIContentChanged, "contents", fmt.Sprintf("%d contents → %d", len(ol), len(nl))))
	}
	for i := range min(len(ol), len(nl)) {
		a, b := asMap(ol[i]), asMap(nl[i])
		p := "contents[" + strconv.Itoa(i) + "]"
		for _, key := range unionKeys(a, b) {
			x, y := a[key], b[key]
			if reflect.DeepEqual(x, y) {
				continue
			}
			switch key {
			case "text", "blob":
				cs = append(cs, change(ChangeUIContentChanged, p+"."+key, sizeDelta(x, y)))
			case "mimeType":
				cs = append(cs, change(ChangeMimeType, p+"."+key, textDelta(x, y)))
			case "uri":
				cs = append(cs, change(ChangeUIContentChanged, p+"."+key, textDelta(x, y)))
			case "_meta":
				for _, c := range diffMeta(nil, KindResource, asMap(x), asMap(y)) {
					c.Path = p + "." + c.Path
					cs = append(cs, c)
				}
			default:
				cs = append(cs, change(ChangeUnclassified, p+"."+key, "no rule for this field"))
			}
		}
	}
	return cs
}

// sizeDelta says how a rendered body changed, by its size: the bodies
// themselves are documents, not a line for a report.
func sizeDelta(a, b any) string {
	sa, _ := a.(string)
	sb, _ := b.(string)
	switch {
	case a == nil:
		return fmt.Sprintf("added (%d characters)", len(sb))
	case b == nil:
		return fmt.Sprintf("removed (%d characters)", len(sa))
	}
	return fmt.Sprintf("%d characters → %d", len(sa), len(sb))
}
