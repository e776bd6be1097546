package ordered

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// decision is a Decision whose wait ends when release is closed (nil: made
// at once); with shed it may be shed (a notification decided at once).
type decision struct {
	out      string
	release  chan struct{}
	err      error // of the decision made off the reader
	reported *[]string
	mu       *sync.Mutex
	shed     *int
}

func (d decision) Waits() bool { return d.release != nil }

func (d decision) Wait(ctx context.Context) decision {
	if d.release != nil {
		select {
		case <-d.release:
		case <-ctx.Done():
		}
		d.release = nil
	}
	return d
}

func (d decision) Delivery() ([]byte, error) { return []byte(d.out), d.err }

func (d decision) Shed() bool {
	if d.shed == nil {
		return false
	}
	*d.shed++
	return true
}

func (d decision) Report() {
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.reported = append(*d.reported, d.out)
}

// TestInOrder: a message whose decision waits holds back the ones read
// after it, not the reader; once decided they go out in the order read,
// each reported after it is written, and what its decision failed at is
// returned once to the next Push and by Wait.
func TestInOrder(t *testing.T) {
	var mu sync.Mutex
	var written, reported []string
	q := New[decision](func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, string(b))
		return nil
	})
	ctx := context.Background()
	release := make(chan struct{})
	failed := errors.New("answering the server failed")
	d := func(out string, wait bool, err error) decision {
		dd := decision{out: out, reported: &reported, mu: &mu, err: err}
		if wait {
			dd.release = release
		}
		return dd
	}
	for _, dd := range []decision{d("a", false, nil), d("b", true, failed), d("c", false, nil)} {
		if err := q.Push(ctx, dd, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if !slices.Equal(written, []string{"a"}) {
		t.Errorf("before the decision: written %q, want a alone", written)
	}
	mu.Unlock()
	close(release)
	poll.Eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(written, []string{"a", "b", "c"}) || !slices.Equal(reported, written) {
			return fmt.Errorf("written %q, reported %q; want a, b, c both", written, reported)
		}
		return nil
	})
	if err := q.Push(ctx, d("d", false, nil), func([]byte) []byte { return nil }); !errors.Is(err, failed) {
		t.Fatalf("the next Push: %v, want the decision's error", err)
	}
	if err := q.Push(ctx, d("e", false, nil), nil); err != nil {
		t.Fatalf("the Push after: %v, want nil (a decision's error is returned once)", err)
	}
	if err := q.Wait(); !errors.Is(err, failed) {
		t.Fatalf("Wait = %v, want the decision's error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(written, []string{"a", "b", "c", "e"}) {
		t.Errorf("written %q: a message framed to nothing is not written", written)
	}
}

// TestWriteFailureStops: once a write failed nothing more is written, and
// every Push returns the failure.
func TestWriteFailureStops(t *testing.T) {
	gone := errors.New("the client is gone")
	n := 0
	q := New[decision](func([]byte) error { n++; return gone })
	var mu sync.Mutex
	var reported []string
	for _, out := range []string{"a", "b"} {
		if err := q.Push(context.Background(), decision{out: out, reported: &reported, mu: &mu}, nil); !errors.Is(err, gone) {
			t.Fatalf("Push %s: %v, want the failed write", out, err)
		}
	}
	if n != 1 || len(reported) != 2 {
		t.Fatalf("%d writes, %d reports; want 1 write (none after it failed), both reported", n, len(reported))
	}
	if err := q.Wait(); !errors.Is(err, gone) {
		t.Fatalf("Wait = %v", err)
	}
}

// TestBacklogBounded: behind a decision that waits, the messages read
// meanwhile are kept up to the bound; notifications past it are shed (and
// counted by their owner), what cannot be shed is kept, and the order of
// what is delivered holds.
func TestBacklogBounded(t *testing.T) {
	var mu sync.Mutex
	var written, reported []string
	q := New[decision](func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, string(b))
		return nil
	})
	ctx := context.Background()
	release := make(chan struct{})
	if err := q.Push(ctx, decision{out: "held", release: release, reported: &reported, mu: &mu}, nil); err != nil {
		t.Fatal(err)
	}
	shed := 0
	const flood = 3 * maxBacklog
	for i := range flood {
		if err := q.Push(ctx, decision{out: fmt.Sprint("n", i), reported: &reported, mu: &mu, shed: &shed}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A response past the bound is kept: it cannot be shed.
	if err := q.Push(ctx, decision{out: "answer", reported: &reported, mu: &mu}, nil); err != nil {
		t.Fatal(err)
	}
	if want := flood - (maxBacklog - 1); shed != want {
		t.Fatalf("%d shed, want %d (the bound %d, one place held)", shed, want, maxBacklog)
	}
	close(release)
	if err := q.Wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(written) != maxBacklog+1 || written[0] != "held" || written[len(written)-1] != "answer" {
		t.Fatalf("wrote %d: first %q last %q", len(written), written[0], written[len(written)-1])
	}
}
