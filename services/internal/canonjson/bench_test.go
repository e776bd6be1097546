package canonjson

import (
	"crypto/sha256"
	"os"
	"testing"
)

func BenchmarkParseAppend(b *testing.B) {
	src, err := os.ReadFile("../surface/testdata/xxh64-collision/benign.json")
	if err != nil {
		b.Fatal(err)
	}
	var d Doc
	buf := make([]byte, 0, len(src))
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Parse(src, DefaultLimits); err != nil {
			b.Fatal(err)
		}
		buf = d.Append(buf[:0], Root)
	}
}

func BenchmarkParseOnly(b *testing.B) {
	src, err := os.ReadFile("../surface/testdata/xxh64-collision/benign.json")
	if err != nil {
		b.Fatal(err)
	}
	var d Doc
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := d.Parse(src, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(d.nodes)), "nodes")
}

func BenchmarkSHA256(b *testing.B) {
	src, _ := os.ReadFile("../surface/testdata/xxh64-collision/benign.json")
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		_ = sha256.Sum256(src)
	}
}

func BenchmarkParseLazy(b *testing.B) {
	src, err := os.ReadFile("../surface/testdata/xxh64-collision/benign.json")
	if err != nil {
		b.Fatal(err)
	}
	var d Doc
	d.SetLazy(Lazy{Keys: []string{"inputSchema", "outputSchema", "annotations"}, Sorted: []string{"required", "type"}})
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := d.Parse(src, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(d.nodes)), "nodes")
}
