package streamhttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// An event of a Server-Sent Events stream, as read: Raw is the event's
// original bytes including the blank line that ended it, so an event the
// proxy does not change is passed on byte for byte.
type event struct {
	Raw     []byte
	ID      []byte
	HasID   bool
	Name    []byte
	Data    []byte
	HasData bool
}

// errEventTooLarge ends a stream whose event exceeds the limit.
var errEventTooLarge = errors.New("event_too_large")

// sseReader reads a text/event-stream event by event. Lines end with LF or
// CRLF (a lone CR is not taken as a line end).
type sseReader struct {
	src io.Reader
	br  *bufio.Reader
	max int
	buf bytes.Buffer
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{src: r, br: bufio.NewReaderSize(r, 4<<10), max: max} // longer lines are read in pieces
}

// ready reports whether more of the stream has arrived and waits to be
// read: in the reader's buffer, or in its source's when it tells.
func (s *sseReader) ready() bool {
	if s.br.Buffered() > 0 {
		return true
	}
	b, ok := s.src.(interface{ Buffered() int })
	return ok && b.Buffered() > 0
}

// next returns the next event; comment-only and empty events come back too
// (HasData false) so that keep-alives pass on. At the end of the stream it
// returns io.EOF, with any unterminated last event discarded as the SSE
// specification says.
func (s *sseReader) next() (*event, error) {
	s.buf.Reset()
	ev := &event{}
	var data bytes.Buffer
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		field := bytes.TrimRight(line, "\r\n")
		if len(field) == 0 {
			if s.buf.Len() == len(line) {
				continue // blank lines between events
			}
			ev.Raw = bytes.Clone(s.buf.Bytes())
			if ev.HasData {
				ev.Data = bytes.TrimSuffix(data.Bytes(), []byte{'\n'})
			}
			return ev, nil
		}
		if field[0] == ':' {
			continue // a comment
		}
		name, value, found := bytes.Cut(field, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "data":
			ev.HasData = true
			data.Write(value)
			data.WriteByte('\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID, ev.HasID = bytes.Clone(value), true
			}
		case "event":
			ev.Name = bytes.Clone(value)
		}
	}
}

// line reads one line into the event buffer and returns it.
func (s *sseReader) line() ([]byte, error) {
	start := s.buf.Len()
	for {
		chunk, err := s.br.ReadSlice('\n')
		s.buf.Write(chunk)
		if s.buf.Len() > s.max {
			return nil, fmt.Errorf("%w: an event of more than %d bytes", errEventTooLarge, s.max)
		}
		switch {
		case err == nil:
			return s.buf.Bytes()[start:], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// appendEvent writes an event carrying data (one JSON-RPC message: it
// holds no newline unless the sender pretty-printed it, and then each line
// becomes a data line) with the id and name of ev when ev is not nil.
func appendEvent(dst []byte, ev *event, data []byte) []byte {
	if ev != nil && ev.HasID {
		dst = append(dst, "id: "...)
		dst = append(dst, ev.ID...)
		dst = append(dst, '\n')
	}
	name := []byte("message")
	if ev != nil && len(ev.Name) > 0 {
		name = ev.Name
	}
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, '\n')
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		dst = append(dst, "data: "...)
		dst = append(dst, bytes.TrimSuffix(line, []byte{'\r'})...)
		dst = append(dst, '\n')
	}
	return append(dst, '\n')
}

// appendIDOnly writes an event that carries only ev's id, so that a client
// resuming with Last-Event-ID still learns how far it got when the proxy
// kept the event's message to itself.
func appendIDOnly(dst []byte, ev *event) []byte {
	dst = append(dst, "id: "...)
	dst = append(dst, ev.ID...)
	return append(dst, "\n\n"...)
}
