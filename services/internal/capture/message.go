package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// member is one name/value pair of a JSON object, the value as raw bytes.
type member struct {
	name  string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members, in order and with
// duplicates kept, without re-encoding any value. Matching is exact, unlike
// encoding/json's case-insensitive struct fields.
func objectMembers(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("unexpected %v in object", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{name, v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return ms, nil
}

// unique returns the value of the member called name, nil if there is none,
// and an error if there are several: different JSON parsers disagree about
// which duplicate wins.
func unique(ms []member, name string) (json.RawMessage, error) {
	var v json.RawMessage
	for _, m := range ms {
		if m.name != name {
			continue
		}
		if v != nil {
			return nil, fmt.Errorf("duplicate member %q", name)
		}
		v = m.value
	}
	return v, nil
}

func isNull(v json.RawMessage) bool { return bytes.Equal(v, []byte("null")) }

func isJSONObject(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(data)
}

// message is one JSON-RPC 2.0 message from the server. Absent members are
// nil; a member sent as null is the bytes "null".
type message struct {
	id     json.RawMessage
	method json.RawMessage
	result json.RawMessage
	err    json.RawMessage
}

// isRequest reports a server-to-client request, which must be answered.
func (m message) isRequest() bool { return m.method != nil && m.id != nil }

// isResponse reports a response to a request of the capture client.
func (m message) isResponse() bool { return m.method == nil && m.id != nil }

// hasID reports whether the message's id is the integer id.
func (m message) hasID(id int64) bool {
	return bytes.Equal(m.id, strconv.AppendInt(nil, id, 10))
}

// parseMessage parses one line of the server's stdout. It rejects anything
// that is not a single JSON object with at most one of each JSON-RPC member:
// a line that could be read two ways is not a message.
func parseMessage(line []byte) (message, error) {
	ms, err := objectMembers(line)
	if err != nil {
		return message{}, err
	}
	var m message
	for _, f := range []struct {
		name string
		dst  *json.RawMessage
	}{{"id", &m.id}, {"method", &m.method}, {"result", &m.result}, {"error", &m.err}, {"jsonrpc", new(json.RawMessage)}} {
		if *f.dst, err = unique(ms, f.name); err != nil {
			return message{}, err
		}
	}
	if isNull(m.err) {
		m.err = nil // "error": null beside a result is sloppy but unambiguous
	}
	if m.id == nil && m.method == nil {
		return message{}, errors.New("neither id nor method")
	}
	if m.method != nil && (len(m.method) == 0 || m.method[0] != '"') {
		return message{}, errors.New("method is not a string")
	}
	return m, nil
}

// rpcError decodes an error member.
func rpcError(raw json.RawMessage) error {
	var e RPCError
	if err := json.Unmarshal(raw, &e); err != nil {
		return fmt.Errorf("malformed error response %s", quoteShort(raw))
	}
	return &e
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline, allocating a new slice
// each time. It reads a final line that lacks a newline as a line, and stops
// with errLineTooLong, having read limit+1 bytes of it, when a line exceeds
// limit bytes. At the end of input it returns io.EOF and no line.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		n := len(line)
		if err == nil {
			n-- // the newline
		}
		if n > limit {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return line[:n], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// quoteShort quotes b for an error message, cut to a readable length.
func quoteShort(b []byte) string {
	const limit = 120
	if len(b) > limit {
		return strconv.Quote(string(b[:limit])) + "..."
	}
	return strconv.Quote(string(b))
}
