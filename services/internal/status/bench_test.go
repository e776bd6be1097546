package status_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// BenchmarkBaselineItems is what a proxy pays, once per baseline, to learn
// the baseline's item hashes: parsing the baseline manifest with the engine
// (what it did, besides fetching the object), against checking the item
// hashes the record carries against the baseline hash (what it does), in
// the same run, for the largest real capture.
func BenchmarkBaselineItems(b *testing.B) {
	path := filepath.Join("..", "surface", "testdata", "real", "everything", "2025.11.25.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{})
	if err != nil {
		b.Fatal(err)
	}
	its := status.ItemsOf(sf)
	b.Run("parse_manifest", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := surface.Parse(raw, surface.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify_record_items", func(b *testing.B) {
		for b.Loop() {
			if _, err := its.Verify(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
