package replytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/stdio"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/streamhttp"
)

// TestMain lets the test binary act as the stdio upstream (mcptest).
func TestMain(m *testing.M) {
	mcptest.Main()
	os.Exit(m.Run())
}

// limit is every transport's bound on an agent's message.
const limit = 64 << 10

// gate answers every decision with one view, which a case sets.
type gate struct {
	mu sync.Mutex
	v  session.View
	ok bool
}

func (g *gate) View(context.Context, string, bool, time.Duration) (session.View, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v, g.ok
}

func (g *gate) set(v session.View, ok bool) {
	g.mu.Lock()
	g.v, g.ok = v, ok
	g.mu.Unlock()
}

// observer counts the listings the proxy completes.
type observer struct {
	mu       sync.Mutex
	listings int
}

func (o *observer) Listing(session.Listed, []byte) { o.mu.Lock(); o.listings++; o.mu.Unlock() }
func (o *observer) Seen(session.Listed)            { o.mu.Lock(); o.listings++; o.mu.Unlock() }
func (o *observer) Call(session.Call)              {}

func (o *observer) listed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listings == 0 {
		return errors.New("the proxy has not completed its own listing of the server yet")
	}
	return nil
}

// timeouts ends every held call as an admin who never came.
type timeouts struct{}

func (timeouts) Await(context.Context, session.ApprovalRequest) session.Approval {
	return session.Approval{ID: "a-1", Outcome: session.ApprovalTimeout}
}

// approved is the view of a server whose baseline is mcptest's listing.
func approved(t *testing.T) session.View {
	t.Helper()
	s, err := surface.Parse([]byte(`{"tools":[`+mcptest.ToolRead+`,`+mcptest.ToolRug+`]}`), surface.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := session.View{Status: "verified", Serve: true, BaselineHash: s.Hash.String(), Items: map[session.ItemKey]surface.Digest{}}
	for _, it := range s.Items {
		v.Items[session.ItemKey{Kind: it.Kind, Name: it.Name}] = it.Hash
	}
	return v
}

// sessionConfig is every transport's session: the server "fake", whose
// tenant's policy holds every call of the tool rug for approval.
func sessionConfig(t *testing.T) session.Config {
	t.Helper()
	d, err := policy.Parse([]byte("rules:\n  - {id: hold, tenant: default, tool: rug, action: pending_approval, reason: rugs need a human}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile("default", d)
	if err != nil {
		t.Fatal(err)
	}
	return session.Config{Server: "fake", Timeout: 5 * time.Second, Policy: sessiontest.Policy[session.Code]{Set: set}, Approvals: timeouts{}}
}

// agent is an MCP client of the proxy on one transport.
type agent interface {
	// exchange sends one message and returns the one message the agent
	// gets in answer and, over HTTP, the status of the request that
	// carried it (0 on stdio).
	exchange(t *testing.T, raw string) (answer string, status int)
	// notify sends a notification, which gets no answer.
	notify(t *testing.T, raw string)
}

const (
	initialize  = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`
	initialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// open initializes a's session and waits for the proxy's own listing.
func open(t *testing.T, a agent, o *observer) {
	t.Helper()
	if got, _ := a.exchange(t, initialize); !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize: %s", got)
	}
	a.notify(t, initialized)
	poll.Eventually(t, 10*time.Second, o.listed)
}

// stdioAgent talks to a stdio proxy in front of mcptest.
type stdioAgent struct {
	in    *io.PipeWriter
	lines chan string
}

func newStdio(t *testing.T, g *gate, o *observer) *stdioAgent {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := stdio.Start(stdio.Config{Command: os.Args[0], Env: append(os.Environ(), mcptest.Env+"=1"), MaxLine: limit, StopWait: 2 * time.Second}, outW, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	s := session.New(sessionConfig(t), g, o, p.Pipes().ToServer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := p.Serve(context.Background(), stdio.Bind(s, p.Pipes()), inR, nil); err != nil {
			t.Errorf("stdio Serve: %v", err)
		}
		outW.Close()
	}()
	a := &stdioAgent{in: inW, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
	}()
	t.Cleanup(func() { inW.Close(); <-done })
	return a
}

func (a *stdioAgent) notify(t *testing.T, raw string) {
	t.Helper()
	if _, err := a.in.Write([]byte(raw + "\n")); err != nil {
		t.Fatal(err)
	}
}

func (a *stdioAgent) exchange(t *testing.T, raw string) (string, int) {
	t.Helper()
	a.notify(t, raw)
	select {
	case l := <-a.lines:
		return l, 0
	case <-time.After(10 * time.Second):
		t.Fatal("stdio: no answer within 10s")
	}
	return "", 0
}

// serveLines answers body as mcptest does on stdio, one line a message.
func serveLines(body []byte) [][]byte {
	var out bytes.Buffer
	mcptest.Serve(bytes.NewReader(append(bytes.Clone(body), '\n')), &out)
	var lines [][]byte
	for _, l := range bytes.Split(out.Bytes(), []byte{'\n'}) {
		if len(l) > 0 {
			lines = append(lines, l)
		}
	}
	return lines
}

// streamableUpstream is mcptest over Streamable HTTP: JSON answers, and a
// session id named by the answer to initialize.
func streamableUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		lines := serveLines(body)
		if bytes.Contains(body, []byte(`"method":"initialize"`)) {
			w.Header().Set("Mcp-Session-Id", "up-1")
		}
		if len(lines) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(lines[len(lines)-1]) // the answer (after any notification)
	})
}

// httpAgent talks to a Streamable HTTP proxy.
type httpAgent struct {
	url string
	sid string
}

func newStreamable(t *testing.T, g *gate, o *observer) *httpAgent {
	t.Helper()
	up := httptest.NewServer(streamableUpstream())
	t.Cleanup(up.Close)
	p, err := streamhttp.New(streamhttp.Config{MaxMessage: limit, Log: zerolog.New(zerolog.NewTestWriter(t))},
		[]streamhttp.Upstream{{ID: "fake", URL: up.URL + "/mcp", Gate: g, Observer: o, Session: sessionConfig(t)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	return &httpAgent{url: srv.URL + "/fake/mcp"}
}

func (a *httpAgent) post(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.url, strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if a.sid != "" {
		req.Header.Set("Mcp-Session-Id", a.sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (a *httpAgent) exchange(t *testing.T, raw string) (string, int) {
	t.Helper()
	resp, body := a.post(t, raw)
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		a.sid = sid
	}
	return body, resp.StatusCode
}

func (a *httpAgent) notify(t *testing.T, raw string) {
	t.Helper()
	if resp, body := a.post(t, raw); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("Streamable HTTP notification: HTTP %d %s", resp.StatusCode, body)
	}
}

// legacyUpstream is mcptest over HTTP+SSE (2024-11-05): one client's
// event stream, whose messages are the answers to its posts.
type legacyUpstream struct{ events chan []byte }

func (u *legacyUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event: endpoint\ndata: /messages\n\n")
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case ev := <-u.events:
				_, _ = fmt.Fprintf(w, "event: message\ndata: %s\n\n", ev)
				_ = rc.Flush()
			}
		}
	case r.Method == http.MethodPost && r.URL.Path == "/messages":
		body, _ := io.ReadAll(r.Body)
		for _, l := range serveLines(body) {
			u.events <- l
		}
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// sseAgent talks to an HTTP+SSE proxy: it posts to the endpoint the
// stream named, and reads the answers on the stream.
type sseAgent struct {
	base     string
	endpoint string
	events   chan sseEvent
}

type sseEvent struct{ name, data string }

func newSSE(t *testing.T, g *gate, o *observer) *sseAgent {
	t.Helper()
	up := httptest.NewServer(&legacyUpstream{events: make(chan []byte, 64)})
	t.Cleanup(up.Close)
	p, err := streamhttp.New(streamhttp.Config{MaxMessage: limit, Log: zerolog.New(zerolog.NewTestWriter(t))},
		[]streamhttp.Upstream{{ID: "fake", SSEURL: up.URL + "/sse", Gate: g, Observer: o, Session: sessionConfig(t)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Close(); p.Close() })
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/fake/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP+SSE stream: HTTP %d", resp.StatusCode)
	}
	a := &sseAgent{base: srv.URL, events: make(chan sseEvent, 64)}
	go func() {
		defer resp.Body.Close()
		defer close(a.events)
		br := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if ev.data != "" {
					a.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event:"):
				ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				ev.data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			}
		}
	}()
	ev := a.next(t)
	if ev.name != "endpoint" {
		t.Fatalf("HTTP+SSE: first event %+v, want the endpoint", ev)
	}
	a.endpoint = ev.data
	return a
}

func (a *sseAgent) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-a.events:
		if !ok {
			t.Fatal("HTTP+SSE: the stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("HTTP+SSE: no event within 10s")
	}
	return sseEvent{}
}

func (a *sseAgent) post(t *testing.T, raw string) (int, string) {
	t.Helper()
	resp, err := http.Post(a.base+a.endpoint, "application/json", strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (a *sseAgent) exchange(t *testing.T, raw string) (string, int) {
	t.Helper()
	status, body := a.post(t, raw)
	if status/100 != 2 {
		return body, status // refused alone: the answer is the post's
	}
	return a.next(t).data, status
}

func (a *sseAgent) notify(t *testing.T, raw string) {
	t.Helper()
	if status, body := a.post(t, raw); status != http.StatusAccepted {
		t.Fatalf("HTTP+SSE notification: HTTP %d %s", status, body)
	}
}

// TestOneReplyEveryTransport feeds the same bad inputs through stdio,
// Streamable HTTP and HTTP+SSE and asserts that the agent gets the same
// answer, byte for byte, with the code and shape the registry gives:
// a JSON-RPC error with the registry's error code and the code in
// error.data["mcpdrift/code"], or for a refused tools/call an MCP tool
// error with the code in result._meta["mcpdrift/code"]; and over HTTP, a
// message refused alone gets the code's HTTP status on both HTTP
// transports.
//
// What changed when the reply path became one: stdio answered an
// unreadable message with JSON-RPC -32700 and no code, and a line over
// its limit with -32600 and no code; both now get what HTTP answered,
// invalid_message and message_too_large (-32600), with one sentence.
func TestOneReplyEveryTransport(t *testing.T) {
	g := &gate{}
	g.set(approved(t), true)
	agents := []struct {
		name string
		a    agent
		http bool
	}{}
	for _, tr := range []struct {
		name string
		make func(*testing.T, *gate, *observer) agent
		http bool
	}{
		{"stdio", func(t *testing.T, g *gate, o *observer) agent { return newStdio(t, g, o) }, false},
		{"streamable-http", func(t *testing.T, g *gate, o *observer) agent { return newStreamable(t, g, o) }, true},
		{"http+sse", func(t *testing.T, g *gate, o *observer) agent { return newSSE(t, g, o) }, true},
	} {
		o := &observer{}
		a := tr.make(t, g, o)
		open(t, a, o)
		agents = append(agents, struct {
			name string
			a    agent
			http bool
		}{tr.name, a, tr.http})
	}

	quarantined := session.View{Status: "quarantined"}
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"` + strings.Repeat("x", 2*limit) + `"}}}`
	for _, tc := range []struct {
		name string
		msg  string
		view *session.View // nil: approved; &session.View{} with noVerdict: none
		none bool          // the gate has no verdict
		code session.Code  // "" for an answer that is no refusal (a withheld listing)
		tool bool          // a tool error, not a JSON-RPC error
		want string        // for code "": a substring of the answer
	}{
		{name: "unreadable_json", msg: `{"jsonrpc":"2.0","id":1,"method":`, code: session.InvalidMessage},
		{name: "not_jsonrpc", msg: `{"hello":"world"}`, code: session.InvalidMessage},
		{name: "duplicate_member", msg: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","name":"rug"}}`, code: session.InvalidMessage},
		{name: "method_by_case", msg: `{"jsonrpc":"2.0","id":2,"method":"tools/list","Method":"tools/call"}`, code: session.InvalidMessage},
		{name: "too_large", msg: big, code: session.MessageTooLarge},
		{name: "call_ambiguous", msg: `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","Name":"rug"}}`, code: session.RefuseAmbiguous, tool: true},
		{name: "prompt_ambiguous", msg: `{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"a","NAME":"b"}}`, code: session.RefuseAmbiguous},
		{name: "call_not_approved", msg: `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope","arguments":{}}}`, code: session.RefuseToolNotApproved, tool: true},
		{name: "held_call_times_out", msg: `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"rug","arguments":{}}}`, code: session.PolicyApprovalTimeout, tool: true},
		{name: "batch_refused", msg: `[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope","arguments":{}}}]`, code: session.RefuseToolNotApproved, tool: true},
		{name: "no_verdict_call", msg: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read","arguments":{}}}`, none: true, code: session.RefuseServerUnknown, tool: true},
		{name: "closed_call", msg: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{}}}`, view: &quarantined, code: session.RefuseServerQuarantined, tool: true},
		{name: "closed_prompt", msg: `{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"p"}}`, view: &quarantined, code: session.RefuseServerQuarantined},
		{name: "closed_listing", msg: `{"jsonrpc":"2.0","id":11,"method":"tools/list"}`, view: &quarantined, want: `"tools":[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.none:
				g.set(session.View{}, false)
			case tc.view != nil:
				g.set(*tc.view, true)
			default:
				g.set(approved(t), true)
			}
			t.Cleanup(func() { g.set(approved(t), true) })
			first, firstName := "", ""
			statuses := map[string]int{}
			for _, ag := range agents {
				got, status := ag.a.exchange(t, tc.msg)
				if ag.http {
					statuses[ag.name] = status
				}
				if first == "" {
					first, firstName = got, ag.name
					checkShape(t, ag.name, got, tc.code, tc.tool, tc.want)
					continue
				}
				if got != first {
					t.Errorf("%s answered\n  %s\nbut %s answered\n  %s", ag.name, got, firstName, first)
				}
			}
			if e, ok := coded.Lookup(string(tc.code)); ok && e.HTTP != 0 && (tc.code == session.InvalidMessage || tc.code == session.MessageTooLarge) {
				for name, status := range statuses {
					if status != session.HTTPStatus(tc.code) {
						t.Errorf("%s: HTTP %d, want %d (the registry's for %s)", name, status, session.HTTPStatus(tc.code), tc.code)
					}
				}
			}
		})
	}
}

// checkShape asserts that answer is the refusal the registry gives code:
// a tool error, or a JSON-RPC error with the registry's error code (each
// element of a batch); with no code, that it carries want.
func checkShape(t *testing.T, transport, answer string, code session.Code, tool bool, want string) {
	t.Helper()
	if code == "" {
		if !strings.Contains(answer, want) || strings.Contains(answer, "mcpdrift/code") {
			t.Fatalf("%s: %s, want an answer with %s and no refusal", transport, answer, want)
		}
		return
	}
	type message struct {
		ID     json.RawMessage `json:"id"`
		Result *struct {
			IsError bool              `json:"isError"`
			Meta    map[string]string `json:"_meta"`
		} `json:"result"`
		Error *struct {
			Code int               `json:"code"`
			Data map[string]string `json:"data"`
		} `json:"error"`
	}
	var msgs []message
	if strings.HasPrefix(answer, "[") {
		if err := json.Unmarshal([]byte(answer), &msgs); err != nil {
			t.Fatalf("%s: %s: %v", transport, answer, err)
		}
	} else {
		var m message
		if err := json.Unmarshal([]byte(answer), &m); err != nil {
			t.Fatalf("%s: %s: %v", transport, answer, err)
		}
		msgs = append(msgs, m)
	}
	e, _ := coded.Lookup(string(code))
	for _, m := range msgs {
		switch {
		case tool:
			if m.Result == nil || !m.Result.IsError || m.Result.Meta["mcpdrift/code"] != string(code) || !e.Tool {
				t.Fatalf("%s: %s, want a tool error with code %s (the registry says a tool error: %v)", transport, answer, code, e.Tool)
			}
		default:
			if m.Error == nil || m.Error.Code != e.RPC || m.Error.Data["mcpdrift/code"] != string(code) {
				t.Fatalf("%s: %s, want JSON-RPC error %d with code %s", transport, answer, e.RPC, code)
			}
		}
	}
}
