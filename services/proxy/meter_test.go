package main

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// TestLoggedMeterCountsEveryDropAndLogsFew: every drop is counted; the log
// gets one line per code per window, so a hostile upstream cannot flood it.
func TestLoggedMeterCountsEveryDropAndLogsFew(t *testing.T) {
	var logs syncbuf.Buffer
	next := &sessiontest.Meter[session.Code]{}
	m := newLoggedMeter(next, zerolog.New(&logs))
	for range 100 {
		m.Dropped(session.DropUnreadable)
	}
	m.Dropped(session.DropUnmatched)
	if next.Drops(session.DropUnreadable) != 100 || next.Drops(session.DropUnmatched) != 1 {
		t.Fatalf("counted %d unreadable, %d unmatched", next.Drops(session.DropUnreadable), next.Drops(session.DropUnmatched))
	}
	if n := strings.Count(logs.String(), "upstream message dropped"); n != 2 {
		t.Fatalf("%d log lines, want one per code:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `"code":"upstream_unreadable"`) || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}
