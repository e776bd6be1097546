package stdio

import (
	"errors"
	"slices"
	"sync"
	"testing"
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

// TestLineWriter: each message goes out as one line in one write, raw
// newlines (whitespace in JSON) dropped, and the caller's bytes untouched.
func TestLineWriter(t *testing.T) {
	var w writes
	l := newLineWriter(&w)
	msgs := [][]byte{[]byte(`{"a":1}`), []byte("{\"b\":\n2}\n"), make([]byte, 3, 8)}
	copy(msgs[2], "{}x")
	msgs[2] = msgs[2][:2] // spare capacity: a writer that appended in place would write over it
	for _, m := range msgs {
		if err := l.write(m); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"{\"a\":1}\n", "{\"b\":2}\n", "{}\n"}; !slices.Equal(w.got, want) {
		t.Errorf("writes %q, want %q", w.got, want)
	}
	if string(msgs[1]) != "{\"b\":\n2}\n" || string(msgs[2][:3]) != "{}x" {
		t.Errorf("the caller's bytes changed: %q %q", msgs[1], msgs[2][:3])
	}
	broken := errors.New("broken pipe")
	if err := newLineWriter(&writes{err: broken}).write([]byte("{}")); !errors.Is(err, broken) {
		t.Errorf("a failed write: %v", err)
	}
}
