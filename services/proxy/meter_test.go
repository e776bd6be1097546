package main

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

type countingMeter struct{ dropped map[string]int }

func (c *countingMeter) Withheld(surface.Kind, int) {}
func (c *countingMeter) Dropped(code string)        { c.dropped[code]++ }

// TestLoggedMeterCountsEveryDropAndLogsFew: every drop is counted; the log
// gets one line per code per window, so a hostile upstream cannot flood it.
func TestLoggedMeterCountsEveryDropAndLogsFew(t *testing.T) {
	var logs syncbuf.Buffer
	next := &countingMeter{dropped: map[string]int{}}
	m := newLoggedMeter(next, zerolog.New(&logs))
	for range 100 {
		m.Dropped(session.DropUnreadable)
	}
	m.Dropped(session.DropUnmatched)
	if next.dropped[session.DropUnreadable] != 100 || next.dropped[session.DropUnmatched] != 1 {
		t.Fatalf("counted %v", next.dropped)
	}
	if n := strings.Count(logs.String(), "upstream message dropped"); n != 2 {
		t.Fatalf("%d log lines, want one per code:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"code":"upstream_unreadable"`) || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}
