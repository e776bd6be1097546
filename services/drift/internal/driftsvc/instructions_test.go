package driftsvc

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// TestSameInstructions: what the withhold_changed posture weighs, the
// live instructions against the baseline's, whatever else changed.
func TestSameInstructions(t *testing.T) {
	parse := func(instructions, tools string) *surface.Surface {
		t.Helper()
		init := `{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"x","version":"1"}`
		if instructions != "" {
			init += `,"instructions":"` + instructions + `"`
		}
		sf, err := surface.Parse([]byte(`{"initialize":`+init+`},"tools":{"pages":[{"tools":[`+tools+`]}]}}`), surface.Options{Form: surface.FormLatest})
		if err != nil {
			t.Fatal(err)
		}
		return sf
	}
	const a, b = `{"name":"a","inputSchema":{"type":"object"}}`, `{"name":"b","inputSchema":{"type":"object"}}`
	for _, tt := range []struct {
		name       string
		base, live *surface.Surface
		want       bool
	}{
		{"same_tools_changed", parse("Be kind.", a), parse("Be kind.", a+","+b), true},
		{"changed", parse("Be kind.", a), parse("Be cruel.", a), false},
		{"added", parse("", a), parse("Be kind.", a), false},
		{"removed", parse("Be kind.", a), parse("", a), false},
		{"none_in_either", parse("", a), parse("", b), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameInstructions(tt.base, tt.live); got != tt.want {
				t.Fatalf("sameInstructions = %v, want %v", got, tt.want)
			}
		})
	}
}
