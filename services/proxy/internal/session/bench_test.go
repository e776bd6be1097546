package session

import (
	"context"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
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
		if err := r.io.fromClient(ctx, req); err != nil {
			b.Fatal(err)
		}
		if err := r.io.fromServer(ctx, resp); err != nil {
			b.Fatal(err)
		}
		r.obs.calls = r.obs.calls[:0]
	}
}

// isToolErrorParsed is how isToolError worked before it looked for the
// member's name first: the baseline of BenchmarkIsToolError.
func isToolErrorParsed(result []byte) bool {
	d := object(result)
	if d == nil {
		return false
	}
	v, ok := d.Get(canonjson.Root, "isError")
	return ok && d.Kind(v) == canonjson.True
}

// BenchmarkIsToolError: classifying a tools/call result (a short one and a
// 64 KiB file's contents), by parsing it whole and by looking for the
// member's name first, in the same run.
func BenchmarkIsToolError(b *testing.B) {
	results := map[string][]byte{
		"short": []byte(`{"content":[{"type":"text","text":"hello"}]}`),
		"64KiB": []byte(`{"content":[{"type":"text","text":"` + strings.Repeat("line of a file; ", 4096) + `"}]}`),
	}
	for _, size := range []string{"short", "64KiB"} {
		for _, f := range []struct {
			name string
			fn   func([]byte) bool
		}{{"parse", isToolErrorParsed}, {"scan", isToolError}} {
			b.Run("result="+size+"/path="+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(results[size])))
				for b.Loop() {
					if f.fn(results[size]) {
						b.Fatal("a result without isError")
					}
				}
			})
		}
	}
}
