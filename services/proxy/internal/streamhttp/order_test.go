package streamhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// orderUpstream is a real MCP server (the Go SDK) behind a front that holds
// the session's GET answer until released (or until a request of the
// session arrives while it is held: the order the client sent is then
// lost, and it is written down).
type orderUpstream struct {
	mu        sync.Mutex
	getHeld   bool   // a GET arrived and is being held
	getDone   bool   // the held GET was let go
	violation string // a request that overtook the client's GET
	release   chan struct{}
}

func (o *orderUpstream) state() (held, done bool, violation string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.getHeld, o.getDone, o.violation
}

func (o *orderUpstream) let() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.getDone {
		o.getDone = true
		close(o.release)
	}
}

func (o *orderUpstream) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			o.mu.Lock()
			o.getHeld = true
			o.mu.Unlock()
			<-o.release
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &m)
			o.mu.Lock()
			if m.Method == "tools/call" && o.getHeld && !o.getDone {
				o.violation = "tools/call reached the server before the client's earlier GET was answered"
			}
			o.mu.Unlock()
			if m.Method == "tools/call" {
				o.let() // on main the call overtook the GET: let both go
			}
		}
		next.ServeHTTP(w, r)
	})
}

// TestClientOrderKeptUpstream: a client opens its GET stream and then
// calls a tool without waiting for the stream's answer (as the SDKs'
// clients do at session start); the server must see the call only after
// it answered the GET, as it would directly (an SDK server sends requests
// of its own, sampling and elicitation, on that stream, and drops them
// while none is open). Fails without order.go: the call overtakes the GET.
func TestClientOrderKeptUpstream(t *testing.T) {
	o := &orderUpstream{release: make(chan struct{})}
	srv := newMCPServer()
	upstream := httptest.NewServer(o.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	t.Cleanup(upstream.Close)
	t.Cleanup(o.let)
	gate := newTofu()
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "ev", URL: upstream.URL + "/mcp", Gate: gate, Observer: gate,
		Session: session.Config{Timeout: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	via := front.URL + "/ev/mcp"

	resp, _ := postRaw(t, via, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize through the proxy: %s, no session", resp.Status)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	if resp, body := postRaw(t, via, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %s %s", resp.Status, body)
	}
	poll.Eventually(t, 10*time.Second, gate.approvedOnce)

	// The GET, held upstream.
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodGet, via, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close() // the stream is not read: its headers are what counts
		}
	}()
	poll.Eventually(t, 10*time.Second, func() error {
		if held, _, _ := o.state(); !held {
			return errors.New("the client's GET has not reached the server yet")
		}
		return nil
	})
	// The call, sent while the GET has no answer yet; the server lets the
	// GET go after a moment if the call does not overtake it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(300 * time.Millisecond)
		o.let()
	}()
	hc := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
	resp, body := postRaw(t, via, hc, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if resp.StatusCode != http.StatusOK || !bytes.Contains([]byte(body), []byte(`"hi"`)) {
		t.Fatalf("the call through the proxy: %s %s", resp.Status, body)
	}
	if _, _, v := o.state(); v != "" {
		t.Fatal(v)
	}
}

// TestClientWithoutGetServed: a client that opens no GET stream is served
// all the same (its first request waits at most getGrace).
func TestClientWithoutGetServed(t *testing.T) {
	r := newRig(t, modes[0])
	resp, _ := postRaw(t, r.via, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}
	postRaw(t, r.via, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h["Mcp-Method"], h["Mcp-Name"] = "tools/call", "echo"
	resp, body := postRaw(t, r.via, h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if resp.StatusCode != http.StatusOK || !bytes.Contains([]byte(body), []byte(`"hi"`)) {
		t.Fatalf("the call through the proxy: %s %s", resp.Status, body)
	}
}
