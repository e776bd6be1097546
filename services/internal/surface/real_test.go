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
				rep := Diff(mustParseFileWith(t, oldPath, realOptions), mustParseFileWith(t, newPath, realOptions))

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

// realOptions are the options the real-world drift is measured with: the
// form new servers are hashed with.
var realOptions = Options{Form: FormLatest}

// oracleDiff compares two captures with encoding/json alone: items keyed by
// identity, covered fields (of form v2) only, set-valued keywords sorted,
// the defaults and volatile members form v2 leaves out left out.
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
		if info, ok := init["serverInfo"].(map[string]any); ok {
			kept := map[string]any{}
			for _, f := range []string{"name", "title", "description", "websiteUrl", "icons"} {
				if v, ok := info[f]; ok && !oracleEmpty(v) {
					kept[f] = v
				}
			}
			items["server "] = kept
		}
	}
	lists := []struct {
		key, kind, id string
		covered       []string
	}{
		{"tools", "tool", "name", []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "execution", "_meta"}},
		{"prompts", "prompt", "name", []string{"name", "title", "description", "arguments", "icons", "_meta"}},
		{"resources", "resource", "uri", []string{"uri", "name", "title", "description", "mimeType", "annotations", "icons", "_meta"}},
		{"resourceTemplates", "resourceTemplate", "uriTemplate", []string{"uriTemplate", "name", "title", "description", "mimeType", "annotations", "icons", "_meta"}},
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
					v, ok := m[f]
					if !ok || v == nil {
						continue
					}
					if obj, isObj := v.(map[string]any); isObj && f != "inputSchema" && f != "outputSchema" {
						trimmed := map[string]any{}
						for k, e := range obj {
							switch {
							case f == "execution" && k == "taskSupport" && e == "forbidden",
								f == "annotations" && l.kind != "tool" && k == "lastModified",
								f == "_meta" && slices.Contains(VolatileMetaKeys, k):
							default:
								trimmed[k] = e
							}
						}
						v = trimmed
					}
					if !oracleEmpty(v) {
						kept[f] = sortSets(f, v)
					}
				}
				items[l.kind+" "+m[l.id].(string)] = kept
			}
		}
	}
	return items
}

// oracleEmpty: an empty object or array counts as absent in form v2.
func oracleEmpty(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
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

// TestRealWorldFormV2AddsNoDrift: form v2 covers more than v1, yet across
// the captured releases it finds drift in no pair v1 found none in, rates
// every pair as v1 does, and flags the same items but for the server item
// where serverInfo really changed (a name or title, never a version: 26 of
// the 43 pairs change serverInfo.version, and 53 tools write out or drop
// execution {"taskSupport":"forbidden"}, the default).
func TestRealWorldFormV2AddsNoDrift(t *testing.T) {
	serverOnly := 0
	for _, server := range realServers(t) {
		vs := realVersions(t, server)
		for i := 1; i < len(vs); i++ {
			oldPath := filepath.Join("testdata", "real", server, vs[i-1]+".json")
			newPath := filepath.Join("testdata", "real", server, vs[i]+".json")
			r1 := Diff(mustParseFileWith(t, oldPath, Options{}), mustParseFileWith(t, newPath, Options{}))
			r2 := Diff(mustParseFileWith(t, oldPath, Options{Form: FormV2}), mustParseFileWith(t, newPath, Options{Form: FormV2}))
			i1 := reportItems(r1)
			i2 := slices.DeleteFunc(reportItems(r2), func(s string) bool { return s == "changed server " })
			if len(i2) < len(reportItems(r2)) {
				serverOnly++
			}
			if r1.Drift != r2.Drift || r1.Severity != r2.Severity || r1.Benign != r2.Benign || !slices.Equal(i1, i2) {
				t.Errorf("%s %s → %s: v1 %v %s benign %v %q; v2 %v %s benign %v %q", server, vs[i-1], vs[i],
					r1.Drift, r1.Severity, r1.Benign, i1, r2.Drift, r2.Severity, r2.Benign, reportItems(r2))
			}
		}
	}
	if serverOnly != 2 {
		t.Errorf("the server item changed in %d pairs, want 2 (everything: a title added, then name and title)", serverOnly)
	}
}
