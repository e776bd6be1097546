package streamhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// TestServerRequestOnOwnStream: a server may send requests on the stream
// of a POST's answer before the response (roots/list while it lists its
// tools, a ping). On the answer to a request of the proxy's own no agent
// reads them, and none answers: the server, waiting, never answered the
// proxy's listing, so the session's surface was never published and every
// call waited for a verdict that could not come. The proxy answers them in
// the agent's stead (a ping with its own empty result, any other request
// with an error, request_unroutable), and counts them.
func TestServerRequestOnOwnStream(t *testing.T) {
	var mu sync.Mutex
	answers := map[string]string{} // the answers the upstream got to its requests, by id
	answered := make(chan struct{}, 4)
	var lists, pings atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch {
		case m.Method == "initialize":
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"h","version":"1"}}`)
		case m.Method == "tools/list":
			// The server asks its client for roots (and pings it) before it
			// lists its tools, and waits for both answers.
			n := lists.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-%d-roots\",\"method\":\"roots/list\"}\n\n", n)
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"srv-%d-ping\",\"method\":\"ping\"}\n\n", n)
			http.NewResponseController(w).Flush()
			for range 2 {
				select {
				case <-answered:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}}\n\n", m.ID)
		case m.Method == "ping" && pings.Add(1) == 1:
			// The server announces a change: the proxy lists it again, the
			// server open now.
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", m.ID)
		case m.Method == "ping":
			writeJSONRPC(w, m.ID, `{}`)
		case m.Method == "" && m.ID != nil:
			mu.Lock()
			answers[strings.Trim(string(m.ID), `"`)] = string(body)
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			answered <- struct{}{}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(up.Close)
	meter := &sessiontest.Meter[session.Code]{}
	_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 5 * time.Second, Meter: meter})
	// The proxy's own listing completes: the server got its answers.
	poll.Eventually(t, 10*time.Second, g.approvedOnce)
	check := func(n int) {
		t.Helper()
		var roots, ping string
		poll.Eventually(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			roots, ping = answers[fmt.Sprintf("srv-%d-roots", n)], answers[fmt.Sprintf("srv-%d-ping", n)]
			if roots == "" || ping == "" {
				return fmt.Errorf("listing %d: the server's requests unanswered (roots %q, ping %q)", n, roots, ping)
			}
			return nil
		})
		if !strings.Contains(roots, `"error"`) || !strings.Contains(roots, `"mcpdrift/code":"`+string(session.DropUnroutable)+`"`) {
			t.Errorf("listing %d: the server's roots/list was answered %q, want an error coded %s", n, roots, session.DropUnroutable)
		}
		if want := fmt.Sprintf(`{"jsonrpc":"2.0","id":"srv-%d-ping","result":{}}`, n); ping != want {
			t.Errorf("listing %d: the server's ping was answered %q, want %q", n, ping, want)
		}
		if got := meter.Drops(session.DropUnroutable); got != 2*n {
			t.Errorf("%d drops counted %s, want %d: %v", got, session.DropUnroutable, 2*n, meter)
		}
	}
	check(1)
	// The server, open now, announces a change: on the proxy's re-listing
	// its requests are answered the same.
	post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	check(2)
	// And the session serves.
	resp, body := post(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if resp.StatusCode/100 != 2 || strings.Contains(body, "mcpdrift/code") {
		t.Fatalf("a ping after the listing: HTTP %d %s", resp.StatusCode, body)
	}
}

// TestHostileLegacyEndpoint: HTTP+SSE (2024-11-05) from a hostile server:
// what it sends before its endpoint event (a request of its own, an
// answer to an id never asked, a notification) reaches no agent while its
// status is unknown; an endpoint with ../, a query and a fragment is
// resolved against the SSE URL as clients resolve it (same origin: the
// proxy posts there, query kept, fragment never sent); a stream that ends
// ends its session, and a client that reconnects gets a new one, the old
// one's posts refused.
func TestHostileLegacyEndpoint(t *testing.T) {
	var mu sync.Mutex
	var posted []string // path?query of each POST, then its body
	events := make(chan string, 16)
	var streams atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			posted = append(posted, r.URL.RequestURI()+" "+string(b))
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			return
		}
		streams.Add(1)
		defer streams.Add(-1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for {
			select {
			case ev := <-events:
				if ev == "" {
					return // the stream ends
				}
				_, _ = io.WriteString(w, ev)
				_ = rc.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(up.Close) // after the proxy's stream to it has ended
	meter := &sessiontest.Meter[session.Code]{}
	_, srvURL, rd, _ := legacyStream(t, up.URL+"/a/sse", session.Config{Timeout: 5 * time.Second, Meter: meter})

	events <- "data: {\"jsonrpc\":\"2.0\",\"id\":\"early\",\"method\":\"roots/list\"}\n\n"
	events <- "data: {\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" + marker + "\"}]}}\n\n"
	events <- "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"" + marker + "\"}}\n\n"
	events <- "event: endpoint\ndata: ../messages?k=v#frag\n\n"
	ev, err := rd.next()
	if err != nil {
		t.Fatal(err)
	}
	if string(ev.Name) != "endpoint" || !strings.HasPrefix(string(ev.Data), "/l/messages?session=") {
		t.Fatalf("the agent's first event: %q %q, want the proxy's endpoint", ev.Name, ev.Data)
	}
	if n := meter.Drops(session.DropUnmatched) + meter.Drops(session.DropServerClosed); n != 3 {
		t.Errorf("drops %v, want the three messages before the endpoint", meter)
	}
	endpoint := srvURL + string(ev.Data)
	hr, body := post(t, endpoint, nil, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if hr.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: HTTP %d %q", hr.StatusCode, body)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range posted {
			if strings.Contains(p, `"method":"ping"`) {
				if !strings.HasPrefix(p, "/messages?k=v ") {
					return fmt.Errorf("posted to %q, want /messages?k=v", p)
				}
				return nil
			}
		}
		return fmt.Errorf("the ping was not posted upstream (%q)", posted)
	})
	events <- "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	if ev, err = rd.next(); err != nil || !strings.Contains(string(ev.Data), `"id":1,"result":{}`) {
		t.Fatalf("the ping's answer: %q %v", ev.Data, err)
	}

	// The stream ends: so does the session, and the agent's stream.
	events <- ""
	if ev, err := rd.next(); err == nil {
		t.Fatalf("after the upstream stream ended the agent got %q %q", ev.Name, ev.Data)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		hr, body := post(t, endpoint, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		if hr.StatusCode/100 == 2 || !strings.Contains(body, string(CodeUnknownStream)) {
			return fmt.Errorf("a POST to the ended session: HTTP %d %q", hr.StatusCode, body)
		}
		return nil
	})
	// A new stream, a new session.
	resp2, _ := openSSE(t, srvURL+"/l/sse")
	events <- "event: endpoint\ndata: /messages\n\n"
	ev, err = newSSEReader(resp2.Body, 1<<20).next()
	if err != nil || string(ev.Name) != "endpoint" || "/l/messages?session="+strings.TrimPrefix(endpoint, srvURL+"/l/messages?session=") == string(ev.Data) {
		t.Fatalf("the new stream's endpoint: %q %v (the old %q)", ev.Data, err, endpoint)
	}
}

// TestAnswerOnResponsePost: the answer to a POST that forwarded no request
// (the agent's answer to a server's request, a notification) is read by
// no client (both SDKs discard its body); a server that answers an
// agent's call in flight there had the session take the call for
// answered: the call's own POST then got an empty 202, and the agent never
// its answer. A response there is dropped (response_unmatched): the call
// gets its answer on its own POST.
func TestAnswerOnResponsePost(t *testing.T) {
	for _, media := range []string{"json", "sse"} {
		t.Run(media, func(t *testing.T) {
			r := newHostileRig(t, Config{})
			callID := make(chan json.RawMessage, 1)
			hijacked := make(chan struct{})
			r.setScript(func(w http.ResponseWriter, req *http.Request, m rpc) {
				switch m.Method {
				case "tools/call":
					callID <- m.ID
					select {
					case <-hijacked:
					case <-req.Context().Done():
						return
					}
					writeJSONRPC(w, m.ID, `{"content":[{"type":"text","text":"on its own stream"}]}`)
				case "":
					// The agent's answer to a request of the server's: its
					// POST's answer carries the call's answer.
					id := <-callID
					answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`, id, marker)
					if media == "sse" {
						w.Header().Set("Content-Type", "text/event-stream")
						fmt.Fprintf(w, "data: %s\n\n", answer)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, answer)
				default:
					writeJSONRPC(w, m.ID, `{}`)
				}
			})
			type result struct {
				status int
				body   string
				err    error
			}
			called := make(chan result, 1)
			go func() {
				status, body, err := postErr(r.url, r.h(), `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
				called <- result{status, body, err}
			}()
			poll.Eventually(t, 10*time.Second, func() error {
				if len(callID) == 0 {
					return fmt.Errorf("the call has not reached the upstream")
				}
				return nil
			})
			resp, body := post(t, r.url, r.h(), `{"jsonrpc":"2.0","id":"srv-1","result":{"roots":[]}}`)
			close(hijacked) // the call is answered on its own stream once the answer POST was
			if resp.StatusCode/100 != 2 || strings.Contains(body, marker) {
			}
			got := <-called
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.status != http.StatusOK || !strings.Contains(got.body, "on its own stream") || !strings.Contains(got.body, `"id":5`) {
				t.Fatalf("the call: HTTP %d %q, want its answer", got.status, got.body)
			}
			if n := r.meter.Drops(session.DropUnmatched); n != 1 {
				t.Errorf("drops %v, want one %s", r.meter, session.DropUnmatched)
			}
		})
	}
}
