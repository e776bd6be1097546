package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// drops counts what an outbox reports dropped.
type drops struct{ calls, lists int }

func (d *drops) note(kind string, n int) {
	if kind == kindCall {
		d.calls += n
	} else {
		d.lists += n
	}
}

func testEvent(id string, call bool, size int) *event {
	kind := kindList
	if call {
		kind = kindCall
	}
	return &event{id: id, subject: "mcpdrift.obs.x.acme.mem", kind: kind, data: []byte(strings.Repeat("x", size))}
}

// idsIn reads every event of the outbox, in order.
func idsIn(t *testing.T, o *outbox) []string {
	t.Helper()
	var ids []string
	for _, e := range o.head(1<<30, 1<<40) {
		ev, err := o.read(e)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.id)
		o.done(e, false)
	}
	return ids
}

func TestOutboxBounds(t *testing.T) {
	L := func(id string) *event { return testEvent(id, false, 100) }
	C := func(id string) *event { return testEvent(id, true, 100) }
	size := int64(len(header(L("l1"))) + 100)
	tests := []struct {
		name      string
		maxEvents int
		maxBytes  int64
		add       []*event
		want      []string
		wantDrops drops
	}{
		{"under_bounds_keeps_all", 10, 1 << 20, []*event{L("l1"), C("c1"), L("l2")}, []string{"l1", "c1", "l2"}, drops{}},
		{"calls_go_before_listings", 3, 1 << 20, []*event{L("l1"), C("c1"), C("c2"), L("l2")}, []string{"l1", "c2", "l2"}, drops{calls: 1}},
		{"oldest_call_first", 3, 1 << 20, []*event{C("c1"), C("c2"), C("c3"), C("c4")}, []string{"c2", "c3", "c4"}, drops{calls: 1}},
		{"call_never_evicts_listing", 2, 1 << 20, []*event{L("l1"), L("l2"), C("c1")}, []string{"l1", "l2"}, drops{calls: 1}},
		{"listing_evicts_oldest_listing_last", 2, 1 << 20, []*event{L("l1"), L("l2"), L("l3")}, []string{"l2", "l3"}, drops{lists: 1}},
		{"bytes_bound", 100, 2 * size, []*event{L("l1"), C("c1"), L("l2")}, []string{"l1", "l2"}, drops{calls: 1}},
		{"event_larger_than_bound", 100, size - 1, []*event{L("l1")}, nil, drops{lists: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d drops
			o, err := openOutbox(t.TempDir(), tt.maxEvents, tt.maxBytes, d.note)
			if err != nil {
				t.Fatal(err)
			}
			defer o.close()
			for _, ev := range tt.add {
				if _, err := o.add([]*event{ev}); err != nil {
					t.Fatal(err)
				}
			}
			if got := idsIn(t, o); !slices.Equal(got, tt.want) {
				t.Errorf("outbox holds %v, want %v", got, tt.want)
			}
			if d != tt.wantDrops {
				t.Errorf("drops %+v, want %+v", d, tt.wantDrops)
			}
			if n, b := o.depth(); n != len(tt.want) || b != int64(len(tt.want))*size {
				t.Errorf("depth %d events %d bytes, want %d and %d", n, b, len(tt.want), int64(len(tt.want))*size)
			}
		})
	}
}

// An event being published is not evicted: a full outbox of in-flight
// events drops the newcomer instead.
func TestOutboxKeepsInflight(t *testing.T) {
	var d drops
	o, err := openOutbox(t.TempDir(), 1, 1<<20, d.note)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	if _, err := o.add([]*event{testEvent("c1", true, 1)}); err != nil {
		t.Fatal(err)
	}
	taken := o.head(10, 1<<20)
	if _, err := o.add([]*event{testEvent("l1", false, 1)}); err != nil {
		t.Fatal(err)
	}
	if d != (drops{lists: 1}) {
		t.Errorf("drops %+v, want the new listing dropped", d)
	}
	o.done(taken[0], true)
	if n, _ := o.depth(); n != 0 {
		t.Errorf("depth %d after the in-flight event was published, want 0", n)
	}
}

func TestOutboxReopen(t *testing.T) {
	root := t.TempDir()
	var d drops
	o, err := openOutbox(root, 10, 1<<20, d.note)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.add([]*event{testEvent("a", false, 5), testEvent("b", true, 5), testEvent("c", true, 5)}); err != nil {
		t.Fatal(err)
	}
	if err := o.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.add([]*event{testEvent("late", true, 1)}); !errors.Is(err, errOutboxClosed) || d.calls != 1 {
		t.Errorf("add after close: %v, drops %+v; want errOutboxClosed and the event counted", err, d)
	}

	tests := []struct {
		name      string
		maxEvents int
		want      []string
		wantDrops drops
	}{
		{"same_bounds_keeps_order", 10, []string{"a", "b", "c"}, drops{}},
		{"smaller_bound_drops_oldest_calls", 2, []string{"a", "c"}, drops{calls: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(root)); err != nil {
				t.Fatal(err)
			}
			var d drops
			o, err := openOutbox(dir, tt.maxEvents, 1<<20, d.note)
			if err != nil {
				t.Fatal(err)
			}
			defer o.close()
			if got := idsIn(t, o); !slices.Equal(got, tt.want) {
				t.Errorf("reopened outbox holds %v, want %v", got, tt.want)
			}
			if d != tt.wantDrops {
				t.Errorf("drops %+v, want %+v", d, tt.wantDrops)
			}
			// New events continue the sequence.
			if _, err := o.add([]*event{testEvent("d", false, 1)}); err != nil {
				t.Fatal(err)
			}
			if got := idsIn(t, o); got[len(got)-1] != "d" {
				t.Errorf("new event is not last: %v", got)
			}
		})
	}
}

func TestOutboxSlots(t *testing.T) {
	root := t.TempDir()
	noop := func(string, int) {}
	a, err := openOutbox(root, 10, 1<<20, noop)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openOutbox(root, 10, 1<<20, noop)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if a.dir != filepath.Join(root, "0") || b.dir != filepath.Join(root, "1") {
		t.Errorf("two live publishers got slots %s and %s, want 0 and 1", a.dir, b.dir)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	c, err := openOutbox(root, 10, 1<<20, noop)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if c.dir != filepath.Join(root, "0") {
		t.Errorf("after slot 0 was released a new publisher got %s", c.dir)
	}
}

func TestParseEventRejectsDamage(t *testing.T) {
	good := testEvent("id-1", false, 10)
	raw := append(header(good), good.data...)
	if ev, err := parseEvent(raw); err != nil || ev.id != "id-1" || ev.subject != good.subject || string(ev.data) != string(good.data) {
		t.Fatalf("parseEvent(good) = %+v, %v", ev, err)
	}
	tests := []struct {
		name string
		raw  []byte
	}{
		{"empty", nil},
		{"no_header", []byte("xxxxxxxxxx")},
		{"other_magic", append([]byte("other/1 s i 10 00000000\n"), good.data...)},
		{"truncated", raw[:len(raw)-1]},
		{"flipped_byte", append(append([]byte{}, raw[:len(raw)-1]...), 'y')},
		{"bad_length", append([]byte(outboxMagic+" s i ten 00000000\n"), good.data...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseEvent(tt.raw); err == nil {
				t.Error("parseEvent accepted a damaged file")
			}
		})
	}
}

func FuzzParseEvent(f *testing.F) {
	good := testEvent("id-1", true, 3)
	f.Add(append(header(good), good.data...))
	f.Add([]byte(outboxMagic + " a b 0 00000000\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := parseEvent(raw)
		if err != nil {
			return
		}
		again := append(header(ev), ev.data...)
		if ev2, err := parseEvent(again); err != nil || ev2.id != ev.id || string(ev2.data) != string(ev.data) {
			t.Errorf("re-encoded event does not parse back: %v", err)
		}
	})
}
