package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		kind   Kind
		method string
		id     string
		err    string // code or sentinel text expected
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, KindRequest, "tools/list", "1", ""},
		{"string_id", `{"jsonrpc":"2.0","id":"a\u0062","method":"ping"}`, KindRequest, "ping", `"a\u0062"`, ""},
		{"huge_id_kept_exactly", `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`, KindRequest, "ping", "123456789012345678901234567890", ""},
		{"float_id_kept_exactly", `{"jsonrpc":"2.0","id":1.50,"method":"ping"}`, KindRequest, "ping", "1.50", ""},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`, KindNotification, "notifications/tools/list_changed", "", ""},
		{"result", `{"jsonrpc":"2.0","id":7,"result":{"tools":[]}}`, KindResponse, "", "7", ""},
		{"error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"nope"}}`, KindResponse, "", "7", ""},
		{"null_id_error", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`, KindResponse, "", "null", ""},
		{"no_version", `{"id":1,"method":"x"}`, 0, "", "", "invalid_message"},
		{"old_version", `{"jsonrpc":"1.0","id":1,"method":"x"}`, 0, "", "", "invalid_message"},
		{"object_id", `{"jsonrpc":"2.0","id":{},"method":"x"}`, 0, "", "", "invalid_message"},
		{"null_request_id", `{"jsonrpc":"2.0","id":null,"method":"x"}`, 0, "", "", "invalid_message"},
		{"method_not_string", `{"jsonrpc":"2.0","id":1,"method":5}`, 0, "", "", "invalid_message"},
		{"params_string", `{"jsonrpc":"2.0","id":1,"method":"x","params":"p"}`, 0, "", "", "invalid_message"},
		{"result_and_error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{}}`, 0, "", "", "invalid_message"},
		{"neither", `{"jsonrpc":"2.0","id":1}`, 0, "", "", "invalid_message"},
		{"response_without_id", `{"jsonrpc":"2.0","result":{}}`, 0, "", "", "invalid_message"},
		{"method_and_result", `{"jsonrpc":"2.0","id":1,"method":"x","result":{}}`, 0, "", "", "invalid_message"},
		{"duplicate_member", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, 0, "", "", "duplicate_key"},
		{"not_json", `{"jsonrpc":`, 0, "", "", "invalid_json"},
		{"array", `[]`, 0, "", "", "invalid_message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.raw), Limits{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse = %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind != tt.kind || m.Method != tt.method || string(m.ID) != tt.id {
				t.Fatalf("kind %s method %q id %s", m.Kind, m.Method, m.ID)
			}
		})
	}
}

func TestSplitBatch(t *testing.T) {
	msgs, batch, err := Split([]byte(` [{"jsonrpc":"2.0","id":1,"method":"a"}, {"jsonrpc":"2.0","method":"b"}] `), Limits{})
	if err != nil || !batch || len(msgs) != 2 || msgs[0].Kind != KindRequest || msgs[1].Kind != KindNotification {
		t.Fatalf("batch: %v %v %d", err, batch, len(msgs))
	}
	if string(msgs[1].Raw) != `{"jsonrpc":"2.0","method":"b"}` {
		t.Fatalf("raw of an element: %s", msgs[1].Raw)
	}
	if _, _, err := Split([]byte(`[]`), Limits{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty batch: %v", err)
	}
	if _, _, err := Split([]byte(`[{"jsonrpc":"2.0","id":1,"method":"a"},5]`), Limits{}); err == nil || !strings.Contains(err.Error(), "batch element 2") {
		t.Fatalf("bad element: %v", err)
	}
}

// filterByName splices m's list array by each element's name, with the
// spans read from m's kept parse (as the session does with the engine's).
func filterByName(m *Message, listKey string, keep func(name string) bool) ([]byte, int, error) {
	d, res, ok := m.Parsed()
	if !ok || d.Kind(res) != canonjson.Object {
		return nil, 0, ErrInvalid
	}
	arr, ok := d.Get(res, listKey)
	if !ok || d.Kind(arr) != canonjson.Array {
		return nil, 0, ErrInvalid
	}
	var elems []Span
	var names []string
	for el, i := d.First(arr), 0; i < d.Len(arr); el, i = d.Next(el), i+1 {
		elems = append(elems, Span{d.Offset(el), d.Offset(el) + len(d.Raw(el))})
		name := ""
		if d.Kind(el) == canonjson.Object {
			if nv, ok := d.Get(el, "name"); ok && d.Kind(nv) == canonjson.String {
				name = d.Text(nv)
			}
		}
		names = append(names, name)
	}
	return m.Splice(Span{d.Offset(arr), d.Offset(arr) + len(d.Raw(arr))}, elems, func(i int) bool { return keep(names[i]) })
}

func TestSpliceList(t *testing.T) {
	raw := `{"jsonrpc":"2.0", "id": 12345678901234567890 ,"result":{ "nextCursor" : null , "tools" : [ {"name":"keep","description":"<b>&amp;</b>","x":1.50} , {"name":"drop"}, {"name":"keep2"} ], "_meta":{"k":[3, 2]} } }`
	m, err := Parse([]byte(raw), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out, removed, err := filterByName(m, "tools", func(name string) bool { return name != "drop" })
	if err != nil || removed != 1 {
		t.Fatalf("Splice: %v, removed %d", err, removed)
	}
	want := `{"jsonrpc":"2.0", "id": 12345678901234567890 ,"result":{ "nextCursor" : null , "tools" : [{"name":"keep","description":"<b>&amp;</b>","x":1.50},{"name":"keep2"}], "_meta":{"k":[3, 2]} } }`
	if string(out) != want {
		t.Fatalf("spliced\n got %s\nwant %s", out, want)
	}
	if !json.Valid(out) {
		t.Fatal("the spliced message is not valid JSON")
	}
	// Nothing to remove: the very same bytes.
	same, removed, _ := filterByName(m, "tools", func(string) bool { return true })
	if removed != 0 || !bytes.Equal(same, m.Raw) {
		t.Fatal("a splice that keeps everything changed the message")
	}
	none, _, _ := filterByName(m, "tools", func(string) bool { return false })
	if !strings.Contains(string(none), `"tools" : []`) || !json.Valid(none) {
		t.Fatalf("a splice that keeps nothing: %s", none)
	}
}

func TestToolError(t *testing.T) {
	out := ToolError([]byte(`"req-\u00e9"`), "server_changed", "Server \"fs\" changed since it was approved; an admin must review it.")
	var v struct {
		ID     string `json:"id"`
		Result struct {
			Content []struct{ Type, Text string }
			IsError bool              `json:"isError"`
			Meta    map[string]string `json:"_meta"`
		}
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.ID != "req-é" || !v.Result.IsError || v.Result.Meta["mcpdrift/code"] != "server_changed" || !strings.Contains(v.Result.Content[0].Text, `"fs"`) {
		t.Fatalf("tool error: %+v", v)
	}
	if !bytes.Contains(out, []byte(`"id":"req-\u00e9"`)) {
		t.Fatalf("the id was not echoed byte for byte: %s", out)
	}
	if got := ErrorResponse(nil, -32700, "parse error"); !json.Valid(got) || !bytes.Contains(got, []byte(`"id":null`)) {
		t.Fatalf("error response: %s", got)
	}
}

// FuzzParse: never panics; whatever parses as a response with a list result
// spliced by its elements' spans is valid JSON.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b"}]}}`,
		`[{"jsonrpc":"2.0","method":"x"}]`,
		`{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		msgs, _, err := SplitIn(new(canonjson.Doc), raw, Limits{MaxDepth: 64})
		if err != nil {
			var ce *canonjson.Error
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrAmbiguous) && !errors.As(err, &ce) {
				t.Fatalf("an error without a code: %v", err)
			}
			return
		}
		for _, m := range msgs {
			if m.Kind != KindResponse || m.Result == nil {
				continue
			}
			out, _, err := filterByName(m, "tools", func(name string) bool { return len(name)%2 == 0 })
			if err == nil && !json.Valid(out) {
				t.Fatalf("spliced message is not JSON: %s", out)
			}
		}
	})
}

func TestRemoveResultMember(t *testing.T) {
	tests := []struct{ name, raw, want string }{
		{"middle", `{"jsonrpc":"2.0","id":1,"result":{"a":1, "instructions" : "x" ,"b":[2]}}`, `{"jsonrpc":"2.0","id":1,"result":{"a":1, "b":[2]}}`},
		{"first", `{"jsonrpc":"2.0","id":1,"result":{"instructions":"x","b":2}}`, `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`},
		{"last", `{"jsonrpc":"2.0","id":1,"result":{"b":2 , "instructions":{"n":[1,2]} }}`, `{"jsonrpc":"2.0","id":1,"result":{"b":2  }}`},
		{"only", `{"jsonrpc":"2.0","id":1,"result":{"instructions":"x"}}`, `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{"absent", `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`, `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`},
		{"escaped_key", `{"jsonrpc":"2.0","id":1,"result":{"b":2,"instruction\u0073":"x"}}`, `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.raw), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			out, removed, err := RemoveResultMember(m, "instructions")
			if err != nil || string(out) != tt.want || removed != (tt.name != "absent") || !json.Valid(out) {
				t.Fatalf("got %s (removed %v, %v), want %s", out, removed, err, tt.want)
			}
		})
	}
}

func TestAmbiguousEnvelopeRefused(t *testing.T) {
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]},"Result":{"tools":[{"name":"evil"}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"result":{},"ID":2}`,
		`{"jsonrpc":"2.0","id":1,"result":{},"Error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"x","paramſ":{}}`,
	} {
		if _, err := Parse([]byte(raw), Limits{}); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("Parse(%s) = %v, want ErrAmbiguous", raw, err)
		}
		if _, _, err := Split([]byte("["+raw+"]"), Limits{}); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("Split([%s]) = %v, want ErrAmbiguous", raw, err)
		}
	}
}

// ReplaceParamsMember changes only the member's value: the id, the other
// members, their order and white space stay byte for byte.
func TestReplaceParamsMember(t *testing.T) {
	raw := `{ "id" : 9007199254740993, "jsonrpc":"2.0","method":"tools/call","params":{"name":"read", "arguments" : {"a":1,"b":"x"} ,"_meta":{"k":1}}}`
	m, err := Parse([]byte(raw), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ReplaceParamsMember(m, "arguments", []byte(`{"a":1,"b":"[redacted]"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{ "id" : 9007199254740993, "jsonrpc":"2.0","method":"tools/call","params":{"name":"read", "arguments" : {"a":1,"b":"[redacted]"} ,"_meta":{"k":1}}}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	if _, err := ReplaceParamsMember(m, "missing", []byte(`1`)); err == nil {
		t.Error("a member the params lack was added")
	}
}

// EditResult removes and replaces members of a result, keeps the others'
// bytes and the envelope's, reads escaped member names decoded, and does
// the same from a kept parse (SplitIn) as from its own.
func TestEditResult(t *testing.T) {
	tests := []struct{ name, raw, want string }{
		{"both", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25", "instructions" : "x" ,"serverInfo":{"name":"a","title":"PWNED"},"capabilities":{ }}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"a"},"capabilities":{ }}}`},
		{"escaped_key", `{"id":1,"jsonrpc":"2.0","result":{"instruction\u0073":"x","serverInfo":{}}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"serverInfo":{"name":"a"}}}`},
		{"absent", `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`, `{"jsonrpc":"2.0","id":1,"result":{"b":2}}`},
		{"only", `{"jsonrpc":"2.0","id":1,"result":{"instructions":"x"}}`, `{"jsonrpc":"2.0","id":1,"result":{}}`},
	}
	edits := map[string][]byte{"instructions": nil, "serverInfo": []byte(`{"name":"a"}`)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.raw), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			out, err := EditResult(m, edits)
			if err != nil || string(out) != tt.want || !json.Valid(out) {
				t.Fatalf("got %s (%v), want %s", out, err, tt.want)
			}
			batch := []byte(`[` + tt.raw + `]`)
			msgs, _, err := SplitIn(new(canonjson.Doc), batch, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if out, err := EditResult(msgs[0], edits); err != nil || string(out) != tt.want {
				t.Fatalf("from a kept parse: got %s (%v), want %s", out, err, tt.want)
			}
		})
	}
	m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`), Limits{})
	if _, err := EditResult(m, edits); err == nil {
		t.Error("an error response was edited")
	}
}
