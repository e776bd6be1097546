package streamhttp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// readAllEvents reads every event of in.
func readAllEvents(t testing.TB, in string, max int) ([]*event, error) {
	t.Helper()
	rd := newSSEReader(strings.NewReader(in), max)
	var evs []*event
	for {
		ev, err := rd.next()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// Events are read whole whatever their size up to the limit, ids and names
// kept; a bigger one ends the stream with event_too_large. (The reader
// keeps no original bytes any more: what the client gets is re-emitted.)
func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	in := ": keep-alive\n\nid: 7\nevent: message\ndata: {\"a\":\"" + long + "\"}\r\n\r\ndata: one\ndata: two\n\nid: 8\n\n"
	rd := newSSEReader(strings.NewReader(in), 1<<20)
	ev, err := rd.next()
	if err != nil || ev.HasData || !ev.Comment {
		t.Fatalf("comment event: %+v %v", ev, err)
	}
	ev, err = rd.next()
	if err != nil || string(ev.ID) != "7" || string(ev.Name) != "message" || string(ev.Data) != `{"a":"`+long+`"}` {
		t.Fatalf("long event: id %q name %q data %d bytes, %v", ev.ID, ev.Name, len(ev.Data), err)
	}
	ev, err = rd.next()
	if err != nil || string(ev.Data) != "one\ntwo" {
		t.Fatalf("two data lines: %q %v", ev.Data, err)
	}
	ev, err = rd.next()
	if err != nil || ev.HasData || !ev.HasID || string(appendIDOnly(nil, ev)) != "id: 8\ndata:\n\n" {
		t.Fatalf("id-only event: %+v %v", ev, err)
	}
	if _, err := rd.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	rd = newSSEReader(strings.NewReader("data: "+long+"\n\n"), 10<<10)
	if _, err := rd.next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("an event over the limit: %v", err)
	}
	rd = newSSEReader(strings.NewReader(": "+long+"\n: "+long+"\n\n"), 150<<10)
	if _, err := rd.next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("comments over the limit: %v", err)
	}
}

// The WHATWG event-stream rules, as eventsource-parser (the TypeScript
// SDK) applies them: each case is what a hostile upstream could use to
// make the proxy and a client read different messages.
func TestSSEFraming(t *testing.T) {
	type want struct {
		id, name, data string
		hasID, hasData bool
		retry          string
	}
	cases := []struct {
		name string
		in   string
		want []want
	}{
		{"lone CR ends a line", "data: a\rdata: b\r\r", []want{{data: "a\nb", hasData: true}}},
		{"CRLF ends a line", "data: a\r\ndata: b\r\n\r\n", []want{{data: "a\nb", hasData: true}}},
		{"mixed line ends", "data: a\rdata: b\ndata: c\r\n\n", []want{{data: "a\nb\nc", hasData: true}}},
		{"CR then LF across events", "data: a\r\ndata: b\r\r\ndata: c\n\n", []want{{data: "a\nb", hasData: true}, {data: "c", hasData: true}}},
		{"BOM at the start", "\xEF\xBB\xBFdata: x\n\n", []want{{data: "x", hasData: true}}},
		{"second BOM is part of a field name", "\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n", []want{{data: "y", hasData: true}}},
		{"BOM later is data", "data: a\n\n\xEF\xBB\xBFdata: b\n\n", []want{{data: "a", hasData: true}}},
		{"one space removed", "data:  two spaces\n\n", []want{{data: " two spaces", hasData: true}}},
		{"no space", "data:x\n\n", []want{{data: "x", hasData: true}}},
		{"field without colon is empty", "data\ndata\n\n", []want{{data: "\n", hasData: true}}},
		{"comment ignored", ": hi\ndata: x\n: there\n\n", []want{{data: "x", hasData: true}}},
		{"id with NUL ignored", "id: a\x00b\ndata: x\n\n", []want{{data: "x", hasData: true}}},
		{"id kept", "id: 42\ndata: x\n\n", []want{{id: "42", hasID: true, data: "x", hasData: true}}},
		{"retry digits", "retry: 1500\ndata: x\n\n", []want{{retry: "1500", data: "x", hasData: true}}},
		{"retry not digits ignored", "retry: 15x\ndata: x\n\n", []want{{data: "x", hasData: true}}},
		{"unknown field ignored", "foo: bar\ndata: x\n\n", []want{{data: "x", hasData: true}}},
		{"field name is case sensitive", "Data: x\ndata: y\n\n", []want{{data: "y", hasData: true}}},
		{"event name", "event: ping \ndata: x\n\n", []want{{name: "ping ", data: "x", hasData: true}}},
		{"unterminated last event discarded", "data: a\n\ndata: b", []want{{data: "a", hasData: true}}},
		{"unterminated after CR line", "data: a\r", nil},
		{"empty data line", "data:\n\n", []want{{data: "", hasData: true}}},
		{"blank lines only", "\n\r\n\r\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := readAllEvents(t, c.in, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, ev := range evs {
				if !ev.HasData && !ev.HasID && !ev.HasRetry {
					continue // comment-only
				}
				got = append(got, want{id: string(ev.ID), hasID: ev.HasID, name: string(ev.Name), data: string(ev.Data), hasData: ev.HasData, retry: string(ev.Retry)})
			}
			if len(got) != len(c.want) {
				t.Fatalf("%q: got %+v, want %+v", c.in, got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("%q: event %d: got %+v, want %+v", c.in, i, got[i], c.want[i])
				}
			}
		})
	}
}

// Which event names a client takes for a message: none or "message"
// (TypeScript SDK), the same once trimmed (Go SDK).
func TestIsMessageName(t *testing.T) {
	for name, want := range map[string]bool{"": true, "message": true, " message": true, "message\t": true, "\u00a0message": true,
		"Message": false, "endpoint": false, "mess age": false, "notification": false} {
		if got := isMessageName([]byte(name)); got != want {
			t.Errorf("isMessageName(%q) = %v, want %v", name, got, want)
		}
	}
}

// goSDKEvents reads a stream as the Go SDK's client does: lines end at LF
// only, fields are trimmed of white space, a line without a colon is an
// error, an event at the end of the stream is dispatched, an event with
// empty data is skipped.
func goSDKEvents(b []byte) (data [][]byte, names []string, ok bool) {
	var cur bytes.Buffer
	has := false
	name := ""
	flush := func() {
		if has && cur.Len() > 0 { // the Go SDK skips an event with empty data
			data = append(data, bytes.Clone(cur.Bytes()))
			names = append(names, name)
		}
		cur.Reset()
		has, name = false, ""
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			flush()
			continue
		}
		k, v, found := bytes.Cut(line, []byte{':'})
		if !found {
			return nil, nil, false
		}
		switch string(k) {
		case "event":
			name = string(bytes.TrimSpace(v))
		case "data":
			if has {
				cur.WriteByte('\n')
			}
			cur.Write(bytes.TrimSpace(v))
			has = true
		}
	}
	flush()
	return data, names, true
}

// Whatever an upstream sends, what the proxy re-emits reads back, by the
// WHATWG rules, as exactly the events it parsed, and the Go SDK's scanner
// reads the same messages (it trims each data line: for a JSON message
// that is white space between tokens).
func FuzzSSEReEmit(f *testing.F) {
	for _, s := range []string{"data: a\rdata: b\r\r", "\xEF\xBB\xBFid: 1\ndata: {\"x\":1}\n\n", "event: message \ndata:  x \n\n", "data\n\n", ": c\n\nretry: 10\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := readAllEvents(t, string(in), 1<<16)
		if err != nil && !errors.Is(err, errEventTooLarge) {
			t.Fatal(err)
		}
		// What the Go SDK reads of a data line: trimmed of white space.
		trimmed := func(b []byte) []byte {
			var o [][]byte
			for _, l := range bytes.Split(b, []byte{'\n'}) {
				o = append(o, bytes.TrimSpace(l))
			}
			return bytes.Join(o, []byte{'\n'})
		}
		var out []byte
		var sent []*event
		for _, ev := range evs {
			// As relay does; and a message (JSON, judged) is never white
			// space alone, which the Go SDK would read as empty.
			if len(ev.Data) > 0 && isMessageName(ev.Name) && frameable(ev.Data) && len(trimmed(ev.Data)) > 0 {
				out = appendEvent(out, ev, ev.Data)
				sent = append(sent, ev)
			}
		}
		again, err := readAllEvents(t, string(out), 1<<20)
		if err != nil || len(again) != len(sent) {
			t.Fatalf("re-emitted %q read back as %d events (%v), want %d", out, len(again), err, len(sent))
		}
		for i, ev := range again {
			if !bytes.Equal(ev.Data, sent[i].Data) || string(ev.Name) != "message" {
				t.Fatalf("event %d read back as %q, sent %q", i, ev.Data, sent[i].Data)
			}
			if sent[i].HasID && cleanID(sent[i].ID) && !bytes.Equal(ev.ID, sent[i].ID) {
				t.Fatalf("event %d id %q, sent %q", i, ev.ID, sent[i].ID)
			}
		}
		data, names, ok := goSDKEvents(out)
		if !ok || len(data) != len(sent) {
			t.Fatalf("the Go SDK reads %q as %d events (ok %v), want %d", out, len(data), ok, len(sent))
		}
		for i := range data {
			if names[i] != "message" || !bytes.Equal(data[i], trimmed(sent[i].Data)) {
				t.Fatalf("the Go SDK reads event %d as %q (%q), sent %q", i, data[i], names[i], sent[i].Data)
			}
		}
	})
}
