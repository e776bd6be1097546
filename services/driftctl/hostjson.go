package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// This file reads an agent host's MCP configuration as byte spans, so that
// a wrap rewrites only the server entries it changes: every other byte of
// the file (key order, formatting, fields mcpdrift does not know, comments
// where the host allows them) stays as it was.

// member is one member of a JSON object: its key and the span of its value
// in the document, [start, end).
type member struct {
	key        string
	start, end int
}

// value returns m's value in doc.
func (m member) value(doc []byte) []byte { return doc[m.start:m.end] }

// errShape is a configuration that is JSON but not in the host's shape.
var errShape = errors.New("not the host's shape")

// objectMembers returns the members of the JSON object at doc[start:end]
// in their order, with their spans in doc. doc must be valid JSON (after
// blankJSONC where the host allows comments); a value that is not an
// object, or a key given twice, is errShape.
func objectMembers(doc []byte, start, end int) ([]member, error) {
	src := doc[start:end]
	dec := json.NewDecoder(bytes.NewReader(src))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: want an object, found %s", errShape, kindOf(src))
	}
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("%w: the key %q appears twice", errShape, key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		e := int(dec.InputOffset())
		s := e - len(raw)
		if s < 0 || !bytes.Equal(src[s:e], raw) { // the decoder's offsets are what this file stands on
			return nil, fmt.Errorf("locating the value of %q", key)
		}
		ms = append(ms, member{key: key, start: start + s, end: start + e})
	}
	return ms, nil
}

// lookup returns the member named key, if any.
func lookup(ms []member, key string) (member, bool) {
	for _, m := range ms {
		if m.key == key {
			return m, true
		}
	}
	return member{}, false
}

// kindOf names the kind of the JSON value v for an error.
func kindOf(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// blankJSONC returns a copy of b, JSON with comments (// and /* */) and
// trailing commas as VS Code reads its settings, with those replaced by
// spaces: the same length, so that a span in the copy is the same span in
// b. Newlines inside block comments are kept.
func blankJSONC(b []byte) []byte {
	out := bytes.Clone(b)
	lastSig := -1 // index of the last significant byte outside strings and comments
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case c == '"':
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
			lastSig = i
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			out[i], out[i+1] = ' ', ' '
			for i += 2; i < len(out) && !(out[i] == '*' && i+1 < len(out) && out[i+1] == '/'); i++ {
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
			if i < len(out) {
				out[i], out[i+1] = ' ', ' '
				i++
			}
		case c == '}' || c == ']':
			if lastSig >= 0 && out[lastSig] == ',' {
				out[lastSig] = ' '
			}
			lastSig = i
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastSig = i
		}
	}
	return out
}

// jsonString is s as a JSON string, with <, > and & as they are (a URL's
// query stays readable).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// jsonArray writes ss as a JSON array of strings in the layout of old,
// the array it replaces (nil: none): on one line (", " between the items
// unless old had ","), or one item a line indented as old's.
func jsonArray(old []byte, ss []string) []byte {
	items := make([][]byte, len(ss))
	for i, s := range ss {
		items[i] = jsonString(s)
	}
	nl := bytes.IndexByte(old, '\n')
	if nl < 0 || len(items) == 0 {
		sep := ", "
		if bytes.Contains(old, []byte(`",`)) && !bytes.Contains(old, []byte(`", `)) {
			sep = ","
		}
		return append(append([]byte{'['}, bytes.Join(items, []byte(sep))...), ']')
	}
	item := leadingSpace(old[nl+1:])
	last := old[bytes.LastIndexByte(old, '\n')+1:]
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, it := range items {
		b.WriteString(item)
		b.Write(it)
		if i < len(items)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(leadingSpace(last))
	b.WriteByte(']')
	return b.Bytes()
}

// lineIndent is the indentation of the line doc[at] is on.
func lineIndent(doc []byte, at int) string {
	return leadingSpace(doc[bytes.LastIndexByte(doc[:at], '\n')+1:])
}

// leadingSpace is the run of spaces and tabs b starts with.
func leadingSpace(b []byte) string {
	n := 0
	for n < len(b) && (b[n] == ' ' || b[n] == '\t') {
		n++
	}
	return string(b[:n])
}

// edit replaces doc[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// applyEdits returns doc with the edits made; they do not overlap.
func applyEdits(doc []byte, edits []edit) []byte {
	edits = slices.Clone(edits)
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	var out bytes.Buffer
	at := 0
	for _, e := range edits {
		out.Write(doc[at:e.start])
		out.Write(e.repl)
		at = e.end
	}
	out.Write(doc[at:])
	return out.Bytes()
}
