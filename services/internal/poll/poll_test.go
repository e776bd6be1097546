package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := Until(time.Minute, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestUntilReturnsTheLastErrorSeen(t *testing.T) {
	calls := 0
	err := Until(3*Interval, func() error {
		calls++
		return fmt.Errorf("seen %d", calls)
	})
	if err == nil || !strings.HasPrefix(err.Error(), "seen ") || err.Error() != fmt.Sprintf("seen %d", calls) {
		t.Fatalf("Until = %v after %d calls, want the last call's error", err, calls)
	}
}

func TestEventuallyFailsWithWhatItLastSaw(t *testing.T) {
	ft := &fakeT{}
	Eventually(ft, Interval, func() error { return errors.New("status changed, want verified") })
	if !strings.Contains(ft.msg, "status changed, want verified") {
		t.Fatalf("Eventually failed with %q, want the last error", ft.msg)
	}
}

// fakeT records Fatalf; the rest of testing.TB is the embedded nil T's and
// is not called.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }
