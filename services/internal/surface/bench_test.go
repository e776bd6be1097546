package surface

import (
	"crypto/sha256"
	"os"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"

	"github.com/mcpdrift/mcpdrift/services/internal/surface/realworld"
)

func loadBenign(b *testing.B) []byte {
	b.Helper()
	src, err := os.ReadFile("testdata/xxh64-collision/benign.json")
	if err != nil {
		b.Fatal(err)
	}
	return src
}

// BenchmarkFingerprint compares our canonicalize-and-hash of the 66 KB,
// 50-tool manifest with two general RFC 8785 implementations plus SHA-256,
// in the same run. Report ratios with `make bench` (benchstat-free: see
// scripts/bench.sh).
func BenchmarkFingerprint(b *testing.B) {
	src := loadBenign(b)
	b.Run("impl=surface", func(b *testing.B) {
		bd := NewBuilder(Options{})
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			bd.Reset()
			if _, err := bd.AddPage(KindTool, src); err != nil {
				b.Fatal(err)
			}
			if _, err := bd.Surface(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=jsontext", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		buf := make([]byte, len(src))
		for b.Loop() {
			v := jsontext.Value(append(buf[:0], src...))
			if err := v.Canonicalize(); err != nil {
				b.Fatal(err)
			}
			_ = sha256.Sum256(v)
		}
	})
	b.Run("impl=jcs", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			out, err := jcs.Transform(src)
			if err != nil {
				b.Fatal(err)
			}
			_ = sha256.Sum256(out)
		}
	})
}

// BenchmarkFingerprintDepth shows that allocations do not grow with schema
// depth: the same tool with its schema nested 4, 16 and 64 levels.
func BenchmarkFingerprintDepth(b *testing.B) {
	for _, depth := range []int{4, 16, 60} {
		src := []byte(nestedToolList(depth))
		b.Run("depth="+itoa(depth), func(b *testing.B) {
			bd := NewBuilder(Options{})
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				bd.Reset()
				if _, err := bd.AddPage(KindTool, src); err != nil {
					b.Fatal(err)
				}
				if _, err := bd.Surface(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func nestedToolList(depth int) string {
	schema := `{"type":"string","description":"leaf"}`
	for range depth {
		schema = `{"type":"object","required":["z","a"],"properties":{"a":` + schema + `,"z":{"type":["null","string"]}}}`
	}
	return `{"tools":[{"name":"deep","description":"d","inputSchema":` + schema + `}]}`
}

// BenchmarkFingerprintReal is BenchmarkFingerprint on input as real servers
// send it: a tools/list result of the captured servers' tools with their own
// member order (package realworld), which the "already canonical" fast path
// does not cover, at 66 KB and at 7.6 MiB. Each iteration runs the three
// implementations one after the other, so that they share the machine's
// load even on a busy machine; it reports each one's ns/op and our speed-up
// over each of the other two (x-jsontext, x-jcs). `make bench` prints them.
func BenchmarkFingerprintReal(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"66KB", 66 << 10}, {"7.6MiB", 76 << 20 / 10}} {
		src, err := realworld.Manifest("testdata/real", size.bytes)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("size="+size.name, func(b *testing.B) {
			bd := NewBuilder(Options{})
			buf := make([]byte, len(src))
			impls := []func(){
				func() {
					bd.Reset()
					if _, err := bd.AddPage(KindTool, src); err != nil {
						b.Fatal(err)
					}
					if _, err := bd.Surface(); err != nil {
						b.Fatal(err)
					}
				},
				func() {
					v := jsontext.Value(append(buf[:0], src...))
					if err := v.Canonicalize(); err != nil {
						b.Fatal(err)
					}
					_ = sha256.Sum256(v)
				},
				func() {
					out, err := jcs.Transform(src)
					if err != nil {
						b.Fatal(err)
					}
					_ = sha256.Sum256(out)
				},
			}
			var took [3]time.Duration
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				for i, f := range impls {
					start := time.Now()
					f()
					took[i] += time.Since(start)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(took[0].Nanoseconds())/n, "surface-ns/op")
			b.ReportMetric(float64(took[1].Nanoseconds())/n, "jsontext-ns/op")
			b.ReportMetric(float64(took[2].Nanoseconds())/n, "jcs-ns/op")
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "x-jsontext")
			b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "x-jcs")
		})
	}
}

// BenchmarkFingerprintAlg fingerprints the 66 KB real-world manifest with
// SHA-256 and with SHA-512, interleaved as BenchmarkFingerprintReal does,
// and reports the SHA-512 run's cost as a ratio (x-sha512, time over
// SHA-256's).
func BenchmarkFingerprintAlg(b *testing.B) {
	src, err := realworld.Manifest("testdata/real", 66<<10)
	if err != nil {
		b.Fatal(err)
	}
	bds := []*Builder{NewBuilder(Options{}), NewBuilder(Options{Hash: SHA512})}
	var took [2]time.Duration
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		for i, bd := range bds {
			start := time.Now()
			bd.Reset()
			if _, err := bd.AddPage(KindTool, src); err != nil {
				b.Fatal(err)
			}
			if _, err := bd.Surface(); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Nanoseconds())/n, "sha256-ns/op")
	b.ReportMetric(float64(took[1].Nanoseconds())/n, "sha512-ns/op")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "x-sha512")
}
