package stdio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// writes records each Write it gets, as one string.
type writes struct {
	mu  sync.Mutex
	got []string
	err error
}

func (w *writes) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	w.got = append(w.got, string(b))
	return len(b), nil
}

func (w *writes) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

func TestLineWriter(t *testing.T) {
	t.Run("unheld_writes_each_line_at_once", func(t *testing.T) {
		var w writes
		l := newLineWriter(&w)
		for _, m := range []string{`{"a":1}`, "{\"b\":\n2}"} {
			if err := l.write([]byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := w.all(), []string{"{\"a\":1}\n", "{\"b\":2}\n"}; !slices.Equal(got, want) {
			t.Errorf("writes %q, want %q", got, want)
		}
	})
	t.Run("held_lines_go_out_together_at_release", func(t *testing.T) {
		var w writes
		l := newLineWriter(&w)
		l.hold()
		for _, m := range []string{"1", "2", "3"} {
			if err := l.write([]byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.release(); err != nil {
			t.Fatal(err)
		}
		if got, want := w.all(), []string{"1\n2\n3\n"}; !slices.Equal(got, want) {
			t.Errorf("writes %q, want %q", got, want)
		}
		if err := l.write([]byte("4")); err != nil { // released: at once again
			t.Fatal(err)
		}
		if got := w.all(); len(got) != 2 || got[1] != "4\n" {
			t.Errorf("after release: writes %q", got)
		}
	})
	t.Run("a_held_line_goes_out_within_maxHold", func(t *testing.T) {
		var w writes
		l := newLineWriter(&w)
		l.hold()
		if err := l.write([]byte("1")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(w.all()) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a held line never went out while its writer stayed held")
			}
			time.Sleep(time.Millisecond)
		}
		if err := l.write([]byte("2")); err != nil { // still held: the timer again
			t.Fatal(err)
		}
		for len(w.all()) < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the second held line never went out")
			}
			time.Sleep(time.Millisecond)
		}
		if got, want := w.all(), []string{"1\n", "2\n"}; !slices.Equal(got, want) {
			t.Errorf("writes %q, want %q", got, want)
		}
		_ = l.release()
	})
	t.Run("a_held_writer_writes_past_maxHeld", func(t *testing.T) {
		var w writes
		l := newLineWriter(&w)
		l.hold()
		big := strings.Repeat("x", maxHeld)
		if err := l.write([]byte(big)); err != nil {
			t.Fatal(err)
		}
		if got := w.all(); len(got) != 1 || len(got[0]) != maxHeld+1 {
			t.Errorf("%d writes after a line of maxHeld bytes, want 1", len(got))
		}
		_ = l.release()
	})
	t.Run("a_write_error_sticks", func(t *testing.T) {
		broken := errors.New("broken pipe")
		w := writes{err: broken}
		l := newLineWriter(&w)
		if err := l.write([]byte("1")); !errors.Is(err, broken) {
			t.Fatalf("write: %v", err)
		}
		w.mu.Lock()
		w.err = nil
		w.mu.Unlock()
		if err := l.write([]byte("2")); !errors.Is(err, broken) {
			t.Errorf("a write after the failure: %v, want the failure", err)
		}
		held := newLineWriter(&writes{err: broken})
		held.hold()
		if err := held.write([]byte("1")); err != nil {
			t.Fatalf("a held write: %v", err)
		}
		if err := held.release(); !errors.Is(err, broken) {
			t.Errorf("release: %v, want the failure", err)
		}
	})
}

// chunks is a reader that returns its chunks one per Read.
type chunks struct{ parts []string }

func (c *chunks) Read(b []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

// TestPumpBatchesWhatIsRead: messages that arrive together are relayed in
// one write; one that arrives alone is written at once, before the pump
// waits for more.
func TestPumpBatchesWhatIsRead(t *testing.T) {
	var w writes
	out := newLineWriter(&w)
	p := &Proxy{cfg: Config{MaxLine: 1 << 20}}
	in := &chunks{parts: []string{"1\n2\n3\n", "4\n", "5\n6\n"}}
	var seen []string
	err := p.pump(context.Background(), in, func(_ context.Context, b []byte) error {
		seen = append(seen, string(b))
		return out.write(bytes.Clone(b))
	}, out, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1", "2", "3", "4", "5", "6"}; !slices.Equal(seen, want) {
		t.Fatalf("handled %q, want %q", seen, want)
	}
	if got, want := w.all(), []string{"1\n2\n3\n", "4\n", "5\n6\n"}; !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}
