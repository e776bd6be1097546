package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

func TestMain(m *testing.M) {
	mcptest.Main() // the upstream server of the stdio tests
	os.Exit(m.Run())
}

// namesServerOnce fails the test when a log line names the server more
// than once, and returns how many lines name it.
func namesServerOnce(t *testing.T, logs string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(logs) {
		switch strings.Count(line, `"server":`) {
		case 0:
		case 1:
			n++
		default:
			t.Errorf("a log line names the server more than once: %s", line)
		}
	}
	return n
}

// approve does what the drift service does on first sight: it writes a
// verified status record for the observation's variant, with the observed
// surface as its baseline.
func approve(t *testing.T, b *natstest.Bus, obs *mcpdriftv1.ListObservation) {
	t.Helper()
	// As the drift service approves a server first seen: in the newest
	// canonical form.
	sf, err := surface.Parse(obs.Capture, surface.Options{Form: surface.FormLatest})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(status.Record{Tenant: obs.Tenant, Server: obs.Server, Variant: obs.Variant, Status: status.Verified,
		Policy: status.Policy{Posture: status.Discovery, OnDrift: status.Block, Form: status.FormLatest}, BaselineVersion: 1,
		BaselineHash: sf.Hash.String(), BaselineItems: status.ItemsOf(sf)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handles.Status.Put(context.Background(), bus.StatusKey(obs.Tenant, obs.Server, obs.Variant), rec); err != nil {
		t.Fatal(err)
	}
}

// TestOpsHTTP runs the command in HTTP mode with --ops-addr in front of a
// real MCP server, does known work through it (a first sight refused, an
// approval, calls served, refused and failed) and scrapes: the metrics
// moved by that work, they are the ones docs/metrics.md lists, and
// readiness follows the upstream.
func TestOpsHTTP(t *testing.T) {
	b := natstest.StartBus(t)
	s := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, &mcp.ServerOptions{Instructions: "Double numbers."})
	type in struct {
		N int `json:"n"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "double", Description: "Double a number."}, func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(2 * a.N)}}}, nil, nil
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer up.Close()
	sub, err := b.NC.SubscribeSync(bus.ListObservationSubject("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.NC.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, []string{"--listen", "127.0.0.1:0", "--upstream", "web=" + up.URL, "--ops-addr", "127.0.0.1:0",
			"--nats-url", b.NC.ConnectedUrl(), "--outbox-dir", t.TempDir(), "--first-sight-wait", "300ms", "--log-level", "info"},
			func(string) string { return "" }, strings.NewReader(""), io.Discard, &logs)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	addr := opstest.Addr(t, logs.String)
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK)
	// Ready can come before the serving line is written: poll for it.
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.Lines(logs.String()) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "proxy: serving 1 upstream(s) on "); ok {
				base = strings.TrimSuffix(rest, "/<server-id>/mcp")
			}
		}
	}
	if base == "" {
		t.Fatalf("no serving line:\n%s", logs.String())
	}
	// The two listeners answer readiness each from its own checks, which
	// may come true a moment apart.
	opstest.WaitStatus(t, strings.TrimPrefix(base, "http://"), "/readyz", http.StatusOK)

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/web/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callTool := func(name string, args any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// First sight: no drift service here, so no verdict comes.
	if res := callTool("double", map[string]any{"n": 2}); !res.IsError {
		t.Fatal("a call on first sight was served")
	}
	if res, err := cs.ListTools(ctx, nil); err != nil || len(res.Tools) != 0 {
		t.Fatalf("tools/list on first sight: %v %v", res, err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var obs mcpdriftv1.ListObservation
	if err := proto.Unmarshal(msg.Data, &obs); err != nil {
		t.Fatal(err)
	}
	opstest.WaitValue(t, addr, 1, "mcpdrift_proxy_servers_withheld")
	approve(t, b, &obs)
	opstest.WaitValue(t, addr, 0, "mcpdrift_proxy_servers_withheld")
	if res := callTool("double", map[string]any{"n": 21}); res.IsError {
		t.Fatalf("a verified call was refused: %v", res.Content)
	}
	if res := callTool("triple", map[string]any{"n": 1}); !res.IsError {
		t.Fatal("a tool outside the baseline was served")
	}
	if res := callTool("double", map[string]any{"n": "two"}); !res.IsError { // the server's own tool error
		t.Fatal("invalid arguments were accepted")
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 1 {
		t.Fatalf("tools/list: %v %v", res, err)
	}

	const calls, refused = "mcpdrift_proxy_calls_total", "mcpdrift_proxy_refused_calls_total"
	// Published: four calls, and every listing observed: the proxy's own
	// after the session opened, whole, and the client's two tools/list.
	// The second is compact (its surface is the record's live hash); the
	// first is compact too unless the verdict on that surface was still
	// unknown when it came (the refused call waited out the first-sight
	// bound; on a loaded machine the pending verdict may have arrived
	// meanwhile). Nothing is dropped or spooled (below).
	poll.Eventually(t, 30*time.Second, func() error {
		f := opstest.Scrape(t, addr)
		n, _ := f.Value("mcpdrift_proxy_events_total", "result", "published")
		l, _ := f.Value("mcpdrift_proxy_listings_total")
		c, _ := f.Value("mcpdrift_proxy_listings_compact_total")
		if q, _ := f.Value("mcpdrift_proxy_events_queued"); q != 0 || l != 3 || (c != 1 && c != 2) || n != 4+l {
			return fmt.Errorf("%v events published, %v queued, %v listings (%v compact); want 3 listings (1 or 2 compact) and each listing and call published, none queued", n, q, l, c)
		}
		return nil
	})
	fams := opstest.WaitValue(t, addr, 0, "mcpdrift_proxy_events_queued")
	fams.Require(t, 1, calls, "outcome", "forwarded")
	fams.Require(t, 2, calls, "outcome", "refused")
	fams.Require(t, 1, calls, "outcome", "error")
	fams.Require(t, 1, refused, "code", "server_unknown")
	fams.Require(t, 1, refused, "code", "tool_not_approved")
	fams.Require(t, 0, refused, "code", "server_changed")
	fams.Require(t, 0, "mcpdrift_proxy_alerted_calls_total", "code", "server_changed") // the block posture
	fams.Require(t, 1, "mcpdrift_proxy_withheld_items_total", "kind", "tool")          // the first sight's listing
	fams.Require(t, 2, "mcpdrift_proxy_withheld_items_total", "kind", "instructions")  // the first sight's server/discover and initialize results (the SDK client sends both)
	fams.Require(t, 0, "mcpdrift_proxy_withheld_items_total", "kind", "prompt")
	fams.Require(t, 1, "mcpdrift_proxy_gate_connected")
	fams.Require(t, 0, "mcpdrift_proxy_outbox_events")
	fams.Require(t, 0, "mcpdrift_proxy_status_copy_in_use")
	fams.Require(t, 0, "mcpdrift_proxy_status_copies_ignored_total", "reason", "corrupt")
	fams.Require(t, 0, "mcpdrift_proxy_outbox_bytes")
	fams.Require(t, 0, "mcpdrift_proxy_events_total", "result", "dropped")
	fams.Require(t, 0, "mcpdrift_proxy_events_total", "result", "spooled")
	if diff := opstest.Diff(opstest.DocNames(t, "../../docs/metrics.md", "proxy", "every service"), fams.Names("mcpdrift_")); diff != "" {
		t.Errorf("docs/metrics.md and the proxy's metrics differ:\n%s", diff)
	}
	if namesServerOnce(t, logs.String()) == 0 {
		t.Errorf("no log line names the server:\n%s", logs.String())
	}

	// The upstream goes away: not ready, and says why.
	_ = cs.Close()
	up.CloseClientConnections()
	up.Close()
	body := opstest.WaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable)
	if !strings.Contains(body, "upstream: server web unreachable") {
		t.Fatalf("/readyz: %q", body)
	}
}

// TestOpsStdio runs the command on stdio with --ops-addr in front of the
// mcptest server: ready while the server runs, and a refused call counted.
func TestOpsStdio(t *testing.T) {
	b := natstest.StartBus(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stdin, toProxy := io.Pipe()
	fromProxy, stdout := io.Pipe()
	// A record of another listing variant: the gate loads and logs it.
	if _, err := b.Handles.Status.Put(context.Background(), bus.StatusKey("default", "files", "other"), []byte(`{"status":"pending","policy":{"on_drift":"block"}}`)); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	t.Setenv(mcptest.Env, "1") // the child serves
	done := make(chan int, 1)
	go func() {
		code, err := run(context.Background(), []string{"--server-id", "files", "--ops-addr", "127.0.0.1:0", "--nats-url", b.NC.ConnectedUrl(),
			"--outbox-dir", t.TempDir(), "--first-sight-wait", "200ms", "--log-level", "info", "--", exe},
			func(string) string { return "" }, stdin, stdout, &logs)
		if err != nil {
			t.Errorf("run: %v", err)
		}
		stdout.Close()
		done <- code
	}()
	lines := bufio.NewScanner(fromProxy)
	answer := func(msg string) string {
		t.Helper()
		if _, err := fmt.Fprintln(toProxy, msg); err != nil {
			t.Fatal(err)
		}
		var id struct{ ID json.RawMessage }
		_ = json.Unmarshal([]byte(msg), &id)
		for lines.Scan() {
			if strings.Contains(lines.Text(), `"id":`+string(id.ID)+`,`) {
				return lines.Text()
			}
		}
		t.Fatalf("no answer to %s", msg)
		return ""
	}
	addr := opstest.Addr(t, logs.String)
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK)
	answer(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := fmt.Fprintln(toProxy, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	if got := answer(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{}}}`); !strings.Contains(got, "server_unknown") {
		t.Fatalf("a call on first sight: %s", got)
	}
	fams := opstest.WaitValue(t, addr, 1, "mcpdrift_proxy_refused_calls_total", "code", "server_unknown")
	fams.Require(t, 1, "mcpdrift_proxy_calls_total", "outcome", "refused")
	fams.Require(t, 1, "mcpdrift_proxy_listings_total")
	fams.Require(t, 1, "mcpdrift_proxy_servers_withheld")
	fams.Require(t, 1, "mcpdrift_proxy_gate_connected")
	toProxy.Close() // end of input: the server exits, and so does the proxy
	go func() { _, _ = io.Copy(io.Discard, fromProxy) }()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// The gate logged the record it loaded, naming the server once.
	if !strings.Contains(logs.String(), `"message":"status record"`) || namesServerOnce(t, logs.String()) < 2 {
		t.Errorf("no gate line naming the server:\n%s", logs.String())
	}
}
