package procstat

import (
	"os"
	"testing"
	"time"
)

// TestOwnProcess: the test's own process has spent CPU time, which only
// grows, and is resident in memory.
func TestOwnProcess(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); { // burn CPU for a tick or more
	}
	after, err := CPUTime(os.Getpid())
	if err != nil || after < before || after == 0 {
		t.Errorf("CPU time %v then %v (%v)", before, after, err)
	}
	if rss, err := RSSBytes(os.Getpid()); err != nil || rss <= 0 {
		t.Errorf("RSS %d (%v)", rss, err)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("a process that does not exist has a CPU time")
	}
}
