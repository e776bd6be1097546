package session

import (
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// baselineWith approves the given tools hashed with opt, as a record with
// those settings carries them.
func baselineWith(opt surface.Options, tools ...string) View {
	return verifiedView(`{"tools":[`+strings.Join(tools, ",")+`]}`, opt)
}

// TestHashingFromTheRecord: a server whose record says sha512 (and
// annotations left out) is served and its calls forwarded: the session
// hashes live items as the baseline was; a changed tool is still withheld.
// When the record's settings change (a rebaseline), the session hashes
// again what it holds.
func TestHashingFromTheRecord(t *testing.T) {
	annotated := `{"name":"read","description":"Read a file","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`
	opt := surface.Options{Hash: surface.SHA512, ExcludeAnnotations: true}
	r := newRig(t)
	r.gate.v, r.gate.ok = baselineWith(opt, readTool, writeTool), true
	r.client(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	// The annotations are not covered: a server adding them is the same surface.
	resp := `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + annotated + `,` + writeTool + `]}}`
	r.server(resp)
	if r.lastClient() != resp {
		t.Fatalf("a verified sha512 listing was rewritten:\n%s", r.lastClient())
	}
	r.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{}}}`)
	if len(r.toServer) != 2 {
		t.Fatalf("a call to a verified sha512 server was not forwarded: %s", r.lastClient())
	}
	r.server(`{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)

	// A rebaseline to sha256 with annotations covered (the baseline now
	// holds them): what the session holds is hashed again and still
	// matches; a baseline without them would be drift.
	r.gate.v = baselineWith(surface.Options{}, annotated, writeTool)
	r.client(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{}}}`)
	if len(r.toServer) != 3 {
		t.Fatalf("a call was refused after the settings changed: %s", r.lastClient())
	}
	r.server(`{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`)
	r.gate.v = baselineWith(surface.Options{}, readTool, writeTool)
	r.client(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read","arguments":{}}}`)
	if out := r.lastClient(); !strings.Contains(out, `"isError":true`) || len(r.toServer) != 3 {
		t.Fatalf("a tool whose annotations the settings cover and the baseline lacks was forwarded: %s", out)
	}

	// A changed tool under sha512 is withheld.
	r2 := newRig(t)
	r2.gate.v, r2.gate.ok = baselineWith(surface.Options{Hash: surface.SHA512}, readTool, writeTool), true
	r2.client(`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`)
	r2.server(`{"jsonrpc":"2.0","id":"a","result":{"tools":[` + evilRead + `,` + writeTool + `]}}`)
	if got := names(t, r2.lastClient()); strings.Join(got, ",") != "write" {
		t.Fatalf("served %v of a drifted sha512 server, want only write", got)
	}
}
