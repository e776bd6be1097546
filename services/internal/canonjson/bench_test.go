package canonjson

import (
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
