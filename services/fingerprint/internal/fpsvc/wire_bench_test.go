package fpsvc

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// BenchmarkWire measures, in the same run and on the same messages, the
// hand-written protobuf framing of the fingerprint handler (wire.go's
// unmarshalObservation, which aliases the capture, and the Fingerprint
// encoded as identity fields plus result bytes kept in the memo) against
// proto.Unmarshal and proto.Marshal of the same messages:
//
//   - step=decode: the observation alone;
//   - step=handler: what the handler does per message before publishing,
//     decode, the memo's byte comparison (a hit: a fleet re-listing an
//     unchanged server, the common case) and the Fingerprint's encoding.
//
// Batches of each path alternate, so that a noisy machine burdens both
// alike; std/hand above 1 means the hand-written path is faster. The
// capture is the real 4 KiB memory-server listing or the same tools
// repeated to about 1 MiB.
func BenchmarkWire(b *testing.B) {
	small := readFixture(b)
	for _, c := range []struct {
		name    string
		capture []byte
	}{
		{"capture=4KiB", small},
		{"capture=1MiB", bigCapture(b, small, 1<<20)},
	} {
		data, err := proto.Marshal(observation("obs-1", c.capture))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/step=decode", func(b *testing.B) {
			hand := func() {
				var obs mcpdriftv1.ListObservation
				if err := unmarshalObservation(data, &obs); err != nil {
					b.Fatal(err)
				}
			}
			std := func() {
				var obs mcpdriftv1.ListObservation
				if err := proto.Unmarshal(data, &obs); err != nil {
					b.Fatal(err)
				}
			}
			alternate(b, hand, std)
		})
		b.Run(c.name+"/step=handler", func(b *testing.B) {
			s := &Service{memo: newMemo(64 << 20)}
			first := new(mcpdriftv1.ListObservation)
			if err := unmarshalObservation(data, first); err != nil {
				b.Fatal(err)
			}
			if _, _, err := s.fingerprint(first); err != nil { // fills the memo
				b.Fatal(err)
			}
			// The standard path's memo keeps the decoded result instead of
			// its encoding.
			var result mcpdriftv1.Fingerprint
			if e, ok := s.memo.get(first, status.DefaultHashing); !ok {
				b.Fatal("memo miss")
			} else if err := proto.Unmarshal(e.result, &result); err != nil {
				b.Fatal(err)
			}
			hand := func() {
				obs := new(mcpdriftv1.ListObservation)
				if err := unmarshalObservation(data, obs); err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.fingerprint(obs); err != nil {
					b.Fatal(err)
				}
			}
			std := func() {
				obs := new(mcpdriftv1.ListObservation)
				if err := proto.Unmarshal(data, obs); err != nil {
					b.Fatal(err)
				}
				if _, ok := s.memo.get(obs, status.DefaultHashing); !ok {
					b.Fatal("memo miss")
				}
				if _, err := proto.Marshal(&mcpdriftv1.Fingerprint{
					EventId: "fp-" + obs.EventId, ObservationId: obs.EventId, Tenant: obs.Tenant, Server: obs.Server,
					Proxy: obs.Proxy, Variant: obs.Variant, ObservedAtUnixMs: obs.ObservedAtUnixMs,
					SurfaceHash: result.SurfaceHash, Items: result.Items, ErrorCode: result.ErrorCode, ErrorMessage: result.ErrorMessage,
				}); err != nil {
					b.Fatal(err)
				}
			}
			alternate(b, hand, std)
		})
	}
}

// alternate runs hand and std b.N times each, in alternating batches, and
// reports each one's time per operation and their ratio.
func alternate(b *testing.B, hand, std func()) {
	const batch = 64
	var ht, st time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		start := time.Now()
		for range n {
			hand()
		}
		mid := time.Now()
		for range n {
			std()
		}
		ht += mid.Sub(start)
		st += time.Since(mid)
	}
	b.StopTimer()
	b.ReportMetric(float64(ht.Nanoseconds())/float64(b.N), "hand-ns/op")
	b.ReportMetric(float64(st.Nanoseconds())/float64(b.N), "std-ns/op")
	b.ReportMetric(float64(st)/float64(ht), "std/hand")
}

// bigCapture repeats capture's tools, renamed, until the capture holds
// about size bytes.
func bigCapture(b *testing.B, capture []byte, size int) []byte {
	var c struct {
		Initialize json.RawMessage `json:"initialize"`
		Tools      struct {
			Pages []struct {
				Tools []map[string]any `json:"tools"`
			} `json:"pages"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(capture, &c); err != nil {
		b.Fatal(err)
	}
	tools := c.Tools.Pages[0].Tools
	var out []map[string]any
	for i := range size/len(capture) + 1 {
		for _, t := range tools {
			u := make(map[string]any, len(t))
			for k, v := range t {
				u[k] = v
			}
			u["name"] = fmt.Sprintf("%s_%d", t["name"], i)
			out = append(out, u)
		}
	}
	c.Tools.Pages[0].Tools = out
	data, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
