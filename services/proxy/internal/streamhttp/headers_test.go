package streamhttp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// sqlTool mirrors three arguments into Mcp-Param-* headers (x-mcp-header),
// one of them nested.
const sqlTool = `{
	"type": "object",
	"properties": {
		"region": {"type": "string", "x-mcp-header": "Region"},
		"shard": {"type": "integer", "x-mcp-header": "Shard"},
		"dry": {"type": "boolean", "x-mcp-header": "Dry"},
		"target": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
		"query": {"type": "string"}
	}
}`

// TestParamHeaders: a stateless 2026-07-28 server with a tool whose
// arguments are mirrored into Mcp-Param-* headers, behind the proxy. The Go
// SDK client's calls (which mirror them) pass; a request whose headers
// disagree with its body is refused with 400 and HeaderMismatch, before it
// reaches the server.
func TestParamHeaders(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "sql", Version: "1"}, nil)
	var upstreamCalls atomic.Int64
	s.AddTool(&mcp.Tool{Name: "execute_sql", Description: "Run SQL.", InputSchema: json.RawMessage(sqlTool)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			upstreamCalls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	defer up.Close()
	g := newTofu()
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "db", URL: up.URL, Gate: g, Observer: g,
		Session: session.Config{Timeout: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	via := srv.URL + "/db/mcp"

	// The SDK client mirrors the arguments itself; through the proxy the
	// call is served (the server checks the headers too).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: via}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil { // the SDK learns the annotations
		t.Fatal(err)
	}
	args := map[string]any{"region": "Zürich ", "shard": 7, "dry": true, "target": map[string]any{"zone": "b"}, "query": "SELECT 1"}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_sql", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("the SDK client's call through the proxy: %v %s", err, jsonOf(t, res))
	}

	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	body := func(name, args string) string {
		return `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `,` + meta + `}}`
	}
	full := `{"region":"us-west1","shard":42,"dry":false,"target":{"zone":"a"},"query":"SELECT 1"}`
	std := func(extra map[string]string) map[string]string {
		h := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "execute_sql",
			"Mcp-Param-Region": "us-west1", "Mcp-Param-Shard": "42", "Mcp-Param-Dry": "false", "Mcp-Param-Zone": "a"}
		for k, v := range extra {
			if v == "" {
				delete(h, k)
			} else {
				h[k] = v
			}
		}
		return h
	}
	cases := []struct {
		name    string
		headers map[string]string
		body    string
		ok      bool
	}{
		{"consistent", std(nil), body("execute_sql", full), true},
		{"integer compared by value", std(map[string]string{"Mcp-Param-Shard": "42.0"}), body("execute_sql", full), true},
		{"header names are case-insensitive", std(map[string]string{"Mcp-Param-Region": "", "mcp-param-region": "us-west1"}), body("execute_sql", full), true},
		{"Base64 value", std(map[string]string{"Mcp-Param-Region": "=?base64?WsO8cmljaCA=?="}),
			body("execute_sql", `{"region":"Zürich ","shard":42,"dry":false,"target":{"zone":"a"}}`), true},

		{"an unannotated Mcp-Param passes", std(map[string]string{"Mcp-Param-Other": "x"}), body("execute_sql", full), true},
		{"null argument, no header", std(map[string]string{"Mcp-Param-Zone": ""}),
			body("execute_sql", `{"region":"us-west1","shard":42,"dry":false,"target":{"zone":null}}`), true},

		{"string differs", std(map[string]string{"Mcp-Param-Region": "eu-west1"}), body("execute_sql", full), false},
		{"integer differs", std(map[string]string{"Mcp-Param-Shard": "43"}), body("execute_sql", full), false},
		{"boolean differs", std(map[string]string{"Mcp-Param-Dry": "true"}), body("execute_sql", full), false},
		{"nested differs", std(map[string]string{"Mcp-Param-Zone": "c"}), body("execute_sql", full), false},
		{"header for an absent argument", std(nil), body("execute_sql", `{"region":"us-west1","shard":42,"dry":false}`), false},
		{"missing header", std(map[string]string{"Mcp-Param-Region": ""}), body("execute_sql", full), false},
		{"broken Base64", std(map[string]string{"Mcp-Param-Region": "=?base64?***?="}), body("execute_sql", full), false},
		{"non-ASCII value", std(map[string]string{"Mcp-Param-Region": "Zürich"}), body("execute_sql", `{"region":"Zürich","shard":42,"dry":false,"target":{"zone":"a"}}`), false},
		{"not a primitive in the body", std(nil), body("execute_sql", `{"region":["us-west1"],"shard":42,"dry":false,"target":{"zone":"a"}}`), false},
		{"a tool the proxy has not seen", std(map[string]string{"Mcp-Name": "other"}), body("other", full), false},
		{"Mcp-Name differs once decoded", std(map[string]string{"Mcp-Name": "=?base64?b3RoZXI=?="}), body("execute_sql", full), false},
		{"Mcp-Method missing", std(map[string]string{"Mcp-Method": ""}), body("execute_sql", full), false},
		{"Mcp-Name missing", std(map[string]string{"Mcp-Name": ""}), body("execute_sql", full), false},
		{"version differs from _meta", std(map[string]string{"Mcp-Protocol-Version": "2025-11-25"}), body("execute_sql", full), false},
		{"a batch with Mcp-Method", std(nil), "[" + body("execute_sql", full) + "]", false},
	}
	// A Base64 Mcp-Name passes the proxy (this server then refuses it: it
	// does not decode the name; its refusal reaches the client judged, or
	// as the proxy's upstream_http_error, never as header_mismatch).
	resp, out := post(t, via, std(map[string]string{"Mcp-Name": "=?base64?ZXhlY3V0ZV9zcWw=?="}), body("execute_sql", full))
	if strings.Contains(out, "header_mismatch") || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a Base64 Mcp-Name that matches: HTTP %d %s", resp.StatusCode, out)
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			before := upstreamCalls.Load()
			resp, out := post(t, via, c.headers, c.body)
			if c.ok {
				if resp.StatusCode != http.StatusOK || strings.Contains(out, `"isError":true`) || strings.Contains(out, `"error"`) {
					t.Fatalf("HTTP %d %s, want the call served", resp.StatusCode, out)
				}
				return
			}
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out, `"code":-32020`) || !strings.Contains(out, `"mcpdrift/code":"header_mismatch"`) {
				t.Fatalf("HTTP %d %s, want 400 HeaderMismatch", resp.StatusCode, out)
			}
			if upstreamCalls.Load() != before {
				t.Fatal("a refused request reached the server")
			}
		})
	}
}

// Older clients send no request metadata headers: their requests pass.
func TestNoHeadersFromOlderClients(t *testing.T) {
	r := newRig(t, modes[4]) // stateless, 2025-06-18
	resp, out := post(t, r.via, map[string]string{"Mcp-Protocol-Version": "2025-06-18"},
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(out, `"text":"hi"`) {
		t.Fatalf("HTTP %d %s", resp.StatusCode, out)
	}
}
