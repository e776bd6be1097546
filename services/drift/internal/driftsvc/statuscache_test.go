package driftsvc

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
)

// TestStatusCache checks the order rules of the status cache: a record is
// served only at the newest revision known, the watch may tell of a write
// before its writer keeps the record, a read older than a write the watch
// told of is never kept, and nothing is served while the watch is off.
func TestStatusCache(t *testing.T) {
	rec := func(live string) *state.Record { return &state.Record{LiveHash: live} }
	for _, tc := range []struct {
		name    string
		steps   func(c *statusCache)
		wantRev uint64 // 0: not served
		want    string
	}{
		{"read_kept", func(c *statusCache) { c.put("k", 3, rec("a")) }, 3, "a"},
		{"newer_write_replaces", func(c *statusCache) { c.put("k", 3, rec("a")); c.put("k", 5, rec("b")) }, 5, "b"},
		{"older_read_not_kept", func(c *statusCache) { c.put("k", 5, rec("b")); c.put("k", 3, rec("a")) }, 5, "b"},
		{"watch_drops_older", func(c *statusCache) { c.put("k", 3, rec("a")); c.written("k", 4) }, 0, ""},
		{"watch_of_own_write", func(c *statusCache) { c.put("k", 4, rec("a")); c.written("k", 4) }, 4, "a"},
		{"watch_before_writer", func(c *statusCache) { c.written("k", 4); c.put("k", 4, rec("a")) }, 4, "a"},
		{"read_older_than_watch", func(c *statusCache) { c.written("k", 4); c.put("k", 3, rec("a")) }, 0, ""},
		{"off", func(c *statusCache) { c.put("k", 3, rec("a")); c.setOn(false) }, 0, ""},
		{"evicted_record_keeps_revision", func(c *statusCache) {
			c.put("k", 3, rec("a"))
			c.put("other", 9, rec("x")) // at the bound of 1: k's record goes, its revision stays
			c.put("k", 2, rec("old"))
		}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newStatusCache(1)
			if tc.name != "evicted_record_keeps_revision" {
				c.max = 10
			}
			c.setOn(true)
			tc.steps(c)
			r, rev, ok := c.get("k")
			if tc.wantRev == 0 {
				if ok {
					t.Fatalf("served %+v at %d, want nothing", r, rev)
				}
				return
			}
			if !ok || rev != tc.wantRev || r.LiveHash != tc.want {
				t.Fatalf("got %v %d %v, want %s at %d", r, rev, ok, tc.want, tc.wantRev)
			}
			r.LiveHash = "changed by the caller"
			if r2, _, _ := c.get("k"); r2.LiveHash != tc.want {
				t.Fatal("a caller's change reached the cache")
			}
		})
	}
}
