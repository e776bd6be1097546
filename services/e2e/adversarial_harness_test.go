package e2e

// The adversarial suite's harness. The rule under test (docs/threat-model,
// issue 12): what the proxy hashes is exactly what the agent reads, and
// nothing the proxy did not judge reaches the agent. Each case runs a
// hostile upstream of its own (adversarial_upstream_test.go) behind the real
// proxy command on the real pipeline (NATS, fingerprint, drift; one pipeline
// for every case, a server id per case), with a real agent (the official
// TypeScript SDK client, testdata/ts-agent.cjs, or the Go SDK client). A
// case first has its approved surface served (trust on first use), then
// attacks; afterwards, whatever the case, the agent must never have been
// delivered anything carrying the hostile marker, and no hostile call may
// have reached the upstream.
//
// Cases run concurrently on a pool of their own (the machines are small and
// most of a case is waiting), each reported as its own subtest.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// advParallel is how many cases run at once.
const advParallel = 8

// advCaseTimeout bounds one case.
const advCaseTimeout = 75 * time.Second

// Transports of a case.
const (
	advStdio     = "stdio"
	advHTTP      = "http"      // Streamable HTTP with sessions
	advStateless = "stateless" // Streamable HTTP, the server keeps no session
	advSSE       = "sse"       // HTTP+SSE (2024-11-05)
)

// advCase is one attack.
type advCase struct {
	name      string
	transport string
	client    string // "ts" or "go"
	class     string
	// caps are what the agent declares (roots, sampling, elicitation).
	caps []string
	// callOnChange: the agent calls this tool as soon as it hears
	// tools/list_changed.
	callOnChange string
	// setup prepares the upstream before anything connects.
	setup func(u *upstream)
	// run is the attack; the agent is connected with its approved surface
	// served unless noBaseline.
	run        func(x *advRun)
	noBaseline bool
}

// advEnv is what every case shares.
type advEnv struct {
	natsURL   string
	js        jetstream.JetStream
	adminURL  string
	peers     *npmPeers
	bin       string // the built commands
	driftctl  string
	stdioAddr string
	httpBase  string

	mu        sync.Mutex
	upstreams map[string]*upstream
}

const advAdminToken = "adv-write-token-0123456789"

// buildDriftctl returns the driftctl command, built once (cmdtest).
func buildDriftctl(tb testing.TB) string { return cmdtest.Path(tb, "driftctl") }

// startAdvEnv starts the pipeline every case shares; driftEnv is more
// environment for the drift service (its defaults otherwise).
func startAdvEnv(t *testing.T, driftEnv ...string) *advEnv {
	t.Helper()
	env := &advEnv{peers: requirePeers(t), upstreams: map[string]*upstream{}}
	env.bin = build(t)
	env.driftctl = buildDriftctl(t)
	b := natstest.StartBus(t)
	env.natsURL, env.js = b.Server.ClientURL(), b.JS
	admin := "127.0.0.1:" + freePort(t)
	env.adminURL = "http://" + admin
	svc := []string{"MCPDRIFT_NATS_URL=" + env.natsURL, "MCPDRIFT_LOG_LEVEL=info"}
	runService(t, "fingerprint", svc...)
	runService(t, "drift", append(append(svc, "MCPDRIFT_ADMIN_ADDR="+admin, "MCPDRIFT_ADMIN_TOKENS=adv:write:"+advAdminToken), driftEnv...)...)

	// The stdio relays connect here and name their upstream.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	env.stdioAddr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				hello, err := r.ReadString('\n')
				name, ok := strings.CutPrefix(strings.TrimSpace(hello), "ADV ")
				if err != nil || !ok {
					c.Close()
					return
				}
				env.mu.Lock()
				u := env.upstreams[name]
				env.mu.Unlock()
				if u == nil {
					c.Close()
					return
				}
				u.serveStdio(c, r)
			}()
		}
	}()

	// The HTTP upstreams: /<name>/mcp, /<name>/sse, /<name>/messages.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		env.mu.Lock()
		u := env.upstreams[name]
		env.mu.Unlock()
		if u == nil {
			http.NotFound(w, r)
			return
		}
		u.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	env.httpBase = srv.URL
	return env
}

// caseT collects what a case reports; the case's subtest replays it.
type caseT struct {
	name     string
	mu       sync.Mutex
	logs     []string
	errs     []string
	cleanups []func()
}

func (c *caseT) Logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logs = append(c.logs, fmt.Sprintf(format, args...))
}

func (c *caseT) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// Fatalf ends the case (it runs on a goroutine of its own).
func (c *caseT) Fatalf(format string, args ...any) {
	c.Errorf(format, args...)
	runtime.Goexit()
}

func (c *caseT) Cleanup(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cleanups = append(c.cleanups, f)
}

func (c *caseT) TempDir() string {
	d, err := os.MkdirTemp("", "mcpdrift-adv-")
	if err != nil {
		c.Fatalf("%v", err)
	}
	c.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (c *caseT) runCleanups() {
	c.mu.Lock()
	fs := c.cleanups
	c.cleanups = nil
	c.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// run runs f as the case, on a goroutine of its own (Fatalf ends it), its
// cleanups after it, and waits for it at most advCaseTimeout.
func (c *caseT) run(f func()) {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer c.runCleanups()
		f()
	}()
	select {
	case <-finished:
	case <-time.After(advCaseTimeout):
		c.Errorf("the case did not end within %s", advCaseTimeout)
	}
}

// report hands what the case logged and the errors it met to t.
func (c *caseT) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.logs {
		t.Log(l)
	}
	for _, e := range c.errs {
		t.Error(e)
	}
}

// advRun is a case while it runs.
type advRun struct {
	*caseT
	env      *advEnv
	c        advCase
	u        *upstream
	a        advAgent
	more     []advAgent // further agents of the case, checked the same way
	serverID string
	ep       agentEndpoint
	proxyURL string // HTTP: the proxy's base URL
	proxyLog *stderrTail
}

// runAdversarial runs the cases on the pool, then reports each as a
// subtest; driftEnv is more environment for the drift service.
func runAdversarial(t *testing.T, cases []advCase, driftEnv ...string) {
	if testing.Short() {
		t.Skip("runs the service commands, the proxy and real MCP clients")
	}
	seenNames := map[string]bool{}
	for _, c := range cases {
		if seenNames[c.name] {
			t.Fatalf("two cases named %s", c.name)
		}
		seenNames[c.name] = true
	}
	selected := func(name string) bool {
		f := flag.Lookup("test.run")
		if f == nil || f.Value.String() == "" {
			return true
		}
		parts := strings.Split(f.Value.String(), "/")
		if len(parts) < 2 {
			return true
		}
		ok, err := regexp.MatchString(parts[1], name)
		return err != nil || ok
	}
	env := startAdvEnv(t, driftEnv...)
	results := make([]*caseT, len(cases))
	done := make([]chan struct{}, len(cases))
	sem := make(chan struct{}, advParallel)
	for i, c := range cases {
		done[i] = make(chan struct{})
		results[i] = &caseT{name: c.name}
		if !selected(c.name) {
			close(done[i])
			continue
		}
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			defer close(done[i])
			ct := results[i]
			ct.run(func() {
				start := time.Now()
				runCase(env, ct, c)
				ct.Logf("case took %s", time.Since(start).Round(time.Millisecond))
			})
		}()
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			<-done[i]
			t.Logf("%s over %s, %s client", c.class, c.transport, c.client)
			results[i].report(t)
		})
	}
}

func runCase(env *advEnv, ct *caseT, c advCase) {
	id := "adv-" + strings.ReplaceAll(c.name, "_", "-")
	u := newUpstream(id)
	u.stateless = c.transport == advStateless
	if c.setup != nil {
		c.setup(u)
	}
	env.mu.Lock()
	env.upstreams[id] = u
	env.mu.Unlock()
	x := &advRun{caseT: ct, env: env, c: c, u: u, serverID: id}
	x.ep = x.endpoint()
	switch c.client {
	case "ts":
		x.a = newTSAgent(x)
	case "go":
		x.a = newGoAgent(x)
	default:
		x.Fatalf("no client %q", c.client)
	}
	defer func() {
		// Whatever the case did: nothing hostile reached any agent, and
		// no hostile call reached the upstream.
		for _, a := range append([]advAgent{x.a}, x.more...) {
			x.checkNothingHostile(a)
		}
		if calls := x.u.hostileCalls(); len(calls) > 0 {
			x.Errorf("a hostile call reached the upstream (%d): %.300s", len(calls), calls[0])
		}
		if x.proxyLog != nil && os.Getenv("MCPDRIFT_ADV_VERBOSE") != "" {
			x.Logf("proxy log:\n%s", x.proxyLog)
		}
		if os.Getenv("MCPDRIFT_ADV_VERBOSE") != "" {
			for _, m := range x.u.messages() {
				x.Logf("upstream got (%s): %.200s", m.Session, m.Raw)
			}
		}
	}()
	if !c.noBaseline {
		x.connect(x.a)
		x.baseline(x.a)
	}
	c.run(x)
}

// endpoint starts what the case's transport needs and says how an agent
// reaches the upstream through the proxy.
func (x *advRun) endpoint() agentEndpoint {
	switch x.c.transport {
	case advStdio:
		return x.stdioEndpoint()
	case advHTTP, advStateless:
		x.proxyURL = x.startHTTPProxy(x.serverID + "=" + x.env.httpBase + "/" + x.serverID + "/mcp")
		return agentEndpoint{Transport: "http", URL: x.proxyURL + "/" + x.serverID + "/mcp"}
	case advSSE:
		x.proxyURL = x.startHTTPProxy(x.serverID + "=sse:" + x.env.httpBase + "/" + x.serverID + "/sse")
		return agentEndpoint{Transport: "sse", URL: x.proxyURL + "/" + x.serverID + "/sse"}
	}
	x.Fatalf("no transport %q", x.c.transport)
	return agentEndpoint{}
}

// stdioEndpoint is the proxy command on stdio in front of a relay to the
// case's upstream (started by the agent, as agents start servers).
func (x *advRun) stdioEndpoint() agentEndpoint {
	return agentEndpoint{
		Transport: "stdio",
		Command: []string{filepath.Join(x.env.bin, "proxy"), "--server-id", x.serverID, "--proxy-id", "adv-" + x.serverID,
			"--outbox-dir", x.TempDir(), "--first-sight-wait", "3s", "--", os.Args[0]},
		Env: []string{"MCPDRIFT_NATS_URL=" + x.env.natsURL, advRelayEnv + "=" + x.env.stdioAddr, advUpstreamName + "=" + x.serverID,
			"MCPDRIFT_LOG_LEVEL=error"},
	}
}

// startHTTPProxy runs the proxy command in HTTP mode in front of one
// upstream (ID=URL) until the case ends, and returns its base URL.
func (x *advRun) startHTTPProxy(upstream string) string {
	cmd := exec.Command(filepath.Join(x.env.bin, "proxy"), "--listen", "127.0.0.1:0", "--outbox-dir", x.TempDir(),
		"--nats-url", x.env.natsURL, "--proxy-id", "adv-"+x.serverID, "--first-sight-wait", "3s", "--upstream", upstream)
	if os.Getenv("MCPDRIFT_ADV_VERBOSE") != "" {
		cmd.Args = append(cmd.Args, "--log-level", "debug")
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		x.Fatalf("%v", err)
	}
	if err := cmd.Start(); err != nil {
		x.Fatalf("starting the proxy: %v", err)
	}
	x.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			x.Errorf("the proxy did not stop on SIGINT within 10s")
		}
	})
	addr := make(chan string, 1)
	tail := new(stderrTail)
	x.proxyLog = tail
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(tail, line)
			if rest, ok := strings.CutPrefix(line, "proxy: serving "); ok {
				if i := strings.Index(rest, "http://"); i >= 0 {
					u := rest[i:]
					addr <- u[:strings.Index(u[len("http://"):], "/")+len("http://")]
				}
			}
			if strings.Contains(line, "panic") {
				x.Errorf("proxy: %s", line)
			}
		}
	}()
	select {
	case u := <-addr:
		return u
	case <-time.After(20 * time.Second):
		x.Fatalf("the proxy did not start serving:\n%s", tail)
		return ""
	}
}

// connect connects an agent (another one than the case's, or the case's
// again) with the case's capabilities.
func (x *advRun) connect(a advAgent) string {
	ins, err := a.connect(x.ep, x.c.caps, x.c.callOnChange)
	if err != nil {
		x.Fatalf("connecting the agent: %v", err)
	}
	return ins
}

// baseline waits until the approved surface is served (trust on first use:
// the first listing becomes the baseline once the pipeline has judged it).
func (x *advRun) baseline(a advAgent) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		tools, err := a.listTools()
		if err == nil && tools["read"] == "Read a file." && tools["rug"] != "" {
			return
		}
		if time.Now().After(deadline) {
			seen := a.seen()
			x.Fatalf("the approved surface was never served (the proxy withholds it, or the pipeline gave no verdict): %v %v; the agent read last: %s",
				tools, err, seen[max(0, len(seen)-600):])
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// checkNothingHostile is every case's assertion.
func (x *advRun) checkNothingHostile(a advAgent) {
	if a == nil {
		return
	}
	seen := a.seen()
	if i := strings.Index(seen, pwned); i >= 0 {
		x.Errorf("the agent was delivered something unapproved: ...%s...", excerpt(seen, i))
	}
	for _, ev := range a.events() {
		if strings.Contains(ev, "handled") {
			x.Errorf("the agent was asked a server-to-client request it must not have been: %.300s", ev)
		}
	}
	if i := strings.Index(seen, `"name":"exfil"`); i >= 0 {
		x.Errorf("the agent was delivered the unapproved tool exfil: ...%s...", excerpt(seen, i))
	}
}

// agent starts another agent of the given client for the case.
func (x *advRun) agent(client string) advAgent {
	var a advAgent
	if client == "go" {
		a = newGoAgent(x)
	} else {
		a = newTSAgent(x)
	}
	x.more = append(x.more, a)
	return a
}

func excerpt(s string, i int) string {
	from, to := max(0, i-160), min(len(s), i+120)
	return s[from:to]
}

// status reads the status of every variant of the case's server.
func (x *advRun) statuses() map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := x.env.js.KeyValue(ctx, bus.BucketStatus)
	if err != nil {
		x.Fatalf("status bucket: %v", err)
	}
	out := map[string]string{}
	lister, err := kv.ListKeysFiltered(ctx, bus.StatusKey("default", x.serverID, "*"))
	if err != nil {
		return out
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var rec struct{ Status string }
		_ = json.Unmarshal(e.Value(), &rec)
		out[key] = strings.ToLower(strings.TrimPrefix(rec.Status, "STATUS_"))
	}
	return out
}

// waitStatus waits until some variant of the server has the status.
func (x *advRun) waitStatus(status string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := x.statuses()
		for _, s := range st {
			if s == status {
				return
			}
		}
		if time.Now().After(deadline) {
			x.Fatalf("no variant of %s became %s: %v", x.serverID, status, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// driftctl runs the operator CLI against the admin API.
func (x *advRun) driftctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, x.env.driftctl, args...)
	cmd.Env = append(os.Environ(), "MCPDRIFT_API="+x.env.adminURL, "MCPDRIFT_TOKEN="+advAdminToken)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// --- agents ---

// agentEndpoint is how an agent reaches the proxy.
type agentEndpoint struct {
	Transport string   `json:"transport"` // stdio, http, sse
	Command   []string `json:"command,omitempty"`
	Env       []string `json:"-"`
	URL       string   `json:"url,omitempty"`
	SessionID string   `json:"sessionId,omitempty"`
}

// agent is a real MCP client, connected through the proxy.
type advAgent interface {
	// connect returns the instructions the agent got.
	connect(ep agentEndpoint, caps []string, callOnChange string) (string, error)
	// listTools returns each listed tool's description, by name.
	listTools() (map[string]string, error)
	// call returns the text of the result, and whether it is an error.
	call(name string) (string, bool, error)
	getPrompt(name string) (string, error)
	readResource(uri string) (string, error)
	listPrompts() (string, error)
	listResources() (string, error)
	// notify sends a notification through the client's transport.
	notify(method, params string) error
	// raw writes body as it is on the client's connection and returns a
	// message with id it got back ("" when none), and the HTTP answer.
	raw(body, id string) (string, string)
	// seen is every message the client was delivered, as text.
	seen() string
	// events are what the agent's handlers were asked and did.
	events() []string
	close()
}

// tsAgent drives testdata/ts-agent.cjs.
type tsAgent struct {
	x      *advRun
	mu     sync.Mutex
	in     io.WriteCloser
	out    *bufio.Reader
	cmd    *exec.Cmd
	closed bool
	last   string // the last seen, kept after close
	evs    []string
	said   []string // every answer of the SDK's methods (results and errors)
}

func newTSAgent(x *advRun) *tsAgent {
	script, err := filepath.Abs(filepath.Join("testdata", "ts-agent.cjs"))
	if err != nil {
		x.Fatalf("%v", err)
	}
	cmd := exec.Command("node", script, x.env.peers.dir)
	in, err := cmd.StdinPipe()
	if err != nil {
		x.Fatalf("%v", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		x.Fatalf("%v", err)
	}
	tail := new(stderrTail)
	cmd.Stderr = tail
	if err := cmd.Start(); err != nil {
		x.Fatalf("starting node: %v", err)
	}
	a := &tsAgent{x: x, in: in, out: bufio.NewReaderSize(out, 1<<20), cmd: cmd}
	x.Cleanup(func() {
		a.close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return a
}

// do sends one command and reads its answer (bounded).
func (a *tsAgent) do(cmd map[string]any) map[string]json.RawMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return map[string]json.RawMessage{"error": json.RawMessage(`{"message":"closed"}`)}
	}
	b, _ := json.Marshal(cmd)
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		return map[string]json.RawMessage{"error": json.RawMessage(fmt.Sprintf(`{"message":%q}`, err.Error()))}
	}
	type res struct {
		line []byte
		err  error
	}
	ch := make(chan res, 1)
	go func() { l, err := a.out.ReadBytes('\n'); ch <- res{l, err} }()
	select {
	case r := <-ch:
		var out map[string]json.RawMessage
		if cmd["op"] != "seen" {
			// What the SDK handed the agent, errors included (an error's
			// text reaches the agent too).
			a.said = append(a.said, string(r.line))
		}
		if r.err != nil || json.Unmarshal(r.line, &out) != nil {
			a.closed = true
			return map[string]json.RawMessage{"error": json.RawMessage(fmt.Sprintf(`{"message":"the agent ended: %v"}`, r.err))}
		}
		return out
	case <-time.After(30 * time.Second):
		a.closed = true
		_ = a.cmd.Process.Kill()
		return map[string]json.RawMessage{"error": json.RawMessage(`{"message":"the agent did not answer within 30s"}`)}
	}
}

func tsErr(out map[string]json.RawMessage) error {
	if e, ok := out["error"]; ok {
		return fmt.Errorf("%s", e)
	}
	return nil
}

func (a *tsAgent) connect(ep agentEndpoint, caps []string, callOnChange string) (string, error) {
	env := map[string]string{}
	for _, kv := range ep.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	capObj := map[string]any{}
	for _, c := range caps {
		capObj[c] = map[string]any{}
	}
	e := map[string]any{"transport": ep.Transport, "command": ep.Command, "env": env, "url": ep.URL}
	if ep.SessionID != "" {
		e["sessionId"] = ep.SessionID
	}
	cmd := map[string]any{"op": "connect", "endpoint": e, "caps": capObj, "timeoutMs": 4000}
	if callOnChange != "" {
		cmd["callOnToolsChanged"] = callOnChange
	}
	out := a.do(cmd)
	if err := tsErr(out); err != nil {
		return "", err
	}
	var init struct {
		Initialize struct{ Instructions *string }
	}
	_ = json.Unmarshal(out["initialize"], &init.Initialize)
	if init.Initialize.Instructions != nil {
		return *init.Initialize.Instructions, nil
	}
	return "", nil
}

func toolMap(result []byte) map[string]string {
	var r struct {
		Tools []struct{ Name, Description string }
	}
	_ = json.Unmarshal(result, &r)
	m := map[string]string{}
	for _, t := range r.Tools {
		m[t.Name] = t.Description
	}
	return m
}

func (a *tsAgent) listTools() (map[string]string, error) {
	out := a.do(map[string]any{"op": "listTools"})
	if err := tsErr(out); err != nil {
		return nil, err
	}
	return toolMap(out["result"]), nil
}

func callText(result []byte) (string, bool) {
	var r struct {
		Content []struct{ Text string }
		IsError bool
	}
	_ = json.Unmarshal(result, &r)
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String(), r.IsError
}

func (a *tsAgent) call(name string) (string, bool, error) {
	out := a.do(map[string]any{"op": "call", "name": name, "args": map[string]any{}})
	if err := tsErr(out); err != nil {
		return "", false, err
	}
	text, isErr := callText(out["result"])
	return text, isErr, nil
}

func (a *tsAgent) getPrompt(name string) (string, error) {
	out := a.do(map[string]any{"op": "getPrompt", "name": name})
	return string(out["result"]), tsErr(out)
}

func (a *tsAgent) readResource(uri string) (string, error) {
	out := a.do(map[string]any{"op": "readResource", "uri": uri})
	return string(out["result"]), tsErr(out)
}

func (a *tsAgent) listPrompts() (string, error) {
	out := a.do(map[string]any{"op": "listPrompts"})
	return string(out["result"]), tsErr(out)
}

func (a *tsAgent) listResources() (string, error) {
	out := a.do(map[string]any{"op": "listResources"})
	return string(out["result"]), tsErr(out)
}

func (a *tsAgent) notify(method, params string) error {
	return tsErr(a.do(map[string]any{"op": "notify", "method": method, "params": json.RawMessage(params)}))
}

func (a *tsAgent) raw(body, id string) (string, string) {
	cmd := map[string]any{"op": "raw", "body": body}
	if id != "" {
		cmd["id"] = json.RawMessage(id)
	}
	out := a.do(cmd)
	msg := string(out["message"])
	if msg == "null" {
		msg = ""
	}
	return msg, string(out["http"])
}

// parallel runs TS agent operations at once.
func (a *tsAgent) parallel(ops ...map[string]any) []json.RawMessage {
	out := a.do(map[string]any{"op": "parallel", "ops": ops})
	var rs []json.RawMessage
	_ = json.Unmarshal(out["results"], &rs)
	return rs
}

func (a *tsAgent) fetchSeen() {
	out := a.do(map[string]any{"op": "seen"})
	if _, ok := out["messages"]; !ok {
		return
	}
	var evs []json.RawMessage
	_ = json.Unmarshal(out["events"], &evs)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = string(out["messages"])
	a.evs = nil
	for _, e := range evs {
		a.evs = append(a.evs, string(e))
	}
}

func (a *tsAgent) seen() string {
	a.fetchSeen()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last + "\n" + strings.Join(a.said, "\n")
}

func (a *tsAgent) events() []string {
	a.fetchSeen()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.evs
}

func (a *tsAgent) close() {
	a.fetchSeen()
	a.do(map[string]any{"op": "close"})
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		a.in.Close()
	}
}

// goAgent is the Go SDK client in this process. What it is delivered is
// recorded as the bytes its transport reads (the stdio stream, the HTTP
// bodies).
type goAgent struct {
	x       *advRun
	rec     *recorder
	cs      *mcp.ClientSession
	stdin   io.WriteCloser // stdio: the proxy's input, for raw
	ep      agentEndpoint
	mu      sync.Mutex
	evs     []string
	closers []func()
}

// recorder keeps every byte a client read.
type recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(b)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

type teeBody struct {
	io.ReadCloser
	w io.Writer
}

func (t teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		_, _ = t.w.Write(p[:n])
	}
	return n, err
}

type recordingRT struct{ rec *recorder }

func (rt recordingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		res.Body = teeBody{res.Body, rt.rec}
	}
	return res, err
}

func newGoAgent(x *advRun) *goAgent {
	a := &goAgent{x: x, rec: new(recorder)}
	x.Cleanup(a.close)
	return a
}

func (a *goAgent) event(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, s)
}

func (a *goAgent) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 4*time.Second)
}

func (a *goAgent) connect(ep agentEndpoint, caps []string, callOnChange string) (string, error) {
	a.ep = ep
	opts := &mcp.ClientOptions{}
	for _, c := range caps {
		switch c {
		case "sampling":
			// Sampling is deprecated from 2026-07-28 on, but a hostile
			// server of an older version may still ask for it.
			//lint:ignore SA1019 see above
			opts.CreateMessageHandler = func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				b, _ := json.Marshal(req.Params)
				a.event("handled sampling/createMessage " + string(b))
				//lint:ignore SA1019 see above
				return &mcp.CreateMessageResult{Role: "assistant", Model: "adv", Content: &mcp.TextContent{Text: "ok"}}, nil
			}
		case "elicitation":
			opts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				b, _ := json.Marshal(req.Params)
				a.event("handled elicitation/create " + string(b))
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
		}
	}
	opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
		a.event("notified tools/list_changed")
		if callOnChange != "" {
			go func() {
				text, isErr, err := a.call(callOnChange)
				a.event(fmt.Sprintf("calledOnChange %s: %q isError=%v err=%v", callOnChange, text, isErr, err))
			}()
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpdrift-adv-go", Version: "1.0.0"}, opts)
	for _, cp := range caps {
		if cp == "roots" {
			//lint:ignore SA1019 the servers here speak 2025-11-25 and ask for roots
			c.AddRoots(&mcp.Root{URI: "file:///tmp", Name: "adv"})
		}
	}
	var tr mcp.Transport
	hc := &http.Client{Transport: recordingRT{a.rec}}
	switch ep.Transport {
	case "stdio":
		cmd := exec.Command(ep.Command[0], ep.Command[1:]...)
		cmd.Env = append(os.Environ(), ep.Env...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return "", err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return "", err
		}
		if err := cmd.Start(); err != nil {
			return "", err
		}
		a.stdin = in
		a.closers = append(a.closers, func() {
			in.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		tr = &mcp.IOTransport{Reader: teeBody{out, a.rec}, Writer: in}
	case "http":
		tr = &mcp.StreamableClientTransport{Endpoint: ep.URL, HTTPClient: hc}
	case "sse":
		tr = &mcp.SSEClientTransport{Endpoint: ep.URL, HTTPClient: hc}
	}
	// The HTTP+SSE transport keeps its stream on the connect context: it
	// lives until the agent closes, and connecting is bounded apart.
	ctx, cancel := context.WithCancel(context.Background())
	a.closers = append(a.closers, cancel)
	timer := time.AfterFunc(10*time.Second, cancel)
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("connecting took over 10s")
	}
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	a.cs = cs
	a.mu.Unlock()
	if ir := cs.InitializeResult(); ir != nil {
		return ir.Instructions, nil
	}
	return "", nil
}

func (a *goAgent) session() *mcp.ClientSession {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cs
}

func (a *goAgent) listTools() (map[string]string, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, t := range res.Tools {
		m[t.Name] = t.Description
	}
	return m, nil
}

func (a *goAgent) call(name string) (string, bool, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError, nil
}

func (a *goAgent) getPrompt(name string) (string, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
	b, _ := json.Marshal(res)
	return string(b), err
}

func (a *goAgent) readResource(uri string) (string, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	b, _ := json.Marshal(res)
	return string(b), err
}

func (a *goAgent) listPrompts() (string, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().ListPrompts(ctx, nil)
	b, _ := json.Marshal(res)
	return string(b), err
}

func (a *goAgent) listResources() (string, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	res, err := a.session().ListResources(ctx, nil)
	b, _ := json.Marshal(res)
	return string(b), err
}

func (a *goAgent) notify(method, params string) error {
	_, _ = a.raw(`{"jsonrpc":"2.0","method":"`+method+`","params":`+params+`}`, "")
	return nil
}

// raw writes on the client's own connection: the stdio pipe, or a POST
// with the session's id.
func (a *goAgent) raw(body, id string) (string, string) {
	switch a.ep.Transport {
	case "stdio":
		before := len(a.rec.String())
		_, _ = io.WriteString(a.stdin, body+"\n")
		if id == "" {
			return "", ""
		}
		deadline := time.Now().Add(4 * time.Second)
		for time.Now().Before(deadline) {
			for _, l := range strings.Split(a.rec.String()[before:], "\n") {
				if strings.Contains(l, `"id":`+id) {
					return l, ""
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		return "", ""
	case "http":
		req, _ := http.NewRequest(http.MethodPost, a.ep.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", a.session().ID())
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		ctx, cancel := a.ctx()
		defer cancel()
		res, err := (&http.Client{Transport: recordingRT{a.rec}}).Do(req.WithContext(ctx))
		if err != nil {
			return "", err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return "", fmt.Sprintf("%d %s", res.StatusCode, b)
	}
	return "", "raw is not supported on " + a.ep.Transport + " by the Go agent"
}

func (a *goAgent) seen() string { return a.rec.String() }

func (a *goAgent) events() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.evs...)
}

func (a *goAgent) close() {
	a.mu.Lock()
	cs, closers := a.cs, a.closers
	a.cs, a.closers = nil, nil
	a.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	for _, f := range closers {
		f()
	}
}
