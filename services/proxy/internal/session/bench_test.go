package session

import (
	"context"
	"testing"
)

// BenchmarkCallRoundTrip is the session's own work for one tools/call and
// its response, with a verified server (no transport).
func BenchmarkCallRoundTrip(b *testing.B) {
	r := newRig(b)
	r.gate.v, r.gate.ok = baseline(readTool, writeTool), true
	ctx := context.Background()
	req := []byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}}`)
	resp := []byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	b.ReportAllocs()
	for b.Loop() {
		r.toClient, r.toServer = r.toClient[:0], r.toServer[:0]
		if err := r.s.FromClient(ctx, req); err != nil {
			b.Fatal(err)
		}
		if err := r.s.FromServer(ctx, resp); err != nil {
			b.Fatal(err)
		}
		r.obs.calls = r.obs.calls[:0]
	}
}
