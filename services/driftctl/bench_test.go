package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/surface/realworld"
)

// BenchmarkFingerprintProcess times the whole process of `driftctl
// fingerprint FILE` (start, read, parse, canonicalize, hash, print, exit)
// against processes that canonicalize the same file with a general RFC 8785
// implementation and hash it (testdata/canonbaseline: jsontext, and
// gowebpki/jcs), in the same run, on manifests of real servers' tools as
// they send them (package realworld) of 66 KB and 7.6 MiB. Each iteration
// runs the three processes one after the other, so that they share the
// machine's load; it reports each one's ns/op and the speed-ups x-jsontext
// and x-jcs. `make bench` prints them.
func BenchmarkFingerprintProcess(b *testing.B) {
	driftctl := filepath.Join(cmdtest.Dir(b, "driftctl"), "driftctl")
	dir := b.TempDir()
	baseline := filepath.Join(dir, "canonbaseline")
	if out, err := exec.Command("go", "build", "-o", baseline, "./testdata/canonbaseline").CombinedOutput(); err != nil {
		b.Fatalf("building the baseline: %v\n%s", err, out)
	}
	for _, size := range []struct {
		name  string
		bytes int
	}{{"66KB", 66 << 10}, {"7.6MiB", 76 << 20 / 10}} {
		src, err := realworld.Manifest("../"+realworld.Fixtures, size.bytes)
		if err != nil {
			b.Fatal(err)
		}
		file := filepath.Join(dir, size.name+".json")
		if err := os.WriteFile(file, src, 0o600); err != nil {
			b.Fatal(err)
		}
		argvs := [][]string{
			{driftctl, "fingerprint", file},
			{baseline, "jsontext", file},
			{baseline, "jcs", file},
		}
		b.Run("size="+size.name, func(b *testing.B) {
			var took [3]time.Duration
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				for i, argv := range argvs {
					start := time.Now()
					if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
						b.Fatalf("%v: %v\n%.500s", argv, err, out)
					}
					took[i] += time.Since(start)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(took[0].Nanoseconds())/n, "driftctl-ns/op")
			b.ReportMetric(float64(took[1].Nanoseconds())/n, "jsontext-ns/op")
			b.ReportMetric(float64(took[2].Nanoseconds())/n, "jcs-ns/op")
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "x-jsontext")
			b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "x-jcs")
		})
	}
}
