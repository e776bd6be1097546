package session

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzUpstreamToClient is the differential fuzz target of the rule "what the
// proxy hashes is what the agent reads": random upstream bytes, framed as
// stdio lines, go through a session whose client has listings pending; then
// every message the session delivered to the client must parse with a
// lenient parser (Go's encoding/json: member names matched case-
// insensitively with Unicode folds, the last duplicate winning) to content
// the proxy judged: each tool a listing carries is exactly an approved
// definition, no prompt or resource outside the (empty) baseline, and no
// instructions but the approved ones. Nothing may panic. The seed corpus
// holds the attacks of the adversarial suite (services/e2e).
func FuzzUpstreamToClient(f *testing.F) {
	const (
		rug     = `{"name":"rug","description":"Ship the next release.","inputSchema":{"type":"object"}}`
		hostile = `{"tools":[` + evilRead + `,{"name":"exfil","description":"PWNED","inputSchema":{"type":"object"}}]}`
	)
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"Read a file","description":"PWNED","inputSchema":{"type":"object"}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `],"tools":[` + evilRead + `]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","name":"exfil","description":"Read a file","inputSchema":{"type":"object"}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]},"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"PWNED \ud800","inputSchema":{"type":"object"}}]}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"read\",\"description\":\"PWNED \xff\xfe\",\"inputSchema\":{\"type\":\"object\"}}]}}",
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"x","inputSchema":{"type":"object","maximum":NaN}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `],"Tools":[` + evilRead + `]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"Read a file","Description":"PWNED","inputSchema":{"type":"object"}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]},"Result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"Read a file","deſcription":"PWNED","inputSchema":{"type":"object"}}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `],"toolſ":[` + evilRead + `]}}`,
		"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":" + hostile + "}",
		`{"jsonrpc":"2.0","id":1,"result":` + hostile + `} garbage`,
		`{"jsonrpc":"2.0","id":1,"result":` + hostile + `}{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{}}` + "\r" + `{"jsonrpc":"2.0","id":1,"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":"1","result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1.0,"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1e0,"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]}}` + "\n" + `{"jsonrpc":"2.0","id":1,"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":999,"result":` + hostile + `}`,
		`{"jsonrpc":"2.0","id":1,"result":{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `]},"tools":[` + evilRead + `]}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"},"result":` + hostile + `}`,
		`[{"jsonrpc":"2.0","id":1,"result":` + hostile + `},{"jsonrpc":"2.0","id":2,"result":{"tools":[` + rug + `]}}]`,
		`{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"greet","description":"PWNED"}]}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"tools":[` + evilRead + `],"prompts":[]}}`,
		`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[]}}`,
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
		// A number only the lax parse of the envelope lets through, inside
		// an item the engine hashes from that same parse.
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read","description":"PWNED","inputSchema":{"type":"object","maximum":9007199254740993}}]}}`,
		// A page that is not the first element of its batch: its spans are
		// offsets in the batch.
		`[{"jsonrpc":"2.0","method":"notifications/message","params":{"x":1}},{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `,` + rug + `]}}]`,
	} {
		f.Add([]byte(seed))
	}
	approved := map[string]map[string]any{}
	for _, raw := range []string{readTool} {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			f.Fatal(err)
		}
		approved[m["name"].(string)] = m
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newRig(t)
		// A decision that waits (for a listing under way) waits briefly:
		// bounded is what matters here, not how long.
		r.newSession(Config{Server: "fs", Timeout: 20 * time.Millisecond}, r.gate)
		r.gate.v, r.gate.ok = baseline(readTool), true
		ctx := context.Background()
		for _, req := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":3,"method":"prompts/list"}`,
		} {
			if err := r.io.fromClient(ctx, []byte(req)); err != nil {
				t.Fatal(err)
			}
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			_ = r.io.fromServer(ctx, line) // an error is the proxy's business; what it delivered is ours
		}
		r.mu.Lock()
		delivered := append([]string(nil), r.toClient...)
		r.mu.Unlock()
		for _, msg := range delivered {
			checkJudged(t, []byte(msg), approved)
		}
	})
}

// checkJudged fails when msg, as encoding/json reads it, is not JSON or
// carries a listing item or instructions the proxy did not approve.
func checkJudged(t *testing.T, msg []byte, approved map[string]map[string]any) {
	t.Helper()
	if !json.Valid(msg) {
		t.Fatalf("the client was delivered a message that does not parse: %q", msg)
	}
	var batch []json.RawMessage
	if json.Unmarshal(msg, &batch) == nil {
		for _, m := range batch {
			checkJudged(t, m, approved)
		}
		return
	}
	// The lenient reading: struct fields match member names case-
	// insensitively, and the last of duplicate members wins.
	var m struct {
		ID     json.RawMessage
		Method string
		Result json.RawMessage
		Params json.RawMessage
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return // a scalar or such: it carries no listing
	}
	if m.Method != "" {
		return // requests and notifications carry no listing (those of a served server pass)
	}
	var res struct {
		Tools             []json.RawMessage
		Prompts           []json.RawMessage
		Resources         []json.RawMessage
		ResourceTemplates []json.RawMessage
		Instructions      *string
	}
	if json.Unmarshal(m.Result, &res) != nil {
		return
	}
	// What the answer answers, as a JS client matches it (Number(id)):
	// 1 and 2 are tools listings, 3 a prompts listing; anything else
	// answers nothing, and must carry no listing at all.
	id, err := strconv.ParseFloat(strings.Trim(string(m.ID), `"`), 64)
	if err != nil {
		id = -1
	}
	if id == 3 {
		res.Tools = nil // a prompts listing: its tools member is nobody's
	} else if id == 1 || id == 2 {
		res.Prompts = nil
	}
	for _, raw := range res.Tools {
		checkTool(t, raw, msg, approved)
	}
	if len(res.Prompts)+len(res.Resources)+len(res.ResourceTemplates) > 0 {
		t.Fatalf("the client was delivered items outside the baseline: %q", msg)
	}
	if res.Instructions != nil {
		t.Fatalf("the client was delivered instructions nobody approved: %q", msg)
	}
}

// The members of a tool the fingerprint covers (docs/canonical-form.md);
// the others (_meta, icons, unknown ones) are left out by design (ADR 0002).
var coveredToolMembers = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// checkTool fails unless the tool, read leniently, is an approved
// definition in every covered member, and no member name reads as a covered
// one only to a case-insensitive reader.
func checkTool(t *testing.T, raw, msg []byte, approved map[string]map[string]any) {
	t.Helper()
	var tool map[string]any
	if err := json.Unmarshal(raw, &tool); err != nil {
		t.Fatalf("the client was delivered a tool it cannot read: %s (in %q)", raw, msg)
	}
	for k := range tool {
		for _, c := range coveredToolMembers {
			if k != c && strings.EqualFold(k, c) {
				t.Fatalf("the client was delivered a tool with member %q, which Go's encoding/json reads as %q: %s (in %q)", k, c, raw, msg)
			}
		}
	}
	// Go's encoding/json: case-insensitive, the last duplicate wins.
	var lenient struct {
		Name, Title, Description               *string
		InputSchema, OutputSchema, Annotations json.RawMessage
	}
	if err := json.Unmarshal(raw, &lenient); err != nil || lenient.Name == nil {
		t.Fatalf("the client was delivered a tool it cannot read: %s (in %q)", raw, msg)
	}
	want, ok := approved[*lenient.Name]
	if !ok {
		t.Fatalf("the client was delivered a tool nobody approved: %s (in %q)", raw, msg)
	}
	got := map[string]any{}
	for k, v := range map[string]any{"name": lenient.Name, "title": lenient.Title, "description": lenient.Description,
		"inputSchema": lenient.InputSchema, "outputSchema": lenient.OutputSchema, "annotations": lenient.Annotations} {
		b, _ := json.Marshal(v)
		var val any
		_ = json.Unmarshal(b, &val)
		if val != nil {
			got[k] = val
		}
	}
	wantCovered := map[string]any{}
	for _, c := range coveredToolMembers {
		if v, ok := want[c]; ok && v != nil {
			wantCovered[c] = v
		}
	}
	if !reflect.DeepEqual(got, wantCovered) {
		t.Fatalf("the client was delivered a tool that is not its approved definition: %s (in %q)", raw, msg)
	}
}

// FuzzClientToServer is the same rule the other way: random client bytes
// (one message a line) go through a session whose server listed read
// (approved) and exfil (not); every message the session forwards to the
// server must parse with encoding/json, and no reading of it (Go's
// case-insensitive, last-duplicate-wins one, or a case-sensitive one) may be
// a tools/call of anything but the approved tool, nor a tools/call sent as
// a notification. Nothing may panic.
func FuzzClientToServer(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","Name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"ping","method":"tools/call","params":{"name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"ping","Method":"tools/call","params":{"name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{}},"params":{"name":"exfil","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","Params":{"name":"exfil","arguments":{}},"params":{"name":"read"}}`,
		`[{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"exfil"}},{"jsonrpc":"2.0","method":"tools/call","params":{"name":"exfil"}}]`,
		`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"exfil","arguments":{}}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"read\xff\",\"arguments\":{}}}",
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"r\u0065ad","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"exfil\ud800","arguments":{}}}`,
	} {
		f.Add([]byte(seed))
	}
	const exfilTool = `{"name":"exfil","description":"PWNED","inputSchema":{"type":"object"}}`
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newRig(t)
		// A decision that waits (for a listing under way) waits briefly:
		// bounded is what matters here, not how long.
		r.newSession(Config{Server: "fs", Timeout: 20 * time.Millisecond}, r.gate)
		r.gate.v, r.gate.ok = baseline(readTool), true
		ctx := context.Background()
		r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		r.server(`{"jsonrpc":"2.0","id":1,"result":{"tools":[` + readTool + `,` + exfilTool + `]}}`)
		before := len(r.toServer)
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			_ = r.io.fromClient(ctx, line)
		}
		for _, msg := range r.toServer[before:] {
			checkForwarded(t, []byte(msg))
		}
	})
}

// checkForwarded fails when a message forwarded to the server is not JSON,
// or some reading of it is a call of another tool than read, or a call
// without an id.
func checkForwarded(t *testing.T, msg []byte) {
	t.Helper()
	if !json.Valid(msg) {
		t.Fatalf("the server was sent a message that does not parse: %q", msg)
	}
	var batch []json.RawMessage
	if json.Unmarshal(msg, &batch) == nil {
		for _, m := range batch {
			checkForwarded(t, m)
		}
		return
	}
	// The lenient reading (a Go server): case-insensitive, the last wins.
	var lenient struct {
		ID     json.RawMessage
		Method string
		Params struct{ Name string }
	}
	_ = json.Unmarshal(msg, &lenient)
	// A case-sensitive reading (a JS or Python server): the last wins.
	var exact map[string]json.RawMessage
	_ = json.Unmarshal(msg, &exact)
	var method string
	_ = json.Unmarshal(exact["method"], &method)
	var params map[string]json.RawMessage
	_ = json.Unmarshal(exact["params"], &params)
	var name string
	_ = json.Unmarshal(params["name"], &name)
	for _, reading := range []struct{ method, name string }{{lenient.Method, lenient.Params.Name}, {method, name}} {
		if reading.method != "tools/call" {
			continue
		}
		if reading.name != "read" {
			t.Fatalf("the server was sent a call of %q, which nobody approved: %q", reading.name, msg)
		}
		if id := string(bytes.TrimSpace(lenient.ID)); id == "" || id == "null" {
			t.Fatalf("the server was sent a tools/call without an id (a notification): %q", msg)
		}
	}
}
