package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		line    string
		wantErr bool
		request bool
		resp    bool
		result  string
	}{
		{name: "response", line: `{"jsonrpc":"2.0","id":1,"result": {"a" : "<&>"} }`, resp: true, result: `{"a" : "<&>"}`},
		{name: "response_null_result", line: `{"id":1,"result":null}`, resp: true, result: `null`},
		{name: "request", line: `{"jsonrpc":"2.0","id":"x","method":"roots/list"}`, request: true},
		{name: "notification", line: `{"jsonrpc":"2.0","method":"notifications/progress"}`},
		{name: "null_error_beside_result", line: `{"id":1,"result":{},"error":null}`, resp: true, result: `{}`},
		{name: "crlf", line: "{\"id\":2,\"result\":{}}\r", resp: true, result: `{}`},
		{name: "not_json", line: `Server running on stdio`, wantErr: true},
		{name: "array", line: `[{"id":1,"result":{}}]`, wantErr: true},
		{name: "trailing_data", line: `{"id":1,"result":{}} {}`, wantErr: true},
		{name: "duplicate_result", line: `{"id":1,"result":{},"result":{"evil":1}}`, wantErr: true},
		{name: "duplicate_id", line: `{"id":1,"id":2,"result":{}}`, wantErr: true},
		{name: "case_variant_is_not_result", line: `{"id":1,"Result":{}}`, resp: true},
		{name: "method_not_string", line: `{"id":1,"method":3}`, wantErr: true},
		{name: "no_id_no_method", line: `{"result":{}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := parseMessage([]byte(tt.line))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseMessage succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMessage: %v", err)
			}
			if m.isRequest() != tt.request || m.isResponse() != tt.resp {
				t.Errorf("isRequest=%v isResponse=%v, want %v %v", m.isRequest(), m.isResponse(), tt.request, tt.resp)
			}
			if string(m.result) != tt.result {
				t.Errorf("result = %q, want %q", m.result, tt.result)
			}
		})
	}
}

func TestNextCursor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		result  string
		cursor  string
		more    bool
		wantErr bool
	}{
		{name: "absent", result: `{"tools":[]}`},
		{name: "null", result: `{"tools":[],"nextCursor":null}`},
		{name: "string", result: `{"nextCursor":"abc\u0021"}`, cursor: "abc!", more: true},
		{name: "empty_string", result: `{"nextCursor":""}`, cursor: "", more: false},
		{name: "number", result: `{"nextCursor":5}`, wantErr: true},
		{name: "duplicate", result: `{"nextCursor":"a","nextCursor":null}`, wantErr: true},
		{name: "not_object", result: `[]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cursor, more, err := nextCursor(json.RawMessage(tt.result))
			if (err != nil) != tt.wantErr {
				t.Fatalf("nextCursor error = %v, want error %v", err, tt.wantErr)
			}
			if cursor != tt.cursor || more != tt.more {
				t.Errorf("nextCursor = %q, %v; want %q, %v", cursor, more, tt.cursor, tt.more)
			}
		})
	}
}

func TestAdvertised(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		init    string
		want    capabilities
		wantErr bool
	}{
		{name: "none", init: `{"protocolVersion":"x"}`},
		{name: "tools_only", init: `{"capabilities":{"tools":{}}}`},
		{name: "both", init: `{"capabilities":{"prompts":{},"resources":{"subscribe":true}}}`, want: capabilities{prompts: true, resources: true}},
		{name: "null_capability", init: `{"capabilities":{"prompts":null,"resources":{}}}`, want: capabilities{resources: true}},
		{name: "duplicate_capability", init: `{"capabilities":{"prompts":null,"prompts":{}}}`, wantErr: true},
		{name: "not_object", init: `"hello"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := advertised(json.RawMessage(tt.init))
			if (err != nil) != tt.wantErr {
				t.Fatalf("advertised error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("advertised = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		limit int
		want  []string
		err   error // after the lines
	}{
		{name: "lines", input: "a\nbc\n", limit: 10, want: []string{"a", "bc"}, err: io.EOF},
		{name: "final_line_without_newline", input: "a\nbc", limit: 10, want: []string{"a", "bc"}, err: io.EOF},
		{name: "empty_lines", input: "\n\nx\n", limit: 10, want: []string{"", "", "x"}, err: io.EOF},
		{name: "exactly_limit", input: "abcd\n", limit: 4, want: []string{"abcd"}, err: io.EOF},
		{name: "over_limit", input: "ab\nabcde\n", limit: 4, want: []string{"ab"}, err: errLineTooLong},
		{name: "over_limit_at_eof", input: "abcde", limit: 4, err: errLineTooLong},
		// Longer than bufio's 16-byte minimum buffer, to cross ReadSlice's ErrBufferFull.
		{name: "longer_than_buffer", input: strings.Repeat("x", 100) + "\n", limit: 100, want: []string{strings.Repeat("x", 100)}, err: io.EOF},
		{name: "longer_than_buffer_over_limit", input: strings.Repeat("x", 101) + "\n", limit: 100, err: errLineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := bufio.NewReaderSize(strings.NewReader(tt.input), 16)
			var got []string
			var err error
			for {
				var line []byte
				if line, err = readLine(r, tt.limit); err != nil {
					break
				}
				got = append(got, string(line))
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("readLine stopped with %v, want %v", err, tt.err)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("lines = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEncodeKeepsBytes(t *testing.T) {
	t.Parallel()
	c := &captured{
		initialize: json.RawMessage(`{"x":"<&>"}`),
		tools:      []json.RawMessage{json.RawMessage(`{"tools":[]}`), json.RawMessage(` {"tools" : [1]}`)},
		resources:  []json.RawMessage{json.RawMessage(`{}`)},
		templates:  []json.RawMessage{json.RawMessage(`{}`)},
	}
	want := `{"initialize":{"x":"<&>"},"tools":{"pages":[{"tools":[]}, {"tools" : [1]}]},"resources":{"pages":[{}]},"resourceTemplates":{"pages":[{}]}}` + "\n"
	if got := string(c.encode()); got != want {
		t.Errorf("encode =\n%s\nwant\n%s", got, want)
	}
}

// FuzzParseMessage checks that parseMessage never panics and that a result
// it accepts is valid JSON found verbatim in the line.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`,
		`{"jsonrpc":"2.0","id":"a","method":"ping"}`,
		`{"id":null,"error":{"code":-32700,"message":"x"}}`,
		`{"id":1,"result":{"a":"\u003c"} }`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := parseMessage(line)
		if err != nil || m.result == nil {
			return
		}
		if !json.Valid(m.result) {
			t.Errorf("result %q is not valid JSON", m.result)
		}
		if !bytes.Contains(line, m.result) {
			t.Errorf("result %q is not a span of the line %q", m.result, line)
		}
	})
}
