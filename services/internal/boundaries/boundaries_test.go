package boundaries

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the services module's path.
const module = "github.com/mcpdrift/mcpdrift/services"

// The packages the rules name.
const (
	session    = module + "/proxy/internal/session"
	stdio      = module + "/proxy/internal/stdio"
	streamhttp = module + "/proxy/internal/streamhttp"
	canonjson  = module + "/internal/canonjson"
	surface    = module + "/internal/surface"
	coded      = module + "/internal/coded"
)

// engine is the fingerprint engine (docs/architecture.md, "The
// fingerprint engine"), and what it may import of the module beside
// itself: coded, the one shape of an error with a code.
var (
	engine        = []string{canonjson, surface}
	engineAllowed = []string{canonjson, surface, coded}
)

// noIO are the standard packages of I/O and the network, which the engine
// never imports itself.
var noIO = []string{"os", "os/exec", "os/signal", "net", "net/http", "net/netip", "net/url", "syscall", "io/fs", "io/ioutil", "path/filepath"}

// pkg is what the go command lists of a package.
type pkg struct {
	ImportPath string
	Imports    []string // direct, without tests
	Deps       []string // transitive, without tests
}

// service names the service a package of the module belongs to
// (services/<svc>/...), "internal" for shared code, "" for a package
// outside the module.
func service(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	svc, _, _ := strings.Cut(rest, "/")
	return svc
}

// standard reports a standard library package: no dot in its first
// element.
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// within reports path is dir or below it.
func within(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// rule is one import rule of docs/architecture.md: violations returns what
// p breaks of it.
type rule struct {
	name       string
	violations func(p pkg) []string
}

var rules = []rule{
	{"a service never imports another service (share through proto/ and services/internal/)", func(p pkg) []string {
		svc := service(p.ImportPath)
		if svc == "" || svc == "internal" {
			return nil
		}
		var bad []string
		for _, d := range p.Deps {
			if other := service(d); other != "" && other != "internal" && other != svc {
				bad = append(bad, d)
			}
		}
		return bad
	}},
	{"code shared by services (services/internal/) imports no service", func(p pkg) []string {
		if service(p.ImportPath) != "internal" {
			return nil
		}
		var bad []string
		for _, d := range p.Deps {
			if other := service(d); other != "" && other != "internal" {
				bad = append(bad, d)
			}
		}
		return bad
	}},
	{"the proxy's session imports no transport (stdio, streamhttp): transports frame bytes and carry the session's decisions", func(p pkg) []string {
		if !within(p.ImportPath, session) {
			return nil
		}
		var bad []string
		for _, d := range p.Deps {
			if within(d, stdio) || within(d, streamhttp) {
				bad = append(bad, d)
			}
		}
		return bad
	}},
	{"the fingerprint engine (canonjson, surface) is the standard library's alone (and coded's), without I/O: it imports no proxy, no service, no other module", func(p pkg) []string {
		if !slices.Contains(engine, p.ImportPath) { // the two packages; surface/realworld is benchmark data, read from files
			return nil
		}
		var bad []string
		for _, d := range p.Deps {
			if !standard(d) && !slices.ContainsFunc(engineAllowed, func(e string) bool { return within(d, e) }) {
				bad = append(bad, d)
			}
		}
		for _, d := range p.Imports {
			if slices.Contains(noIO, d) {
				bad = append(bad, d+" (I/O)")
			}
		}
		return bad
	}},
}

// check returns every rule pkgs break, one line a package and rule.
func check(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if bad := r.violations(p); len(bad) > 0 {
				out = append(out, p.ImportPath+" breaks "+strings.TrimSpace(r.name)+": "+strings.Join(bad, ", "))
			}
		}
	}
	return out
}

// list is what the go command lists of every package of the module.
func list(t *testing.T) []pkg {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the boundaries test lists the module with the go command: put go on PATH (%v)", err)
	}
	cmd := exec.Command(goCmd, "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestBoundaries: no package of the module breaks a rule, and every
// package a rule names still exists (a rule about a package that moved
// would hold nothing).
func TestBoundaries(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list gave %d packages: is it listing the services module?", len(pkgs))
	}
	for _, name := range []string{session, stdio, streamhttp, canonjson, surface, coded} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == name }) {
			t.Errorf("a rule names %s, which the module no longer has: update the rule and docs/architecture.md", name)
		}
	}
	for _, v := range check(pkgs) {
		t.Error(v)
	}
}

// TestBoundariesCatch: each rule fires on the import it forbids, and not
// on what it allows.
func TestBoundariesCatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    pkg
		bad  bool
	}{
		{"session_imports_stdio", pkg{ImportPath: session, Deps: []string{stdio}}, true},
		{"session_imports_streamhttp", pkg{ImportPath: session, Deps: []string{streamhttp + "/x"}}, true},
		{"sessiontest_imports_stdio", pkg{ImportPath: session + "/sessiontest", Deps: []string{stdio}}, true},
		{"session_imports_jsonrpc", pkg{ImportPath: session, Deps: []string{module + "/proxy/internal/jsonrpc", surface}}, false},
		{"transport_imports_session", pkg{ImportPath: stdio, Deps: []string{session}}, false},
		{"surface_imports_proxy", pkg{ImportPath: surface, Deps: []string{module + "/proxy/internal/jsonrpc"}}, true},
		{"canonjson_imports_a_module", pkg{ImportPath: canonjson, Deps: []string{"github.com/cespare/xxhash/v2"}}, true},
		{"canonjson_imports_bus", pkg{ImportPath: canonjson, Deps: []string{module + "/internal/bus"}}, true},
		{"surface_does_io", pkg{ImportPath: surface, Imports: []string{"os"}, Deps: []string{"os"}}, true},
		{"realworld_reads_files", pkg{ImportPath: surface + "/realworld", Imports: []string{"os"}, Deps: []string{"os", surface}}, false},
		{"surface_imports_coded", pkg{ImportPath: surface, Imports: []string{coded, "fmt"}, Deps: []string{coded, canonjson, "fmt", "os"}}, false},
		{"service_imports_service", pkg{ImportPath: module + "/stack", Deps: []string{module + "/proxy/fleetscale"}}, true},
		{"service_imports_its_own", pkg{ImportPath: module + "/proxy", Deps: []string{module + "/proxy/internal/fleet", module + "/internal/bus"}}, false},
		{"shared_imports_service", pkg{ImportPath: module + "/internal/bus", Deps: []string{module + "/drift/internal/state"}}, true},
		{"shared_imports_shared", pkg{ImportPath: module + "/internal/policy", Deps: []string{module + "/internal/bus"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := check([]pkg{tc.p})
			if (len(got) > 0) != tc.bad {
				t.Fatalf("violations %q, want some: %v", got, tc.bad)
			}
		})
	}
}
