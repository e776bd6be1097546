package surface

import (
	"crypto/sha256"
	"os"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
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
