package surface

import (
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var pairsOut = flag.String("pairs", "", "write the schema pairs of TestSchemaPairs to this file, for scripts/check-schema-equivalence.py")

// TestSchemaPairs collects schema pairs: every input or output schema that
// changed between consecutive real releases, and random schemas in two
// equivalent forms and after a real edit, each with whether the diff rates
// it as only written differently. With -pairs it writes them out, so that
// scripts/check-schema-equivalence.py can check with an independent JSON
// Schema validator that the pairs rated as written differently accept the
// same instances.
func TestSchemaPairs(t *testing.T) {
	type pair struct {
		Src string `json:"src"`
		Old any    `json:"old"`
		New any    `json:"new"`
		Rep bool   `json:"rep"` // rated representation_changed and nothing else
	}
	var pairs []pair
	reps := 0
	for _, server := range realServers(t) {
		vs := realVersions(t, server)
		for i := 1; i < len(vs); i++ {
			o := mustParseFile(t, filepath.Join("testdata", "real", server, vs[i-1]+".json"))
			n := mustParseFile(t, filepath.Join("testdata", "real", server, vs[i]+".json"))
			news := map[string]Item{}
			for _, it := range n.Of(KindTool) {
				news[it.Name] = it
			}
			for _, ot := range o.Of(KindTool) {
				nt, ok := news[ot.Name]
				if !ok || ot.Hash == nt.Hash {
					continue
				}
				om, nm := decode(ot).(map[string]any), decode(nt).(map[string]any)
				for _, key := range []string{"inputSchema", "outputSchema"} {
					a, okA := om[key]
					b, okB := nm[key]
					if !okA || !okB {
						continue
					}
					cs := diffRootSchema(nil, key, a, b, true)
					rep := len(cs) == 1 && cs[0].Kind == ChangeRepresentation
					if rep {
						reps++
					}
					pairs = append(pairs, pair{server + " " + vs[i-1] + " → " + vs[i] + " " + ot.Name + " " + key, a, b, rep})
				}
			}
		}
	}
	if reps == 0 {
		t.Fatal("no real schema pair is rated as only written differently; the fixtures should have some (chrome-devtools 1.9.0 → 1.10.1)")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for range 300 {
		base := genSchema(r, 0, true)
		a := rewrite(r, clone(base), true)
		pairs = append(pairs, pair{"random", a, rewrite(r, clone(base), true), true})
		e, _ := realEdit(r, clone(base))
		pairs = append(pairs, pair{"random edit", a, rewrite(r, e, true), false})
	}
	if *pairsOut == "" {
		return
	}
	raw, err := json.Marshal(pairs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*pairsOut, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}
