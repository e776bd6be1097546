package coded_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

var update = flag.Bool("update", false, "rewrite docs/codes.md from the registry")

// TestRegistryWellFormed: the registry is sorted by code (Lookup searches
// it), each code once, each with at least one use in a known area, and a
// code the proxy answers with alone over HTTP has a JSON-RPC shape too.
func TestRegistryWellFormed(t *testing.T) {
	reg := coded.Registry()
	codeRE := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for i, e := range reg {
		if i > 0 && reg[i-1].Code >= e.Code {
			t.Errorf("%q after %q: the registry must be sorted, each code once", e.Code, reg[i-1].Code)
		}
		if !codeRE.MatchString(e.Code) {
			t.Errorf("%q is not a snake_case code", e.Code)
		}
		if len(e.Uses) == 0 {
			t.Errorf("%s: no use", e.Code)
		}
		for _, u := range e.Uses {
			if !slices.Contains(coded.Areas, u.Area) || u.Means == "" {
				t.Errorf("%s: use %+v", e.Code, u)
			}
		}
		if e.HTTP != 0 && e.RPC == 0 || e.Tool && !slices.ContainsFunc(e.Uses, func(u coded.Use) bool { return u.Area == coded.AreaProxy }) {
			t.Errorf("%s: an HTTP status without a JSON-RPC error code, or a tool error the proxy does not answer with", e.Code)
		}
		if got, ok := coded.Lookup(e.Code); !ok || got.Code != e.Code {
			t.Errorf("Lookup(%q) = %+v, %v", e.Code, got, ok)
		}
	}
	if _, ok := coded.Lookup("no_such_code"); ok {
		t.Error("Lookup found a code that is not registered")
	}
}

// declared is a code string found in the services' source, and where.
type declared struct{ code, where string }

// codeRE is what a code looks like; constRE the names of constants and
// variables that declare codes; codeCalls the functions whose string
// arguments are codes (coded.New and coded.Errorf, bus.Poisonf, and the
// HTTP error writers of the admin API, the console and the proxy).
var (
	codeRE    = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	constRE   = regexp.MustCompile(`^(Code|code[A-Z]|Err|Refuse|Drop|Policy|Reason|Invalid|MessageTooLarge)`)
	codeCalls = map[string]bool{"Poisonf": true, "writeError": true, "writeErrorList": true, "apiError": true, "fail": true, "httpError": true, "Refuse": true, "Reply": true}
)

// codesInSource reads every non-test Go file of the services module and
// returns each code it declares: the string value of a constant or
// variable named like a code (or typed as one), the first argument of
// coded.New and coded.Errorf, the string arguments of the functions that
// write errors, and a literal assigned to a variable named code.
func codesInSource(t *testing.T, root string) []declared {
	t.Helper()
	var out []declared
	fset := token.NewFileSet()
	lit := func(e ast.Expr) (string, bool) {
		bl, ok := e.(*ast.BasicLit)
		if !ok || bl.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(bl.Value)
		return s, err == nil && codeRE.MatchString(s)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || filepath.Base(p) == "registry.go" && filepath.Base(filepath.Dir(p)) == "coded" {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		add := func(s string, n ast.Node, how string) {
			rel, _ := filepath.Rel(root, p)
			out = append(out, declared{s, fmt.Sprintf("%s:%d (%s)", rel, fset.Position(n.Pos()).Line, how)})
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				typed := false
				switch ty := n.Type.(type) {
				case *ast.Ident:
					typed = ty.Name == "Code"
				case *ast.SelectorExpr:
					typed = ty.Sel.Name == "Code"
				}
				for i, name := range n.Names {
					if i >= len(n.Values) || !typed && !constRE.MatchString(name.Name) {
						continue
					}
					if s, ok := lit(n.Values[i]); ok {
						add(s, n, "declared as "+name.Name)
					}
				}
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == "code" && i < len(n.Rhs) {
						if s, ok := lit(n.Rhs[i]); ok {
							add(s, n, "assigned to code")
						}
					}
				}
			case *ast.CallExpr:
				name := ""
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
					if x, ok := fn.X.(*ast.Ident); ok && x.Name == "coded" && (name == "New" || name == "Errorf") && len(n.Args) > 0 {
						if s, ok := lit(n.Args[0]); ok {
							add(s, n, "coded."+name)
						}
						return true
					}
				}
				if codeCalls[name] {
					for _, a := range n.Args {
						if s, ok := lit(a); ok {
							add(s, n, name)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEveryCodeRegistered: every code the services declare or write is in
// the registry, and every entry of the registry is declared somewhere: a
// code added, renamed or removed in one place and not the other fails here.
func TestEveryCodeRegistered(t *testing.T) {
	found := codesInSource(t, filepath.Join("..", ".."))
	if len(found) < 100 {
		t.Fatalf("found only %d codes in the source: is the walk reading the services module?", len(found))
	}
	seen := map[string]bool{}
	for _, d := range found {
		seen[d.code] = true
		if _, ok := coded.Lookup(d.code); !ok {
			t.Errorf("%s: code %q is not in the registry (services/internal/coded/registry.go)", d.where, d.code)
		}
	}
	for _, e := range coded.Registry() {
		if !seen[e.Code] {
			t.Errorf("registry entry %q is declared nowhere in the services' source: remove it, or declare the code where it is written", e.Code)
		}
	}
}

// TestCodesDoc: docs/codes.md is the registry, rendered; -update rewrites
// it.
func TestCodesDoc(t *testing.T) {
	path := filepath.Join("..", "..", "..", "docs", "codes.md")
	want := renderDoc()
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/codes.md is not the registry rendered: run go test ./internal/coded -run TestCodesDoc -update in services/")
	}
}

var areaTitle = map[coded.Area]string{
	coded.AreaProxy:       "The proxy's answers, on every transport",
	coded.AreaProxyHTTP:   "The proxy's answers on HTTP",
	coded.AreaProxyOps:    "The proxy's logs and metrics",
	coded.AreaEngine:      "The fingerprint engine",
	coded.AreaPolicy:      "Policy documents",
	coded.AreaBus:         "The bus: dead letters and setup",
	coded.AreaFingerprint: "The fingerprint service",
	coded.AreaVerdict:     "Verdict reasons",
	coded.AreaAdmin:       "The admin API and the review console",
	coded.AreaAudit:       "The audit sink and queries",
	coded.AreaNotify:      "The notify service",
	coded.AreaDriftctl:    "driftctl",
}

var areaWhere = map[coded.Area]string{
	coded.AreaProxy:       "A refused `tools/call` is an MCP tool error (`isError: true`) with the code in `result._meta[\"mcpdrift/code\"]`; every other answer of the proxy's own is a JSON-RPC error with the code in `error.data[\"mcpdrift/code\"]` and the JSON-RPC error code below, the same bytes on stdio, Streamable HTTP and HTTP+SSE. Over HTTP, a request the proxy answers alone with a code that has an HTTP status gets that status. Drops are counted in `mcpdrift_proxy_dropped_messages_total{code}`, refusals in `mcpdrift_proxy_refused_calls_total{code}`.",
	coded.AreaProxyHTTP:   "Shaped as above: a JSON-RPC error with the code in `error.data[\"mcpdrift/code\"]`, under the HTTP status below (an upstream's own status for `upstream_http_error`).",
	coded.AreaProxyOps:    "In the proxy's log lines (`code`), its exit error, and metric labels.",
	coded.AreaEngine:      "`Fingerprint.error_code`, a status record's `live_error`, `driftctl fingerprint` and `diff`, and the proxy's `listing_invalid` sentence.",
	coded.AreaPolicy:      "Each error of a refused document in the admin API's `errors` list (`PUT /v1/policy`), and `driftctl`.",
	coded.AreaBus:         "`DeadLetter.code` on `mcpdrift.dead.<service>` and the code label of the dead-letter metrics; the setup's errors at start.",
	coded.AreaFingerprint: "`Fingerprint.error_code`.",
	coded.AreaVerdict:     "`Verdict.reason` and the status record's `reason`, which `driftctl status` shows.",
	coded.AreaAdmin:       "The admin API's error body `{\"error\":{\"code\":…,\"message\":…}}`, the review console's error pages, and `driftctl: <code>: <sentence>`.",
	coded.AreaAudit:       "The audit sink's start and `driftctl audit`, the console's activity pages.",
	coded.AreaNotify:      "`notify: config: <code>: webhook <n>: <sentence>` on stderr, exit status 2, before it connects ([services/notify.md](services/notify.md#errors-at-start)).",
	coded.AreaDriftctl:    "`driftctl: <code>: <sentence>` on stderr.",
}

// renderDoc is docs/codes.md: one table per area.
func renderDoc() []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Generated from services/internal/coded/registry.go by TestCodesDoc; do not edit.\n")
	b.WriteString("     Rewrite: cd services && go test ./internal/coded -run TestCodesDoc -update -->\n\n")
	b.WriteString("# Codes\n\n")
	b.WriteString("Every code a client or an operator can see, from the one registry of them\n")
	b.WriteString("(`services/internal/coded/registry.go`). A code is a stable snake_case word:\n")
	b.WriteString("callers branch on it, never on the sentence beside it. A code keeps its\n")
	b.WriteString("string for good; a code written anywhere in the services that is not in the\n")
	b.WriteString("registry fails the tests (`TestEveryCodeRegistered`).\n")
	reg := coded.Registry()
	for _, a := range coded.Areas {
		proxy := a == coded.AreaProxy || a == coded.AreaProxyHTTP
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", areaTitle[a], areaWhere[a])
		if proxy {
			b.WriteString("| code | JSON-RPC | HTTP | meaning |\n|---|---|---|---|\n")
		} else {
			b.WriteString("| code | meaning |\n|---|---|\n")
		}
		for _, e := range reg {
			for _, u := range e.Uses {
				if u.Area != a {
					continue
				}
				if !proxy {
					fmt.Fprintf(&b, "| `%s` | %s |\n", e.Code, u.Means)
					continue
				}
				var shape []string
				if e.RPC != 0 {
					shape = append(shape, strconv.Itoa(e.RPC))
				}
				if e.Tool {
					shape = append(shape, "tool error")
				}
				rpc, status := strings.Join(shape, "; "), "–"
				if rpc == "" {
					rpc = "–"
				}
				if e.HTTP != 0 {
					status = strconv.Itoa(e.HTTP)
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", e.Code, rpc, status, u.Means)
			}
		}
	}
	return b.Bytes()
}
