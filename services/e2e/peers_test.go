package e2e

// End-to-end tests with real MCP peers from npm: the reference servers
// (server-everything, server-filesystem) driven by real clients (the
// TypeScript SDK, the Go SDK, the inspector's CLI), once directly and once
// through the proxy, with the real fingerprint and drift commands behind it.
// The claim under test: everything an agent does directly works the same
// through the proxy.
//
// The harness has three parts that vary independently:
//   - a peer: how to start an upstream server and the agent session to run
//     against it (steps, each with the outcome it must have);
//   - a route: how a client reaches that upstream, given as an endpoint
//     (directly, or through the proxy);
//   - a client: runs a session against an endpoint and returns a transcript.
//
// An endpoint is a stdio command line (the client starts the server) or a
// Streamable HTTP URL (the server runs on its own; the proxy route starts
// the proxy command in HTTP mode in front of it).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// The transports an endpoint can name.
const (
	transportStdio = "stdio"
	transportHTTP  = "http" // Streamable HTTP
)

// endpoint is how a client reaches an MCP server.
type endpoint struct {
	Transport string `json:"transport"`
	// stdio: the command line of the server process, and the environment
	// it needs beyond the client's own (variables NAME=value).
	Command []string `json:"command,omitempty"`
	Env     []string `json:"env,omitempty"`
	// http: the MCP endpoint's URL, and headers every request carries
	// (the TypeScript client's; the proxy's agent token).
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// outcome is what a step must yield, on every route.
type outcome int

const (
	resultOK    outcome = iota // a result (for tools/call: without isError)
	toolError                  // a tools/call result with isError: true
	protocolErr                // a JSON-RPC error (the client raises it)
)

func (o outcome) String() string {
	return [...]string{"a result", "a tool error", "a JSON-RPC error"}[o]
}

// step is one request of an agent session. Method and Params are what the
// client sends (through its SDK's method for it).
type step struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`

	want      outcome
	contains  string // text the result (or error) must contain
	inspector bool   // also run by the inspector CLI (one process per step)
}

// transcript is what a client saw: the initialize result (nil when the
// client does not expose it) and one record per step.
type transcript struct {
	Initialize json.RawMessage `json:"initialize,omitempty"`
	Steps      []stepRecord    `json:"steps"`
}

type stepRecord struct {
	Method string          `json:"method"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *stepError      `json:"error,omitempty"`
}

type stepError struct {
	Code    *int64 `json:"code"`
	Message string `json:"message"`
}

// client is an MCP client implementation the tests drive.
type client interface {
	name() string
	// run connects to ep, runs the steps it supports and returns what it
	// saw; roots are the client's roots (file URIs). It fails the test only
	// when it cannot run at all.
	run(t *testing.T, ep endpoint, roots []string, steps []step) transcript
	// supports reports whether the client runs the step.
	supports(s step) bool
}

// peer is a real upstream server and the session an agent runs against it.
type peer struct {
	name string // also the server id behind the proxy
	// start returns the endpoint of a server, given a directory of its own
	// (started for each session: a stdio server is a child of the client; an
	// HTTP server is started by start and stopped when the test ends).
	start func(t *testing.T, peers *npmPeers, dir string) endpoint
	// session returns the steps to run, given the same directory.
	session func(dir string) []step
	// reset prepares dir before each session; nil leaves it.
	reset func(t *testing.T, dir string)
	// roots the clients declare, given dir.
	roots func(dir string) []string
	// normalize rewrites what legitimately differs between two sessions.
	normalize []replacement
}

type replacement struct {
	re   *regexp.Regexp
	with string
}

// route says how a client reaches the upstream.
type route struct {
	name  string
	reach func(t *testing.T, up endpoint) endpoint
}

var direct = route{name: "direct", reach: func(_ *testing.T, up endpoint) endpoint { return up }}

// proxyRoute fronts the upstream with the proxy command, configured by its
// environment so that the command line is the proxy followed by the
// upstream's own (what a client configuration holds).
func proxyRoute(p *pipeline, serverID, outbox string) route {
	return proxyRouteTo(p.nc.ConnectedUrl(), serverID, outbox)
}

// proxyRouteTo is proxyRoute to the NATS server at natsURL.
func proxyRouteTo(natsURL, serverID, outbox string) route {
	return route{name: "proxy", reach: func(t *testing.T, up endpoint) endpoint {
		t.Helper()
		switch up.Transport {
		case transportStdio:
			return endpoint{
				Transport: transportStdio,
				Command:   append([]string{filepath.Join(build(t), "proxy")}, up.Command...),
				Env: append(slices.Clone(up.Env),
					"MCPDRIFT_SERVER_ID="+serverID,
					"MCPDRIFT_PROXY_ID=e2e-"+serverID,
					"MCPDRIFT_NATS_URL="+natsURL,
					"MCPDRIFT_OUTBOX_DIR="+outbox,
					"MCPDRIFT_FIRST_SIGHT_WAIT=1s",
				),
			}
		case transportHTTP:
			// The proxy command in HTTP mode in front of the server's URL.
			base := startHTTPProxy(t, natsURL, "e2e-"+serverID, "1s", serverID+"="+up.URL)
			return endpoint{Transport: transportHTTP, URL: base + "/" + serverID + "/mcp"}
		default:
			t.Fatalf("the proxy route has no %s transport", up.Transport)
			return endpoint{}
		}
	}}
}

// npmPeers is the directory scripts/deps.d/npm-peers.sh installs into.
type npmPeers struct{ dir string }

var (
	peersOnce sync.Once
	peersDir  string
	peersErr  error
)

// requirePeers returns the installed npm peers, or fails the test saying
// how to install them.
func requirePeers(t testing.TB) *npmPeers {
	t.Helper()
	peersOnce.Do(func() {
		peersDir = os.Getenv("MCPDRIFT_NPM_PEERS")
		if peersDir == "" {
			peersDir = filepath.Join("..", "..", ".data", "npm-peers")
		}
		if peersDir, peersErr = filepath.Abs(peersDir); peersErr != nil {
			return
		}
		if _, err := exec.LookPath("node"); err != nil {
			peersErr = fmt.Errorf("node is not on PATH (%v)", err)
			return
		}
		for _, pkg := range []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/server-everything",
			"@modelcontextprotocol/server-filesystem", "@modelcontextprotocol/inspector-cli", "@modelcontextprotocol/conformance"} {
			if _, err := os.Stat(filepath.Join(peersDir, "node_modules", pkg, "package.json")); err != nil {
				peersErr = fmt.Errorf("%s is not installed in %s", pkg, peersDir)
				return
			}
		}
	})
	if peersErr != nil {
		t.Fatalf("the npm MCP peers are missing: %v. Install them with scripts/deps.d/npm-peers.sh (make deps does), "+
			"or point MCPDRIFT_NPM_PEERS at an installation; go test -short skips these tests.", peersErr)
	}
	return &npmPeers{dir: peersDir}
}

// pkgDir is the installed package's directory.
func (n *npmPeers) pkgDir(pkg string) string { return filepath.Join(n.dir, "node_modules", pkg) }

// bin is the package's (first) bin entry, as a path.
func (n *npmPeers) bin(t testing.TB, pkg string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.pkgDir(pkg), "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Bin json.RawMessage }
	if err := json.Unmarshal(data, &meta); err != nil {
		t.Fatalf("%s/package.json: %v", pkg, err)
	}
	var one string
	if json.Unmarshal(meta.Bin, &one) != nil {
		var many map[string]string
		if err := json.Unmarshal(meta.Bin, &many); err != nil || len(many) == 0 {
			t.Fatalf("%s/package.json has no bin entry", pkg)
		}
		one = many[slices.Sorted(maps.Keys(many))[0]]
	}
	return filepath.Join(n.pkgDir(pkg), one)
}

// version is the installed package's version.
func (n *npmPeers) version(t *testing.T, pkg string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.pkgDir(pkg), "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version string }
	_ = json.Unmarshal(data, &meta)
	return meta.Version
}

func params(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// The reference servers and the sessions an agent runs against them.
var (
	everything = peer{
		name: "everything",
		start: func(t *testing.T, n *npmPeers, _ string) endpoint {
			return endpoint{Transport: transportStdio,
				Command: []string{"node", n.bin(t, "@modelcontextprotocol/server-everything"), "stdio"}}
		},
		session: func(dir string) []step {
			return []step{
				{Method: "tools/list", contains: `"get-sum"`, inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "echo", "arguments": map[string]any{"message": "hello through mcpdrift"}}),
					contains: "Echo: hello through mcpdrift", inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "get-sum", "arguments": map[string]any{"a": 2, "b": 40}}),
					contains: "is 42", inspector: true},
				// Invalid arguments: the server answers with a tool error.
				{Method: "tools/call", Params: params(map[string]any{"name": "get-sum", "arguments": map[string]any{"a": "two", "b": 40}}),
					want: toolError, contains: "Input validation error", inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "get-structured-content", "arguments": map[string]any{"location": "Chicago"}}),
					contains: "structuredContent"},
				{Method: "tools/call", Params: params(map[string]any{"name": "get-tiny-image", "arguments": map[string]any{}}),
					contains: `"image/png"`},
				// The server asks the client for its roots (a server-to-client
				// request) and lists them.
				{Method: "tools/call", Params: params(map[string]any{"name": "get-roots-list", "arguments": map[string]any{}}),
					contains: "URI: file://" + dir},
				{Method: "prompts/list", contains: `"args-prompt"`, inspector: true},
				{Method: "prompts/get", Params: params(map[string]any{"name": "args-prompt", "arguments": map[string]any{"city": "Lisbon", "state": "Lisboa"}}),
					contains: "Lisbon, Lisboa", inspector: true},
				{Method: "resources/list", contains: "demo://resource/static/document/instructions.md"},
				{Method: "resources/templates/list", contains: "demo://resource/dynamic/text/{resourceId}"},
				{Method: "resources/read", Params: params(map[string]any{"uri": "demo://resource/static/document/features.md"}),
					contains: "features.md", inspector: true},
				{Method: "resources/read", Params: params(map[string]any{"uri": "demo://resource/dynamic/text/7"}),
					contains: "Resource 7: This is a plaintext resource"},
				{Method: "completion/complete", Params: params(map[string]any{"ref": map[string]any{"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
					"argument": map[string]any{"name": "resourceId", "value": "3"}}), contains: `"3"`},
				// A method the server does not have: a JSON-RPC error.
				{Method: "completion/complete", Params: params(map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "no-such-prompt"},
					"argument": map[string]any{"name": "x", "value": "y"}}), want: protocolErr, contains: "no-such-prompt"},
				{Method: "ping"},
			}
		},
		roots: func(dir string) []string { return []string{"file://" + dir} },
		// Dynamic resources carry the time they were made (toLocaleTimeString).
		normalize: []replacement{{regexp.MustCompile(`created at \d{1,2}:\d{2}:\d{2}(\s?[AP]M)?`), "created at <time>"}},
	}

	// everythingHTTP is server-everything in its Streamable HTTP mode
	// (sessions, SSE answers, a GET stream, resumable events), with the same
	// session as on stdio.
	everythingHTTP = peer{
		name: "everything-http",
		start: func(t *testing.T, n *npmPeers, _ string) endpoint {
			return endpoint{Transport: transportHTTP, URL: startEverythingHTTP(t, n)}
		},
		session:   everything.session,
		roots:     everything.roots,
		normalize: everything.normalize,
	}

	filesystem = peer{
		name: "filesystem",
		start: func(t *testing.T, n *npmPeers, dir string) endpoint {
			return endpoint{Transport: transportStdio,
				Command: []string{"node", n.bin(t, "@modelcontextprotocol/server-filesystem"), dir}}
		},
		session: func(dir string) []step {
			note := filepath.Join(dir, "note.txt")
			return []step{
				{Method: "tools/list", contains: `"list_allowed_directories"`, inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "list_allowed_directories", "arguments": map[string]any{}}),
					contains: dir, inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "write_file", "arguments": map[string]any{"path": note, "content": "first line\nsecond line\n"}}),
					contains: "Successfully wrote", inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": note}}),
					contains: `first line\nsecond line`, inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "edit_file", "arguments": map[string]any{"path": note,
					"edits": []map[string]string{{"oldText": "second line", "newText": "edited through mcpdrift"}}}}),
					contains: "+edited through mcpdrift"},
				{Method: "tools/call", Params: params(map[string]any{"name": "list_directory", "arguments": map[string]any{"path": dir}}),
					contains: "[FILE] note.txt"},
				// Outside the allowed directory: the server refuses with a tool error.
				{Method: "tools/call", Params: params(map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": "/etc/hostname"}}),
					want: toolError, contains: "Access denied", inspector: true},
				{Method: "tools/call", Params: params(map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": filepath.Join(dir, "missing.txt")}}),
					want: toolError, contains: "ENOENT"},
				// The server has no prompts: a JSON-RPC error.
				{Method: "prompts/list", want: protocolErr, contains: "Method not found"},
				{Method: "ping"},
			}
		},
		reset: func(t *testing.T, dir string) {
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		},
		// The server replaces its allowed directories with the client's roots:
		// the same directory, so every route sees the same.
		roots: func(dir string) []string { return []string{"file://" + dir} },
	}
)

// startEverythingHTTP runs server-everything's Streamable HTTP transport
// (`index.js streamableHttp`, port from PORT) on a free port until the test
// ends, and returns its MCP endpoint on the loopback address.
func startEverythingHTTP(t testing.TB, n *npmPeers) string {
	t.Helper()
	bin := n.bin(t, "@modelcontextprotocol/server-everything")
	for try := 1; ; try++ {
		port := freePort(t)
		cmd := exec.Command("node", bin, "streamableHttp")
		cmd.Env = append(os.Environ(), "PORT="+port)
		// It logs every request on stdout; only stderr says it listens.
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		listening, scanned := make(chan bool, 1), make(chan struct{})
		tail := new(stderrTail)
		go func() {
			defer close(scanned)
			sc := bufio.NewScanner(stderr)
			said := false
			for sc.Scan() {
				fmt.Fprintln(tail, sc.Text())
				if !said && strings.Contains(sc.Text(), "listening on port") {
					said = true
					listening <- true
				}
			}
			if !said {
				listening <- false
			}
		}()
		stop := func() {
			_ = cmd.Process.Signal(os.Interrupt) // it exits 0 on SIGINT
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			<-scanned
		}
		select {
		case ok := <-listening:
			if ok {
				t.Cleanup(stop)
				return "http://127.0.0.1:" + port + "/mcp"
			}
		case <-time.After(30 * time.Second):
		}
		stop()
		// The port was taken between freePort and the server's listen.
		if try == 3 {
			t.Fatalf("server-everything (streamableHttp) did not start listening:\n%s", tail)
		}
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	return strconv.Itoa(natsFreePorts(t, 1)[0])
}

// TestPeers runs the same agent session against each real server directly
// and through the proxy, with each real client, and requires the same
// transcript both ways (after normalizing only what legitimately differs
// between two sessions: see peer.normalize). Each step must also have the
// outcome it is written for, so a session that fails both ways fails.
//
// Before the proxied session, the server's listing for that client must be
// verified: a client's first sight of a server is a new listing variant,
// baselined by the drift service (discovery posture), and until then the
// proxy withholds it (fail closed). waitServed waits for it with the client
// itself.
func TestPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real MCP servers and clients from npm, and the service commands")
	}
	n := requirePeers(t)
	for _, pkg := range []string{"server-everything", "server-filesystem", "sdk", "inspector-cli"} {
		t.Logf("@modelcontextprotocol/%s@%s", pkg, n.version(t, "@modelcontextprotocol/"+pkg))
	}
	p := startPipeline(t)
	clients := []client{tsClient{n}, goClient{}, inspectorClient{n}}
	for _, pr := range []peer{everything, everythingHTTP, filesystem} {
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel() // the servers are independent; most of a session is waiting
			via := proxyRoute(p, pr.name, t.TempDir())
			for _, c := range clients {
				t.Run(c.name(), func(t *testing.T) {
					// A directory of its own per client: the path shows in
					// results, so it is the same for the two routes.
					dir := t.TempDir()
					if resolved, err := filepath.EvalSymlinks(dir); err == nil {
						dir = resolved
					}
					var roots []string
					if pr.roots != nil {
						roots = pr.roots(dir)
					}
					var steps []step
					for _, s := range pr.session(dir) {
						if c.supports(s) {
							steps = append(steps, s)
						}
					}
					session := func(r route) transcript {
						t.Helper()
						if pr.reset != nil {
							pr.reset(t, dir)
						}
						tr := c.run(t, r.reach(t, pr.start(t, n, dir)), roots, steps)
						checkOutcomes(t, r.name, steps, tr)
						return normalize(tr, pr.normalize)
					}
					want := session(direct)
					waitServed(t, c, via.reach(t, pr.start(t, n, dir)), roots, want)
					got := session(via)
					if d := diff(want, got); d != "" {
						t.Errorf("through the proxy, %s saw something else than directly (- direct, + proxy):\n%s", c.name(), d)
					}
				})
			}
			// No session raised drift: every listing variant the clients
			// produced is verified.
			checkAllVerified(t, p, "default", pr.name)
		})
	}
}

// waitServed runs the client's tools/list through the proxy until it lists
// what the client listed directly: the verdict on this client's listing
// variant has arrived. Bounded; the failure says what was listed last.
func waitServed(t *testing.T, c client, ep endpoint, roots []string, direct transcript) {
	t.Helper()
	want := toolNames(direct.Steps[0])
	start := time.Now()
	try := 0
	poll.Eventually(t, 60*time.Second, func() error {
		try++
		tr := c.run(t, ep, roots, []step{{Method: "tools/list"}})
		got := toolNames(tr.Steps[0])
		t.Logf("try %d after %s: %d tools", try, time.Since(start), len(got))
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: the proxy does not serve the server's tools (no verified verdict?): listed %q, want %q", c.name(), got, want)
		}
		return nil
	})
}

func toolNames(r stepRecord) []string {
	if r.Method != "tools/list" {
		panic("toolNames of " + r.Method)
	}
	var res struct{ Tools []struct{ Name string } }
	_ = json.Unmarshal(r.Result, &res)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// checkOutcomes requires each step to have the outcome it is written for.
func checkOutcomes(t *testing.T, routeName string, steps []step, tr transcript) {
	t.Helper()
	if len(tr.Steps) != len(steps) {
		t.Fatalf("%s: %d steps recorded, want %d", routeName, len(tr.Steps), len(steps))
	}
	for i, s := range steps {
		r := tr.Steps[i]
		var got outcome
		var text string
		switch {
		case r.Error != nil:
			got, text = protocolErr, r.Error.Message
		case r.Result != nil:
			got, text = resultOK, string(r.Result)
			var res struct{ IsError bool }
			if json.Unmarshal(r.Result, &res) == nil && res.IsError {
				got = toolError
			}
		default:
			t.Errorf("%s: step %d (%s): neither result nor error", routeName, i, s.Method)
			continue
		}
		if got != s.want || !strings.Contains(text, s.contains) {
			t.Errorf("%s: step %d (%s %s): got %s, want %s containing %q; got: %.600s", routeName, i, s.Method, s.Params, got, s.want, s.contains, text)
		}
	}
}

// normalize rewrites strings everywhere in the transcript.
func normalize(tr transcript, reps []replacement) transcript {
	if len(reps) == 0 {
		return tr
	}
	rewrite := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return nil
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return raw
		}
		out, _ := json.Marshal(walkStrings(v, func(s string) string {
			for _, r := range reps {
				s = r.re.ReplaceAllString(s, r.with)
			}
			return s
		}))
		return out
	}
	out := transcript{Initialize: rewrite(tr.Initialize)}
	for _, s := range tr.Steps {
		s.Result = rewrite(s.Result)
		out.Steps = append(out.Steps, s)
	}
	return out
}

func walkStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case []any:
		for i := range x {
			x[i] = walkStrings(x[i], f)
		}
	case map[string]any:
		for k := range x {
			x[k] = walkStrings(x[k], f)
		}
	}
	return v
}

// diff returns "" when the transcripts are equal as JSON values, else the
// first differing lines of their indented forms with some context.
func diff(a, b transcript) string {
	ia, ib := indent(a), indent(b)
	if ia == ib {
		return ""
	}
	la, lb := strings.Split(ia, "\n"), strings.Split(ib, "\n")
	i := 0
	for i < len(la) && i < len(lb) && la[i] == lb[i] {
		i++
	}
	var out strings.Builder
	from := max(0, i-6)
	for _, l := range la[from:i] {
		fmt.Fprintf(&out, "  %s\n", l)
	}
	for _, l := range la[i:min(len(la), i+8)] {
		fmt.Fprintf(&out, "- %s\n", l)
	}
	for _, l := range lb[i:min(len(lb), i+8)] {
		fmt.Fprintf(&out, "+ %s\n", l)
	}
	return out.String()
}

// indent renders a transcript as indented JSON with sorted keys: the
// clients hand over parsed values, whose member order is the client's.
func indent(tr transcript) string {
	raw, err := json.Marshal(tr)
	if err != nil {
		return err.Error()
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err.Error()
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

// checkAllVerified requires every status record of the server to be
// verified.
func checkAllVerified(t *testing.T, p *pipeline, tenant, server string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeysFiltered(ctx, bus.StatusKey(tenant, server, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("status %s: %v", key, err)
		}
		var rec struct{ Status string }
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatalf("status %s: %v: %s", key, err, e.Value())
		}
		if !strings.EqualFold(strings.TrimPrefix(rec.Status, "STATUS_"), "verified") {
			t.Errorf("status %s is %s after the sessions, want verified: %s", key, rec.Status, e.Value())
		}
		n++
	}
	if n == 0 {
		t.Errorf("no status record for server %s", server)
	}
}

// stderrTail keeps the last bytes written to it (a child's stderr, shown when a
// session cannot run).
type stderrTail struct {
	mu  sync.Mutex
	buf []byte
}

func (w *stderrTail) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if len(w.buf) > 8<<10 {
		w.buf = w.buf[len(w.buf)-8<<10:]
	}
	return len(b), nil
}

func (w *stderrTail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.TrimSpace(w.buf))
}
