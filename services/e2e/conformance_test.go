package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
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
// client, each directly and through the proxy command on the real pipeline,
// in the node scripts/deps.d/node.sh pins (the suite needs node 22 or
// later). The proxy is transparent when the set of scenarios that pass
// through it is the set that passes directly: TestConformance fails on each
// scenario that passes one way only, by name. docs/transparency.md has the
// table.

// conformanceOutcome is one scenario's checks in one run, by status, and
// what the failures and warnings said (for the log).
type conformanceOutcome struct {
	passed, failed, warnings int
	said                     []string
}

// ok is whether the scenario passed: no check failed (the suite's own
// verdict; warnings are SHOULDs).
func (o conformanceOutcome) ok() bool { return o.failed == 0 }

// conformanceRun is the outcome of one run of the suite, by scenario.
type conformanceRun map[string]conformanceOutcome

// passed lists the scenarios that passed, sorted.
func (r conformanceRun) passed() []string {
	var out []string
	for s, o := range r {
		if o.ok() {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// warnings is the number of warnings of all the scenarios.
func (r conformanceRun) warnings() int {
	n := 0
	for _, o := range r {
		n += o.warnings
	}
	return n
}

// conformanceResultDir matches the directory (relative to -o) the suite
// writes a scenario's checks.json into: "server-tools-list-2026-12-06T12-39-20-852Z"
// for a server scenario, "initialize-..." or "auth/metadata-default-..."
// for a client one.
var conformanceResultDir = regexp.MustCompile(`^(?:server-)?(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$`)

// runConformance runs the suite's CLI with args, in a directory of its
// own, and reads each scenario's checks from the results it writes there
// (-o). A scenario that wrote no results failed (the CLI died or timed
// out; its output is logged).
func runConformance(t *testing.T, c *conformance, env []string, args ...string) conformanceRun {
	t.Helper()
	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	cmd := exec.Command(c.node, append([]string{c.cli}, append(args, "-o", results)...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput() // exit 1 when a scenario fails: its checks say which
	byDir := map[string]conformanceOutcome{}
	_ = filepath.WalkDir(results, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return nil
		}
		rel, _ := filepath.Rel(results, filepath.Dir(path))
		m := conformanceResultDir.FindStringSubmatch(filepath.ToSlash(rel))
		data, rerr := os.ReadFile(path)
		var checks []struct{ ID, Status, ErrorMessage string }
		if m == nil || rerr != nil || json.Unmarshal(data, &checks) != nil {
			return nil
		}
		var o conformanceOutcome
		for _, ch := range checks {
			switch ch.Status {
			case "SUCCESS":
				o.passed++
			case "FAILURE":
				o.failed++
			case "WARNING":
				o.warnings++
			}
			if ch.Status == "FAILURE" || ch.Status == "WARNING" {
				o.said = append(o.said, ch.ID+" "+ch.Status+": "+ch.ErrorMessage)
			}
		}
		byDir[m[1]] = o
		return nil
	})
	run := conformanceRun{}
	var names []string
	if i := slices.Index(args, "--scenario"); i >= 0 && i+1 < len(args) {
		names = []string{args[i+1]}
	} else {
		names = c.scenarios(t, "--"+args[0])
	}
	for _, s := range names {
		o, found := byDir[s]
		if !found {
			o = conformanceOutcome{failed: 1}
			t.Logf("conformance %s wrote no results for %s (%v):\n%s", strings.Join(args, " "), s, err, out)
		}
		run[s] = o
	}
	return run
}

// conformance is the installed suite and the node it runs in.
type conformance struct {
	node, cli string // the pinned node (scripts/deps.d/node.sh) and the suite's CLI
	peers     *npmPeers
	lists     map[string][]string
}

// requireConformance returns the suite of the npm peers and the pinned
// node (MCPDRIFT_NODE, default .data/node: scripts/deps.d/node.sh), or fails
// saying how to install them. The suite needs node 22 or later; the
// machine's node may be older.
func requireConformance(t *testing.T) *conformance {
	t.Helper()
	n := requirePeers(t)
	dir := os.Getenv("MCPDRIFT_NODE")
	if dir == "" {
		dir = filepath.Join("..", "..", ".data", "node")
	}
	node := mustAbs(t, filepath.Join(dir, "bin", "node"))
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("the pinned node is missing (%v). Install it with scripts/deps.d/node.sh (make deps does), "+
			"or point MCPDRIFT_NODE at a directory with bin/node (22 or later); go test -short skips this test.", err)
	}
	return &conformance{node: node, cli: filepath.Join(n.pkgDir("@modelcontextprotocol/conformance"), "dist", "index.js"),
		peers: n, lists: map[string][]string{}}
}

// scenarios lists the suite's scenarios of a kind ("--client" or
// "--server"), every one, pending ones included ("- name [spec versions]").
func (c *conformance) scenarios(t *testing.T, kind string) []string {
	t.Helper()
	if l, ok := c.lists[kind]; ok {
		return l
	}
	out, err := exec.Command(c.node, c.cli, "list", kind).Output()
	if err != nil {
		t.Fatalf("conformance list %s: %v", kind, err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "- ")); strings.HasPrefix(strings.TrimSpace(line), "- ") && len(f) > 0 {
			names = append(names, f[0])
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list %s listed nothing:\n%s", kind, out)
	}
	c.lists[kind] = names
	return names
}

// startConformanceServer runs testdata/conformance-server.cjs (the suite's
// server scenarios implemented on the TypeScript SDK of the npm peers) in
// the pinned node until the test ends and returns its endpoint.
func startConformanceServer(t *testing.T, c *conformance) string {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(c.node, "testdata/conformance-server.cjs", c.peers.dir, port)
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

// TestConformance runs the suite's server scenarios (every one, pending
// ones included: --suite all) against two real servers (the reference
// server-everything, and the suite's scenarios on the TypeScript SDK) and
// its client scenarios (every one, authorization, drafts and extensions
// included) with a client on the TypeScript SDK, each directly and through
// the proxy, in the pinned node. It requires the same scenarios to pass
// both ways, with no more warnings through the proxy than directly. About
// 3 minutes.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite against real servers and the proxy command")
	}
	c := requireConformance(t)
	n := c.peers
	p := startPipeline(t)
	natsURL := p.nc.ConnectedUrl()
	servers := map[string]string{
		"ts-sdk":     startConformanceServer(t, c),
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
			direct:  runConformance(t, c, nil, "server", "--suite", "all", "--url", u),
			proxied: runConformance(t, c, nil, "server", "--suite", "all", "--url", px+"/"+id+"/mcp"),
		}
	}
	client := c.node + " " + filepath.Join(mustAbs(t, "testdata"), "conformance-client.cjs") + " " + n.dir
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
	for _, s := range c.scenarios(t, "--client") {
		cl.direct[s] = runConformance(t, c, nil, "client", "--scenario", s, "--command", client)[s]
		cl.proxied[s] = runConformance(t, c, proxyEnv, "client", "--scenario", s, "--command", client)[s]
	}
	groups["client"] = cl

	// A scenario that differs is run once more both ways (the machine may
	// be loaded): what differs twice is reported, and what differed once
	// is logged.
	rerun := func(g, s string, env []string) conformanceOutcome {
		if g == "client" {
			return runConformance(t, c, env, "client", "--scenario", s, "--command", client)[s]
		}
		u := servers[strings.TrimPrefix(g, "server/")]
		if env != nil {
			u = px + "/" + strings.TrimPrefix(g, "server/") + "/mcp"
		}
		return runConformance(t, c, nil, "server", "--url", u, "--scenario", s)[s]
	}
	for g, r := range groups {
		for _, s := range unionKeys(r.direct, r.proxied) {
			if differs(r.direct[s], r.proxied[s]) {
				d, pr := rerun(g, s, nil), rerun(g, s, proxyEnv)
				t.Logf("%s: %s differed (direct %+v, through the proxy %+v); again: direct %+v, through the proxy %+v",
					g, s, r.direct[s], r.proxied[s], d, pr)
				if !differs(d, pr) {
					r.direct[s], r.proxied[s] = d, pr
				}
			}
		}
	}

	// server-sse-polling as a 2025-11-25 client runs it (the suite's own
	// request declares 2025-03-26, for which the SDK makes no stream
	// resumable): the stream closed mid-call, the answer after the client
	// comes back with Last-Event-ID, both ways.
	for _, via := range []struct{ name, url string }{{"directly", servers["ts-sdk"]}, {"through the proxy", px + "/ts-sdk/mcp"}} {
		if err := sseResumption(via.url); err != nil {
			t.Errorf("server/ts-sdk: resuming a closed stream %s: %v", via.name, err)
		}
	}

	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		r := groups[g]
		t.Logf("%-18s direct %2d/%2d passed (%d warnings), through the proxy %2d/%2d passed (%d warnings)", g,
			len(r.direct.passed()), len(r.direct), r.direct.warnings(), len(r.proxied.passed()), len(r.proxied), r.proxied.warnings())
		for _, s := range unionKeys(r.direct, r.proxied) {
			d, pr := r.direct[s], r.proxied[s]
			if !d.ok() {
				t.Logf("%s: %s fails directly (%+v; through the proxy %+v)", g, s, d, pr)
			}
			switch {
			case d.ok() && !pr.ok():
				t.Errorf("%s: %s passes directly but not through the proxy (%+v)", g, s, pr)
			case pr.ok() && !d.ok() && proxyAdds[s]:
				t.Logf("%s: %s passes through the proxy only: the proxy adds it (proxyAdds)", g, s)
			case pr.ok() && !d.ok():
				t.Errorf("%s: %s passes through the proxy but not directly", g, s)
			case d.ok() && pr.warnings > d.warnings:
				t.Errorf("%s: %s warns more through the proxy (%d) than directly (%d)", g, s, pr.warnings, d.warnings)
			}
		}
	}
}

// differs is whether a scenario's outcomes directly and through the proxy
// differ: one passes and the other does not, or the proxy adds warnings.
func differs(direct, proxied conformanceOutcome) bool {
	return direct.ok() != proxied.ok() || proxied.warnings > direct.warnings
}

// proxyAdds are the scenarios the proxy makes pass for a server that fails
// them, on purpose:
//   - dns-rebinding-protection: the proxy's listener refuses a foreign Host
//     itself (--allowed-hosts);
//   - server-sse-polling, for a server without the scenario's
//     test_reconnection tool (server-everything): the proxy refuses the call
//     of a tool the server never listed itself (tool_not_approved, a tool
//     error in a JSON body), where the server answers its own tool error on
//     an SSE stream; the suite fails the server's error and counts a JSON
//     answer as not applicable.
var proxyAdds = map[string]bool{"dns-rebinding-protection": true, "server-sse-polling": true}

// sseResumption runs the exchange of server-sse-polling against the
// conformance server at u as a 2025-11-25 client: test_reconnection's
// stream must start with a priming event (an id and a retry field) and
// close without the answer, and a GET with that Last-Event-ID must bring
// the answer.
func sseResumption(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sid := ""
	do := func(method, body, lastEventID string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		res, err := http.DefaultClient.Do(req)
		if err == nil && res.StatusCode/100 != 2 {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			return nil, fmt.Errorf("%s answered %s: %s", method, res.Status, b)
		}
		return res, err
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpdrift-e2e","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
	} {
		res, err := do("POST", body, "")
		if err != nil {
			return err
		}
		if sid == "" {
			sid = res.Header.Get("Mcp-Session-Id")
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	res, err := do("POST", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_reconnection","arguments":{}}}`, "")
	if err != nil {
		return err
	}
	b, err := io.ReadAll(res.Body) // the server closes it mid-call
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the call's stream: %v", err)
	}
	lastID, retry := "", false
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "id:"); ok {
			lastID = strings.TrimSpace(v)
		}
		retry = retry || strings.HasPrefix(line, "retry:")
	}
	if lastID == "" || !retry || strings.Contains(string(b), `"id":2`) {
		return fmt.Errorf("the call's stream is not a priming event (an id, a retry field) closed before the answer: %q", b)
	}
	res, err = do("GET", "", lastID)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok && strings.Contains(data, `"id":2`) && strings.Contains(data, "Reconnection test completed") {
			return nil
		}
	}
	return fmt.Errorf("the GET with Last-Event-ID %s ended without the call's answer (%v)", lastID, sc.Err())
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
