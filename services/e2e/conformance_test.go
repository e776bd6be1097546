package e2e

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned in scripts/npm-peers) run against real servers and with a real
// client, each directly and through the proxy command on the real pipeline.
// The proxy is transparent when the set of scenarios that pass through it
// is the set that passes directly: TestConformance fails on each scenario
// that passes one way only, by name. docs/transparency.md has the table.

// conformanceSummary matches a scenario's line of the suite's summary:
// "✓ tools-call-sampling: 1 passed, 0 failed".
var conformanceSummary = regexp.MustCompile(`^([✓✗]) (\S+): (\d+) passed, (\d+) failed`)

// conformanceResult matches the result line of a run of one scenario:
// "Passed: 5/5, 0 failed, 0 warnings".
var conformanceResult = regexp.MustCompile(`^Passed: (\d+)/(\d+), (\d+) failed`)

// conformanceRun is the outcome of one run of the suite: each scenario's
// name and whether it passed.
type conformanceRun map[string]bool

// passed lists the scenarios that passed, sorted.
func (r conformanceRun) passed() []string {
	var out []string
	for s, ok := range r {
		if ok {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// runConformance runs the suite's CLI with args (in a directory of its own,
// where it writes its results) and reads the summary it prints.
func runConformance(t *testing.T, n *npmPeers, env []string, args ...string) conformanceRun {
	t.Helper()
	cli := filepath.Join(n.pkgDir("@modelcontextprotocol/conformance"), "dist", "index.js")
	cmd := exec.Command("node", append([]string{cli}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput() // exit 1 when a scenario fails: the summary says which
	run := conformanceRun{}
	scenario := ""
	if i := slices.Index(args, "--scenario"); i >= 0 && i+1 < len(args) {
		scenario = args[i+1]
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if m := conformanceSummary.FindStringSubmatch(line); m != nil && scenario == "" {
			run[m[2]] = m[1] == "✓" && m[4] == "0"
		}
		if m := conformanceResult.FindStringSubmatch(line); m != nil && scenario != "" {
			run[scenario] = m[1] != "0" && m[3] == "0"
		}
	}
	if scenario != "" && strings.Contains(string(out), "OVERALL: FAILED") {
		run[scenario] = false
	}
	if len(run) == 0 {
		t.Fatalf("conformance %s printed no summary (%v):\n%s", strings.Join(args, " "), err, out)
	}
	return run
}

// startConformanceServer runs testdata/conformance-server.cjs (the suite's
// server scenarios implemented on the TypeScript SDK) until the test ends
// and returns its endpoint.
func startConformanceServer(t *testing.T, n *npmPeers) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command("node", "testdata/conformance-server.cjs", n.dir, port)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening, scanned := make(chan bool, 1), make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		said := false
		for sc.Scan() {
			if !said && sc.Text() == "listening" {
				said = true
				listening <- true
			}
		}
		if !said {
			listening <- false
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-scanned
	})
	select {
	case ok := <-listening:
		if !ok {
			t.Fatal("the conformance server exited before it listened")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the conformance server did not listen within 30s")
	}
	return "http://127.0.0.1:" + port + "/mcp"
}

// TestConformance runs the suite's server scenarios against two real
// servers (the reference server-everything, and the suite's scenarios on
// the TypeScript SDK) and its client scenarios (the whole "all" suite,
// authorization included) with a client on the TypeScript SDK, each
// directly and through the proxy, and requires the same scenarios to pass
// both ways. About 40 s.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite against real servers and the proxy command")
	}
	n := requirePeers(t)
	p := startPipeline(t)
	natsURL := p.nc.ConnectedUrl()
	servers := map[string]string{
		"ts-sdk":     startConformanceServer(t, n),
		"everything": startEverythingHTTP(t, n),
	}
	ups := []string{}
	for id, u := range servers {
		ups = append(ups, id+"="+u)
	}
	slices.Sort(ups)
	px := startHTTPProxy(t, natsURL, "conformance-servers", "10s", ups...)

	type pair struct{ direct, proxied conformanceRun }
	groups := map[string]pair{}
	for id, u := range servers {
		groups["server/"+id] = pair{
			direct:  runConformance(t, n, nil, "server", "--url", u),
			proxied: runConformance(t, n, nil, "server", "--url", px+"/"+id+"/mcp"),
		}
	}
	client := "node " + filepath.Join(mustAbs(t, "testdata"), "conformance-client.cjs") + " " + n.dir
	viaProxy, err := json.Marshal(map[string]any{"bin": filepath.Join(build(t), "proxy"), "args": []string{
		"--listen", "127.0.0.1:0", "--outbox-dir", t.TempDir(), "--nats-url", natsURL,
		"--proxy-id", "conformance-client", "--first-sight-wait", "10s"}})
	if err != nil {
		t.Fatal(err)
	}
	proxyEnv := []string{"MCPDRIFT_CONFORMANCE_PROXY=" + string(viaProxy)}
	// One scenario at a time: the suite's parallel run makes timing checks
	// (sse-retry) fail on a loaded machine, directly as well.
	cl := pair{direct: conformanceRun{}, proxied: conformanceRun{}}
	for _, s := range conformanceScenarios(t, n, "--client") {
		cl.direct[s] = runConformance(t, n, nil, "client", "--scenario", s, "--command", client)[s]
		cl.proxied[s] = runConformance(t, n, proxyEnv, "client", "--scenario", s, "--command", client)[s]
	}
	groups["client"] = cl

	// A scenario that fails one way only is run once more both ways (the
	// machine may be loaded): what differs twice is reported, and what
	// differed once is logged.
	rerun := func(g, s string, env []string) bool {
		if g == "client" {
			return runConformance(t, n, env, "client", "--scenario", s, "--command", client)[s]
		}
		u := servers[strings.TrimPrefix(g, "server/")]
		if env != nil {
			u = px + "/" + strings.TrimPrefix(g, "server/") + "/mcp"
		}
		return runConformance(t, n, nil, "server", "--url", u, "--scenario", s)[s]
	}
	for g, r := range groups {
		for _, s := range unionKeys(r.direct, r.proxied) {
			if r.direct[s] != r.proxied[s] {
				d, pr := rerun(g, s, nil), rerun(g, s, proxyEnv)
				t.Logf("%s: %s differed (direct %v, through the proxy %v); again: direct %v, through the proxy %v", g, s, r.direct[s], r.proxied[s], d, pr)
				r.direct[s], r.proxied[s] = r.direct[s] || d, r.proxied[s] && pr
			}
		}
	}

	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		r := groups[g]
		t.Logf("%-18s direct %2d/%2d passed, through the proxy %2d/%2d passed", g,
			len(r.direct.passed()), len(r.direct), len(r.proxied.passed()), len(r.proxied))
		for _, s := range unionKeys(r.direct, r.proxied) {
			d, pr := r.direct[s], r.proxied[s]
			switch {
			case d && !pr:
				t.Errorf("%s: %s passes directly but not through the proxy", g, s)
			case pr && !d && proxyAdds[s]:
				t.Logf("%s: %s passes through the proxy only: the proxy adds it (proxyAdds)", g, s)
			case pr && !d:
				t.Errorf("%s: %s passes through the proxy but not directly", g, s)
			}
		}
	}
}

// proxyAdds are the scenarios the proxy makes pass for a server that fails
// them: dns-rebinding-protection, since the proxy's listener refuses a
// foreign Host itself (--allowed-hosts).
var proxyAdds = map[string]bool{"dns-rebinding-protection": true}

// conformanceScenarios lists the suite's scenarios of a kind ("--client"
// or "--server").
func conformanceScenarios(t *testing.T, n *npmPeers, kind string) []string {
	t.Helper()
	cli := filepath.Join(n.pkgDir("@modelcontextprotocol/conformance"), "dist", "index.js")
	out, err := exec.Command("node", cli, "list", kind).Output()
	if err != nil {
		t.Fatalf("conformance list %s: %v", kind, err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list %s listed nothing:\n%s", kind, out)
	}
	return names
}

func unionKeys(a, b conformanceRun) []string {
	all := conformanceRun{}
	maps.Copy(all, a)
	maps.Copy(all, b)
	return slices.Sorted(maps.Keys(all))
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
