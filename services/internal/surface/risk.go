package surface

import (
	"fmt"
	"slices"
)

// maxRiskReasons bounds the reasons Rate gives (the rest are counted).
const maxRiskReasons = 8

// Rate returns the risk band of a surface, as a severity from low to
// critical, and the reasons for it, from what the engine finds in it
// (docs/policy-drift-settings.md):
//
//   - critical: an injection or exfiltration marker (hidden_instructions,
//     exfiltration) in any item, the instructions included;
//   - high: a tool that declares itself destructive (destructiveHint true,
//     not read-only), any other poisoning marker (secret_path,
//     invisible_chars, encoded_blob), or a tool that links a UI resource
//     the surface does not list (form v2: UnlistedUILinks);
//   - medium: a tool that may write (not declared read-only: the MCP
//     default) or reaches an open world (openWorldHint true, the MCP
//     default);
//   - low: everything else (read-only, closed-world tools; prompts,
//     resources and templates without markers).
//
// The reasons name the items that set the band and the ones just below it,
// at most maxRiskReasons, then how many more.
func Rate(s *Surface) (Severity, []string) { return rate(s, scanText) }

// Rate is the package's Rate with the markers of each string remembered
// (MarkerMemo): a fleet's manifests share most of their strings. A nil
// MarkerMemo remembers nothing.
func (m *MarkerMemo) Rate(s *Surface) (Severity, []string) {
	if m == nil {
		return Rate(s)
	}
	return rate(s, m.scanText)
}

func rate(s *Surface, scan textScanner) (Severity, []string) {
	band := SeverityLow
	type reason struct {
		sev  Severity
		text string
	}
	var all []reason
	raise := func(sev Severity, text string) {
		band = max(band, sev)
		all = append(all, reason{sev, sev.String() + ": " + text})
	}
	unlisted := map[string][]string{}
	for _, l := range s.UnlistedUILinks() {
		unlisted[l.Tool] = append(unlisted[l.Tool], l.URI)
	}
	for _, it := range s.Items {
		v := decode(it)
		if it.Kind == KindUIContent {
			v = uiContentText(v) // markup is code a browser runs, not text the model reads
		}
		what := it.Kind.String()
		if it.Name != "" {
			what += " " + it.Name
		}
		seen := map[string]bool{}
		for _, m := range scanValueWith(nil, "", v, scan) {
			if seen[m.Kind] {
				continue
			}
			seen[m.Kind] = true
			sev := SeverityHigh
			if m.Kind == MarkerHiddenInstructions || m.Kind == MarkerExfiltration {
				sev = SeverityCritical
			}
			raise(sev, fmt.Sprintf("%s: %s marker at %s", what, m.Kind, m.Path))
		}
		if it.Kind != KindTool {
			continue
		}
		for _, u := range unlisted[it.Name] {
			raise(SeverityHigh, what+": links the UI "+quote(u)+", which the server does not list")
		}
		ann := asMap(asMap(v)["annotations"])
		readOnly := hintValue(ann, "readOnlyHint", false)
		switch {
		case explicitlyDestructive(v):
			raise(SeverityHigh, what+": declared destructive")
		case !readOnly:
			raise(SeverityMedium, what+": may write (not declared read-only)")
		}
		if hintValue(ann, "openWorldHint", true) {
			raise(SeverityMedium, what+": open world")
		}
	}
	// The most severe reasons first, each severity in item order.
	slices.SortStableFunc(all, func(a, b reason) int { return int(b.sev) - int(a.sev) })
	reasons := make([]string, 0, min(len(all), maxRiskReasons+1))
	for i, r := range all {
		if i == maxRiskReasons {
			reasons = append(reasons, fmt.Sprintf("and %d more", len(all)-i))
			break
		}
		reasons = append(reasons, r.text)
	}
	return band, reasons
}
