// Package realworld builds benchmark manifests out of the tools real MCP
// servers advertise (the captures under internal/surface/testdata/real), as
// they sent them: their own member order, their own escapes, compact. A
// manifest of any size is a tools/list result whose tools are the distinct
// captured tools, taken round-robin across servers and repeated as often as
// the size needs; a repeated tool gets a unique name (its name with "_<n>"
// appended), and nothing else of its bytes changes. It is for benchmarks
// and tests only: the engine's "already canonical" fast path never applies
// to such input, as it never does to what real servers send.
package realworld

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// Fixtures is the directory of the captures, relative to services/.
const Fixtures = "internal/surface/testdata/real"

// tool is one captured tool: its name and its bytes as the server sent them.
type tool struct {
	name string
	raw  []byte
}

// Manifest returns a tools/list result of at least size bytes (and less than
// size plus one tool) made of the tools of the captures under dir.
func Manifest(dir string, size int) ([]byte, error) {
	tools, err := distinct(dir)
	if err != nil {
		return nil, err
	}
	if len(tools) == 0 {
		return nil, fmt.Errorf("no tools in the captures under %s (scripts/capture-fixtures.sh makes them)", dir)
	}
	var out bytes.Buffer
	out.Grow(size + 64<<10)
	out.WriteString(`{"tools":[`)
	used := make(map[string]bool)
	for i := 0; out.Len() < size; i++ {
		t := tools[i%len(tools)]
		name := t.name
		for n := i / len(tools); used[name]; n++ {
			name = t.name + "_" + strconv.Itoa(n)
		}
		used[name] = true
		if i > 0 {
			out.WriteByte(',')
		}
		if err := rename(&out, t.raw, name); err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.name, err)
		}
	}
	out.WriteString(`]}`)
	return out.Bytes(), nil
}

// distinct returns every distinct tool (by its bytes) of the captures under
// dir, round-robin across servers, each server's in capture order.
func distinct(dir string) ([]tool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	seen := make(map[string]bool)
	var servers [][]tool
	idx := make(map[string]int)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var c struct {
			Tools struct {
				Pages []struct {
					Tools []json.RawMessage `json:"tools"`
				} `json:"pages"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(src, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		server := filepath.Base(filepath.Dir(f))
		if _, ok := idx[server]; !ok {
			idx[server] = len(servers)
			servers = append(servers, nil)
		}
		for _, p := range c.Tools.Pages {
			for _, raw := range p.Tools {
				if seen[string(raw)] {
					continue
				}
				seen[string(raw)] = true
				var t struct {
					Name string `json:"name"`
				}
				if err := json.Unmarshal(raw, &t); err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
				servers[idx[server]] = append(servers[idx[server]], tool{name: t.Name, raw: raw})
			}
		}
	}
	var out []tool
	for i := 0; ; i++ {
		added := false
		for _, s := range servers {
			if i < len(s) {
				out = append(out, s[i])
				added = true
			}
		}
		if !added {
			return out, nil
		}
	}
}

// rename writes the tool object raw with its top-level "name" member set to
// name, every other member's bytes and the member order unchanged.
func rename(w *bytes.Buffer, raw []byte, name string) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return fmt.Errorf("not an object (%v)", err)
	}
	w.WriteByte('{')
	for first := true; ; first = false {
		if dec.PeekKind() == '}' {
			break
		}
		key, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if !first {
			w.WriteByte(',')
		}
		isName := string(key) == `"name"` // key is valid only until the next read
		w.Write(key)
		w.WriteByte(':')
		val, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if isName {
			val, err = jsontext.AppendQuote(nil, name)
			if err != nil {
				return err
			}
		}
		w.Write(val)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	w.WriteByte('}')
	if _, err := dec.ReadToken(); err != io.EOF {
		return fmt.Errorf("data after the object")
	}
	return nil
}
