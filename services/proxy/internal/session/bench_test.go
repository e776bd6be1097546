package session

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
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
		r.roundTrip(ctx, req, resp)
	}
}

// roundTrip passes a call and its answer through the rig's session,
// forgetting what it sent and observed.
func (r *rig) roundTrip(ctx context.Context, req, resp []byte) {
	r.toClient, r.toServer = r.toClient[:0], r.toServer[:0]
	if err := r.io.fromClient(ctx, req); err != nil {
		r.t.Fatal(err)
	}
	if err := r.io.fromServer(ctx, resp); err != nil {
		r.t.Fatal(err)
	}
	r.obs.calls = r.obs.calls[:0]
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

// BenchmarkCallRoundTripPolicy is BenchmarkCallRoundTrip without a policy
// and with 1,000 rules over 100 servers none of which matches the call,
// the two sessions' round trips interleaved in one loop; it reports each
// one's ns/call and policy-ratio (with over without).
func BenchmarkCallRoundTripPolicy(b *testing.B) {
	set, err := sessiontest.NonMatchingRules(1000)
	if err != nil {
		b.Fatal(err)
	}
	off, on := newRig(b), newRig(b)
	on.newSession(Config{Server: "fs", Policy: sessiontest.Policy[Code]{Set: set}}, on.gate)
	for _, r := range []*rig{off, on} {
		r.gate.v, r.gate.ok = baseline(readTool, writeTool), true
	}
	ctx := context.Background()
	req := []byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/some/file.txt"}}}`)
	resp := []byte(`{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"hello"}]}}`)
	var spent [2]time.Duration
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i := range 2 {
			k := (n + i) % 2
			r := []*rig{off, on}[k]
			start := time.Now()
			r.roundTrip(ctx, req, resp)
			spent[k] += time.Since(start)
		}
		n++
	}
	if len(on.toServer) != 1 || len(off.toServer) != 1 {
		b.Fatalf("calls not forwarded: %v %v", on.toClient, off.toClient)
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "off-ns/call")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "on-ns/call")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "policy-ratio")
}

// BenchmarkListPage is the session's work for one tools/list page of a
// real server (chrome-devtools 1.11.0: 32 tools, 30 KB), of which one tool
// is not approved and is spliced out, against its floor measured in the
// same run: one parse of the message and one hashing of its items
// (jsonrpc.SplitIn and surface.Builder.AddPageIn), which no proxy that
// judges the page can do without. floor-x is the ratio.
func BenchmarkListPage(b *testing.B) {
	capture, err := os.ReadFile("../../../internal/surface/testdata/real/chrome-devtools/1.11.0.json")
	if err != nil {
		b.Fatal(err)
	}
	var c struct {
		Tools struct{ Pages []json.RawMessage }
	}
	if err := json.Unmarshal(capture, &c); err != nil || len(c.Tools.Pages) != 1 {
		b.Fatalf("reading the capture: %v", err)
	}
	page := c.Tools.Pages[0]
	sf, err := surface.Parse(append(append([]byte(`{"tools":{"pages":[`), page...), "]}}"...), surface.Options{})
	if err != nil {
		b.Fatal(err)
	}
	v := View{Status: "verified", Serve: true, BaselineHash: sf.Hash.String(), Items: map[ItemKey]surface.Digest{}}
	for _, it := range sf.Items[1:] { // the first tool is not approved
		v.Items[ItemKey{it.Kind, it.Name}] = it.Hash
	}
	resp := append(append([]byte(`{"jsonrpc":"2.0","id":7,"result":`), page...), '}')
	var floorNs float64
	b.Run("floor", func(b *testing.B) {
		d := new(canonjson.Doc)
		d.SetLazy(surface.LazyValues)
		bld := surface.NewBuilder(surface.Options{})
		b.ReportAllocs()
		for b.Loop() {
			msgs, _, err := jsonrpc.SplitIn(d, resp, jsonrpc.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			dd, n, _ := msgs[0].Parsed()
			bld.Reset()
			if _, err := bld.AddPageIn(surface.KindTool, dd, n); err != nil {
				b.Fatal(err)
			}
		}
		floorNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("session", func(b *testing.B) {
		r := newRig(b)
		r.gate.v, r.gate.ok = v, true
		ctx := context.Background()
		req := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
		b.ReportAllocs()
		for b.Loop() {
			r.toClient, r.toServer = r.toClient[:0], r.toServer[:0]
			if err := r.io.fromClient(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := r.io.fromServer(ctx, resp); err != nil {
				b.Fatal(err)
			}
		}
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if got := names(b, r.lastClient()); slices.Contains(got, sf.Items[0].Name) || len(got) != len(sf.Items)-1 {
			b.Fatalf("served %q", got)
		}
		if floorNs > 0 {
			b.ReportMetric(ns/floorNs, "floor-x")
		}
	})
}
