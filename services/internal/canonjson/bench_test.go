package canonjson

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
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

// numbersDoc is an array of numbers in every notation, canonical and not,
// all accepted: what a schema with many bounds, defaults and examples holds.
func numbersDoc() []byte {
	lits := []string{"0", "42", "-17", "0.1", "3.14159", "2.5", "-0.0", "1.0", "1.50", "10e-1", "1E3", "1e-7", "1.5e300",
		"6.02214076e23", "0.30000000000000004", "9007199254740992", "100000000000000000000", "-1.25e-5", "1.7976931348623157e308", "123456.789"}
	b := []byte{'['}
	for i := range 2000 {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, lits[i%len(lits)]...)
	}
	return append(b, ']')
}

func BenchmarkParseNumbers(b *testing.B) {
	src := numbersDoc()
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

// BenchmarkHostileNumbers: a page of subnormal numbers, which a proxy reads
// laxly (a message it passes on) and strictly (a listing it hashes). The
// floor is the same page of an ordinary fraction; the ratio is reported as
// x-floor (before subnormals were told from their digits: 185 lax, 438
// strict; after: about 1 lax, and strict refuses at the first of them).
func BenchmarkHostileNumbers(b *testing.B) {
	doc := func(lit string) []byte {
		return []byte(`[` + strings.Repeat(lit+`,`, 1<<16) + `0]`)
	}
	floor, hostile := doc(`0.5`), doc(`5e-324`)
	var d Doc
	run := func(src []byte, lim Limits) time.Duration {
		start := time.Now()
		_ = d.Parse(src, lim)
		return time.Since(start)
	}
	for _, lax := range []bool{true, false} {
		b.Run(fmt.Sprintf("lax=%v", lax), func(b *testing.B) {
			lim := Limits{LaxNumbers: lax}
			var f, h time.Duration
			for b.Loop() {
				f += run(floor, lim)
				h += run(hostile, lim)
			}
			b.ReportMetric(float64(h)/float64(f), "x-floor")
		})
	}
}
