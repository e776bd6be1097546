package surface

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Real-world drift: captures of consecutive published versions of the MCP
// reference servers (testdata/real, see its README). For each pair the diff
// must flag exactly the items that really changed, as found by an
// independent comparison through encoding/json, and its full report is
// pinned as a golden file for review.

func realVersions(t *testing.T, server string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "real", server, "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least two captures under testdata/real/%s (scripts/capture-fixtures.sh makes them): %v", server, err)
	}
	var vs []string
	for _, f := range files {
		vs = append(vs, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	slices.SortFunc(vs, compareVersions)
	return vs
}

func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x - y
		}
	}
	return len(as) - len(bs)
}

// realServers lists the servers captured under testdata/real.
func realServers(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "real", "*", "*.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no captures under testdata/real (scripts/capture-fixtures.sh makes them): %v", err)
	}
	var servers []string
	for _, f := range dirs {
		servers = append(servers, filepath.Base(filepath.Dir(f)))
	}
	slices.Sort(servers)
	return slices.Compact(servers)
}

func TestRealWorldDrift(t *testing.T) {
	for _, server := range realServers(t) {
		vs := realVersions(t, server)
		for i := 1; i < len(vs); i++ {
			oldV, newV := vs[i-1], vs[i]
			t.Run(server+"/"+oldV+"_to_"+newV, func(t *testing.T) {
				oldPath := filepath.Join("testdata", "real", server, oldV+".json")
				newPath := filepath.Join("testdata", "real", server, newV+".json")
				rep := Diff(mustParseFile(t, oldPath), mustParseFile(t, newPath))

				want := oracleDiff(t, oldPath, newPath)
				got := reportItems(rep)
				if !slices.Equal(got, want) {
					t.Fatalf("diff flags\n %q\nthe independent comparison finds\n %q", got, want)
				}
				if rep.Drift != (len(want) > 0) {
					t.Fatalf("drift = %v with %d real changes", rep.Drift, len(want))
				}
				// What is only written differently is at most low and benign;
				// the rest is judged by the golden file, read by hand.
				for _, it := range rep.Changed {
					if !slices.ContainsFunc(it.Changes, func(c Change) bool { return c.Kind != ChangeRepresentation }) &&
						(it.Severity > SeverityLow || !it.Benign) {
						t.Errorf("%s %s: representation only, rated %s benign %v", it.Kind, it.Name, it.Severity, it.Benign)
					}
				}
				out, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", "golden", "real", server, oldV+"_to_"+newV+".diff.json"), out)
			})
		}
	}
}

func reportItems(r *Report) []string {
	var out []string
	for _, it := range r.Added {
		out = append(out, "added "+it.Kind+" "+it.Name)
	}
	for _, it := range r.Removed {
		out = append(out, "removed "+it.Kind+" "+it.Name)
	}
	for _, it := range r.Changed {
		out = append(out, "changed "+it.Kind+" "+it.Name)
	}
	slices.Sort(out)
	return out
}

// oracleDiff compares two captures with encoding/json alone: items keyed by
// identity, covered fields only, set-valued keywords sorted.
func oracleDiff(t *testing.T, oldPath, newPath string) []string {
	o, n := oracleItems(t, oldPath), oracleItems(t, newPath)
	var out []string
	for key, ov := range o {
		nv, ok := n[key]
		switch {
		case !ok:
			out = append(out, "removed "+key)
		case !reflect.DeepEqual(ov, nv):
			out = append(out, "changed "+key)
		}
	}
	for key := range n {
		if _, ok := o[key]; !ok {
			out = append(out, "added "+key)
		}
	}
	for _, listing := range []string{"prompts", "resources", "resourceTemplates"} {
		if o["listed "+listing] != n["listed "+listing] {
			// A listing that appears or disappears is reported on its own line.
			kind := "added"
			if n["listed "+listing] == nil {
				kind = "removed"
			}
			out = slices.DeleteFunc(out, func(s string) bool { return s == kind+" listed "+listing })
			out = append(out, "changed listing "+listing)
		}
	}
	slices.Sort(out)
	return out
}

func oracleItems(t *testing.T, path string) map[string]any {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var capture map[string]any
	if err := dec.Decode(&capture); err != nil {
		t.Fatal(err)
	}
	items := map[string]any{}
	if init, ok := capture["initialize"].(map[string]any); ok {
		if ins, ok := init["instructions"].(string); ok {
			items["instructions "] = ins
		}
	}
	lists := []struct {
		key, kind, id string
		covered       []string
	}{
		{"tools", "tool", "name", []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}},
		{"prompts", "prompt", "name", []string{"name", "title", "description", "arguments"}},
		{"resources", "resource", "uri", []string{"uri", "name", "title", "description", "mimeType"}},
		{"resourceTemplates", "resourceTemplate", "uriTemplate", []string{"uriTemplate", "name", "title", "description", "mimeType"}},
	}
	for _, l := range lists {
		listing, ok := capture[l.key].(map[string]any)
		if !ok {
			continue
		}
		items["listed "+l.key] = true
		for _, page := range listing["pages"].([]any) {
			for _, it := range page.(map[string]any)[l.key].([]any) {
				m := it.(map[string]any)
				kept := map[string]any{}
				for _, f := range l.covered {
					if v, ok := m[f]; ok {
						kept[f] = sortSets(f, v)
					}
				}
				items[l.kind+" "+m[l.id].(string)] = kept
			}
		}
	}
	return items
}

// sortSets sorts "required" and array "type" members, and prompt arguments.
func sortSets(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = sortSets(k, e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = sortSets("", e)
		}
		if key == "required" || key == "type" || key == "arguments" {
			slices.SortFunc(out, func(a, b any) int {
				x, _ := json.Marshal(a)
				y, _ := json.Marshal(b)
				return bytes.Compare(x, y)
			})
		}
		return out
	}
	return v
}
