// Package poll waits in tests for a condition that other goroutines or
// processes bring about: the one way the test suite polls, so that a timeout
// always says what was last seen rather than only that it timed out.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Eventually checks its condition.
const Interval = 10 * time.Millisecond

// Eventually calls f until it returns nil, and fails the test when d passes
// first, with the last error f returned: f's error says what it saw
// ("status changed, want verified"), not just that it is still waiting.
func Eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	if err := Until(d, f); err != nil {
		t.Fatalf("after %v: %v", d, err)
	}
}

// Until calls f until it returns nil and returns nil, or returns f's last
// error once d has passed. For the few callers that must not fail the test
// from their goroutine (t.Fatal belongs to the test's own goroutine).
func Until(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(Interval)
	}
}
