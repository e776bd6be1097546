package streamhttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// An event of a Server-Sent Events stream, as the WHATWG event-stream
// rules read it (the rules of eventsource-parser, which the TypeScript SDK
// uses). There are no original bytes: what the client gets is re-emitted
// from these fields (appendEvent and the like), so that what the proxy
// judged is what every client parser reads, whatever line ends, BOM or
// field spellings the upstream used.
type event struct {
	ID       []byte // the id field's value (one without NUL)
	HasID    bool
	Name     []byte // the event field's value ("" when absent)
	Data     []byte // the data lines joined with \n
	HasData  bool
	Retry    []byte // the retry field's value, ASCII digits only
	HasRetry bool
	Comment  bool // the event held a comment (a keep-alive)
}

// errEventTooLarge ends a stream whose event exceeds the limit.
var errEventTooLarge = errors.New("event_too_large")

// sseReader reads a text/event-stream event by event per the WHATWG rules:
// a line ends with CRLF, LF or a lone CR; one UTF-8 BOM at the start of
// the stream is ignored; a line that starts with a colon is a comment; a
// line without a colon is a field with an empty value; one space after the
// colon is removed; data lines are joined with \n; an id holding NUL is
// ignored; a retry that is not all ASCII digits is ignored; unknown fields
// are ignored; an event is dispatched at a blank line, and an unterminated
// last event is discarded.
type sseReader struct {
	src     io.Reader
	buf     *sseBuf // br and line come from it
	br      *bufio.Reader
	max     int
	started bool // the BOM check is done
	skipLF  bool // the last line ended with CR: an LF right after it is part of that line end
	size    int  // bytes of the event being read
	line    []byte
}

// sseBuf is what an sseReader reads with: its read buffer, 4 KiB, and
// the buffer its lines are gathered in.
type sseBuf struct {
	br   *bufio.Reader
	line []byte
}

// sseBufs are the sseReaders' buffers, reused from one stream to the next
// (release).
var sseBufs = sync.Pool{New: func() any { return &sseBuf{br: bufio.NewReaderSize(nil, 4<<10)} }}

// maxPooledLine: a line buffer that grew larger than this for one long
// line is let go rather than kept.
const maxPooledLine = 64 << 10

func newSSEReader(r io.Reader, max int) *sseReader {
	b := sseBufs.Get().(*sseBuf)
	b.br.Reset(r)
	return &sseReader{src: r, buf: b, br: b.br, max: max, line: b.line[:0]}
}

// release gives the reader's buffers back for another stream; the reader
// is not used again. Nothing it returned refers to them: an event's
// fields are copies.
func (s *sseReader) release() {
	s.br.Reset(nil)
	line := s.line[:0]
	if cap(line) > maxPooledLine {
		line = nil
	}
	s.buf.line = line
	sseBufs.Put(s.buf)
	s.buf, s.br, s.line = nil, nil, nil
}

// next returns the next event that holds anything (data, an id, a retry,
// or only comments, which come back so that keep-alives pass on); blank
// lines between events are skipped. At the end of the stream it returns
// io.EOF, the unterminated last event discarded.
func (s *sseReader) next() (*event, error) {
	if !s.started {
		if err := s.skipBOM(); err != nil {
			return nil, err
		}
	}
	ev := &event{}
	var data []byte // the data lines, each followed by \n: the event's own (its first line allocates it to size)
	s.size = 0
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if !ev.HasData && !ev.HasID && !ev.HasRetry && !ev.Comment && len(ev.Name) == 0 {
				s.size = 0
				continue // blank lines between events
			}
			if ev.HasData {
				ev.Data = data[:len(data)-1]
			}
			return ev, nil
		}
		if line[0] == ':' {
			ev.Comment = true
			continue
		}
		name, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			if !ev.HasData {
				data = make([]byte, 0, len(value)+1)
			}
			ev.HasData = true
			data = append(append(data, value...), '\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID, ev.HasID = bytes.Clone(value), true
			}
		case "event":
			ev.Name = bytes.Clone(value)
		case "retry":
			if digits(value) {
				ev.Retry, ev.HasRetry = bytes.Clone(value), true
			}
		}
	}
}

// skipBOM drops one UTF-8 BOM at the start of the stream.
func (s *sseReader) skipBOM() error {
	b, err := s.br.Peek(1)
	if err != nil {
		return err
	}
	if b[0] == 0xEF {
		if b, _ := s.br.Peek(3); bytes.Equal(b, []byte{0xEF, 0xBB, 0xBF}) {
			_, _ = s.br.Discard(3)
		}
	}
	s.started = true
	return nil
}

// readLine returns the next line without its line end (CRLF, LF or CR).
// The line is valid until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		c, err := s.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if c == '\n' {
				continue
			}
		}
		if s.size++; s.size > s.max {
			return nil, fmt.Errorf("%w: an event of more than %d bytes", errEventTooLarge, s.max)
		}
		switch c {
		case '\n':
			return s.line, nil
		case '\r':
			s.skipLF = true
			return s.line, nil
		}
		s.line = append(s.line, c)
		// The rest of a long line up to its end comes in bulk.
		if rest := s.br.Buffered(); rest > 0 {
			b, _ := s.br.Peek(rest)
			n := bytes.IndexAny(b, "\r\n")
			if n < 0 {
				n = len(b)
			}
			if s.size+n > s.max {
				return nil, fmt.Errorf("%w: an event of more than %d bytes", errEventTooLarge, s.max)
			}
			s.line = append(s.line, b[:n]...)
			s.size += n
			_, _ = s.br.Discard(n)
		}
	}
}

func digits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isMessageName reports an event name that a client takes for a message:
// none or "message" for the TypeScript SDK (eventsource-parser), and the
// same once trimmed of white space for the Go SDK, which trims the name.
func isMessageName(name []byte) bool {
	n := bytes.TrimSpace(name)
	return len(n) == 0 || string(n) == "message"
}

// cleanID reports an event id every client reads the same: the Go SDK
// trims white space from an id, the WHATWG rules keep it.
func cleanID(id []byte) bool {
	return len(bytes.TrimSpace(id)) == len(id)
}

// appendEvent writes a message event: the id of ev when it has a clean
// one, its retry, the name "message", and data, one data line per line of
// data (the bytes the session judged: a client joins the lines with \n
// and reads exactly them). data must not hold a CR (frameable).
func appendEvent(dst []byte, ev *event, data []byte) []byte {
	dst = appendFields(dst, ev)
	dst = append(dst, "event: message\n"...)
	for {
		line, rest, more := bytes.Cut(data, []byte{'\n'})
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(dst, '\n')
}

// frameable reports data that appendEvent can carry so that clients read
// exactly it back: no CR, which a client would take for a line end.
func frameable(data []byte) bool {
	return bytes.IndexByte(data, '\r') < 0
}

// appendFields writes the id (when clean) and retry fields of ev.
func appendFields(dst []byte, ev *event) []byte {
	if ev == nil {
		return dst
	}
	if ev.HasID && cleanID(ev.ID) {
		dst = append(dst, "id: "...)
		dst = append(dst, ev.ID...)
		dst = append(dst, '\n')
	}
	if ev.HasRetry {
		dst = append(dst, "retry: "...)
		dst = append(dst, ev.Retry...)
		dst = append(dst, '\n')
	}
	return dst
}

// appendIDOnly writes an event that carries only ev's id and retry (none
// when it has neither), so that a client resuming with Last-Event-ID still
// learns how far it got when the proxy kept or dropped the event's
// message, or the event was a priming event. An id goes with an empty data
// line: eventsource-parser dispatches no event without one, and the
// TypeScript SDK learns ids only from dispatched events (both SDKs skip an
// event whose data is empty).
func appendIDOnly(dst []byte, ev *event) []byte {
	n := len(dst)
	dst = appendFields(dst, ev)
	switch {
	case len(dst) == n:
		return dst
	case ev.HasID && cleanID(ev.ID):
		dst = append(dst, "data:\n"...)
	}
	return append(dst, '\n')
}

// appendKeepAlive writes a comment-only event.
func appendKeepAlive(dst []byte) []byte {
	return append(dst, ":\n\n"...)
}
