package streamhttp

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// Events are read whole whatever their size up to the limit, ids and names
// kept and the original bytes returned; a bigger one ends the stream with
// event_too_large.
func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	in := ": keep-alive\n\nid: 7\nevent: message\ndata: {\"a\":\"" + long + "\"}\r\n\r\ndata: one\ndata: two\n\nid: 8\n\n"
	rd := newSSEReader(strings.NewReader(in), 1<<20)
	ev, err := rd.next()
	if err != nil || ev.HasData || string(ev.Raw) != ": keep-alive\n\n" {
		t.Fatalf("comment event: %+v %v", ev, err)
	}
	ev, err = rd.next()
	if err != nil || string(ev.ID) != "7" || string(ev.Name) != "message" || string(ev.Data) != `{"a":"`+long+`"}` {
		t.Fatalf("long event: id %q name %q data %d bytes, %v", ev.ID, ev.Name, len(ev.Data), err)
	}
	if !strings.HasPrefix(string(ev.Raw), "id: 7\n") || !strings.HasSuffix(string(ev.Raw), "\r\n\r\n") {
		t.Fatalf("raw bytes not kept: %.40q", ev.Raw)
	}
	ev, err = rd.next()
	if err != nil || string(ev.Data) != "one\ntwo" {
		t.Fatalf("two data lines: %q %v", ev.Data, err)
	}
	ev, err = rd.next()
	if err != nil || ev.HasData || !ev.HasID || string(appendIDOnly(nil, ev)) != "id: 8\n\n" {
		t.Fatalf("id-only event: %+v %v", ev, err)
	}
	if _, err := rd.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	rd = newSSEReader(strings.NewReader("data: "+long+"\n\n"), 10<<10)
	if _, err := rd.next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("an event over the limit: %v", err)
	}
}
