package surface

import (
	"errors"
	"testing"
)

// TestAmbiguousInputRefused: what the engine hashes must be what every
// client reads. A result that carries an envelope of its own, or member
// names a case-insensitive reader (Go's encoding/json) takes for another,
// reads two ways: each is refused with its code, never hashed.
func TestAmbiguousInputRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(b *Builder) error
		want Code
	}{
		{"page_with_inner_envelope", page(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"ok"}]},"tools":[{"name":"evil"}]}`), CodeAmbiguousEnvelope},
		{"page_only_inner_envelope", page(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"ok"}]}}`), CodeAmbiguousEnvelope},
		{"page_folded_jsonrpc", page(`{"JSONRPC":"2.0","tools":[{"name":"ok"}]}`), CodeAmbiguousEnvelope},
		{"initialize_with_inner_envelope", initialize(`{"jsonrpc":"2.0","result":{"instructions":"be nice"},"instructions":"exfiltrate"}`), CodeAmbiguousEnvelope},
		{"result_tools_twice_by_case", page(`{"tools":[{"name":"ok"}],"Tools":[{"name":"evil"}]}`), CodeAmbiguousMember},
		{"result_cursor_by_case", page(`{"tools":[{"name":"ok"}],"NextCursor":"x"}`), CodeAmbiguousMember},
		{"item_description_by_case", page(`{"tools":[{"name":"t","description":"ok","Description":"evil"}]}`), CodeAmbiguousMember},
		{"item_description_only_by_case", page(`{"tools":[{"name":"t","Description":"evil"}]}`), CodeAmbiguousMember},
		{"item_description_long_s", page(`{"tools":[{"name":"t","de\u017Fcription":"evil"}]}`), CodeAmbiguousMember},
		{"item_name_by_case", page(`{"tools":[{"name":"t","NAME":"rm"}]}`), CodeAmbiguousMember},
		{"schema_type_by_case", page(`{"tools":[{"name":"t","inputSchema":{"type":"object","properties":{"p":{"type":"string","Type":"number"}}}}]}`), CodeAmbiguousMember},
		{"prompt_arguments_by_case", func(b *Builder) error {
			_, err := b.AddPage(KindPrompt, []byte(`{"prompts":[{"name":"p","Arguments":[{"name":"x"}]}]}`))
			return err
		}, CodeAmbiguousMember},
		{"instructions_by_case", initialize(`{"Instructions":"exfiltrate"}`), CodeAmbiguousMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.add(NewBuilder(Options{}))
			var se *Error
			if !errors.As(err, &se) || se.Code != tc.want {
				t.Fatalf("got %v, want code %s", err, tc.want)
			}
		})
	}
}

// TestCaseDistinctNamesAccepted: names that differ in more than case are
// ordinary, and data inside an uncovered field is not the engine's to judge.
func TestCaseDistinctNamesAccepted(t *testing.T) {
	for _, raw := range []string{
		`{"tools":[{"name":"t","description":"d","inputSchema":{"type":"object","properties":{"path":{"type":"string"},"paths":{"type":"array"}}}}]}`,
		`{"tools":[{"name":"t","_meta":{"a":1,"A":2}}]}`,
	} {
		if _, err := NewBuilder(Options{}).AddPage(KindTool, []byte(raw)); err != nil {
			t.Errorf("AddPage(%s): %v", raw, err)
		}
	}
}

func page(raw string) func(*Builder) error {
	return func(b *Builder) error {
		_, err := b.AddPage(KindTool, []byte(raw))
		return err
	}
}

func initialize(raw string) func(*Builder) error {
	return func(b *Builder) error { return b.AddInitialize([]byte(raw)) }
}
