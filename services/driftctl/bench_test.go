package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/surface/realworld"
)

// BenchmarkFingerprintProcess times the whole process of `driftctl
// fingerprint FILE` (start, read, parse, canonicalize, hash, print, exit)
// against processes that canonicalize the same file with a general RFC 8785
// implementation and hash it (testdata/canonbaseline: jsontext, and
// gowebpki/jcs), in the same run, on manifests of real servers' tools as
// they send them (package realworld) of 66 KB and 7.6 MiB. Report ratios
// with `make bench`.
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
		for _, impl := range []struct {
			name string
			argv []string
		}{
			{"driftctl", []string{driftctl, "fingerprint", file}},
			{"jsontext", []string{baseline, "jsontext", file}},
			{"jcs", []string{baseline, "jcs", file}},
		} {
			b.Run("size="+size.name+"/impl="+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					if out, err := exec.Command(impl.argv[0], impl.argv[1:]...).CombinedOutput(); err != nil {
						b.Fatalf("%v: %v\n%.500s", impl.argv, err, out)
					}
				}
			})
		}
	}
}
