package streamhttp

import (
	"context"
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

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// The tests in this file are the hostile round on the borrowed parse of
// the client's message and on the end of a session: what the upstream
// gets is what the proxy judged, and a server cannot keep its drift from
// being published.

// barrierApprover holds every approval request until want of them wait,
// then approves them all; it keeps what each asked.
type barrierApprover struct {
	want  int
	mu    sync.Mutex
	asked map[string][]byte // the arguments an admin saw, by the call's digest
	all   chan struct{}     // closed once want wait
}

func (a *barrierApprover) Await(ctx context.Context, req session.ApprovalRequest) session.Approval {
	a.mu.Lock()
	a.asked[req.ArgsDigest] = append([]byte(nil), req.Arguments...)
	if len(a.asked) == a.want {
		close(a.all)
	}
	a.mu.Unlock()
	select {
	case <-a.all:
		return session.Approval{ID: "a-" + req.ArgsDigest[7:15], Outcome: session.ApprovalApproved, Actor: "alice"}
	case <-ctx.Done():
		return session.Approval{Outcome: session.ApprovalTimeout}
	}
}

// postErr is post for goroutines other than the test's.
func postErr(url string, h map[string]string, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestHeldCallBytesAreJudged: the client's message is parsed into a
// borrowed Doc given back once its POST is served, and other POSTs reuse
// it meanwhile. Calls held for an admin's approval wait while many other
// POSTs (calls the policy sanitizes, calls it allows) are parsed, judged
// and forwarded beside them; once approved, each held call reaches the
// upstream byte for byte as the client wrote it (and the arguments the
// admin saw are exactly its arguments), each sanitized call as the client
// wrote it but for the redacted member, each allowed one unchanged. Run
// it with -race: a held call reading a Doc another POST reuses is a race.
func TestHeldCallBytesAreJudged(t *testing.T) {
	const held, others = 12, 96
	var mu sync.Mutex
	got := map[string]string{} // the tools/call bodies the upstream got, by id
	up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc, body []byte) bool {
		switch m.Method {
		case "initialize":
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fs","version":"1"}}`)
		case "tools/list":
			writeJSONRPC(w, m.ID, `{"tools":[{"name":"write","inputSchema":{"type":"object"}},{"name":"send","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}`)
		case "tools/call":
			mu.Lock()
			got[string(m.ID)] = string(body)
			mu.Unlock()
			writeJSONRPC(w, m.ID, `{"content":[{"type":"text","text":"ok"}]}`)
		case "":
			w.WriteHeader(http.StatusAccepted)
		default:
			writeJSONRPC(w, m.ID, `{}`)
		}
		return true
	})
	d, err := policy.Parse([]byte(`rules:
  - {id: hold, tenant: default, tool: write, action: pending_approval, reason: writes need a human}
  - {id: redact, tenant: default, tool: send, action: sanitize, redact: [$.token]}
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile("default", d)
	if err != nil {
		t.Fatal(err)
	}
	ap := &barrierApprover{want: held, asked: map[string][]byte{}, all: make(chan struct{})}
	_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 30 * time.Second, Policy: sessiontest.Policy[session.Code]{Set: set}, Approvals: ap})
	poll.Eventually(t, 10*time.Second, g.approvedOnce)

	// Each body differs from the others in its bytes and its layout
	// (escapes, spacing, member order, sizes), so that bytes read from
	// another POST's parse would show.
	type sent struct{ id, body, want, args string }
	var calls []sent
	pad := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 1+(i*37)%700) }
	for i := range held {
		args := fmt.Sprintf(`{"path":"/tmp/f%d","text":"%s\u00e9\n","n":%d.50}`, i, pad(i), i)
		body := fmt.Sprintf(`{"params":{"arguments":%s,  "name":"write"},"id":"w-%d","method":"tools/call","jsonrpc":"2.0"}`, args, i)
		calls = append(calls, sent{fmt.Sprintf(`"w-%d"`, i), body, body, args})
	}
	for i := range others {
		if i%2 == 0 {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"send","arguments":{"token":"secret-%d-%s","to":"x%d"}}}`, 1000+i, i, pad(i+3), i)
			want := strings.Replace(body, fmt.Sprintf(`"secret-%d-%s"`, i, pad(i+3)), `"`+policy.Redacted+`"`, 1)
			calls = append(calls, sent{fmt.Sprint(1000 + i), body, want, ""})
			continue
		}
		body := fmt.Sprintf(`{"jsonrpc":"2.0","method":"tools/call","id":%d,"params":{"name":"echo","arguments":{"s":"%s","k":[%d,{"z":null}]}}}`, 1000+i, pad(i+11), i)
		calls = append(calls, sent{fmt.Sprint(1000 + i), body, body, ""})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(calls))
	// The held calls first, so that the others are parsed while they wait.
	for _, c := range calls[:held] {
		wg.Go(func() {
			status, body, err := postErr(url, h, c.body)
			if err == nil && (status != http.StatusOK || !strings.Contains(body, `"result"`) || !strings.Contains(body, `"id":`+c.id)) {
				err = fmt.Errorf("held call %s: HTTP %d %s", c.id, status, body)
			}
			errs <- err
		})
	}
	poll.Eventually(t, 10*time.Second, func() error {
		ap.mu.Lock()
		defer ap.mu.Unlock()
		if len(ap.asked) < held/2 {
			return fmt.Errorf("%d calls held, want at least %d before the others", len(ap.asked), held/2)
		}
		return nil
	})
	for _, c := range calls[held:] {
		wg.Go(func() {
			status, body, err := postErr(url, h, c.body)
			if err == nil && (status != http.StatusOK || !strings.Contains(body, `"result"`)) {
				err = fmt.Errorf("call %s: HTTP %d %s", c.id, status, body)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		if got[c.id] != c.want {
			t.Errorf("the upstream got for %s\n%s\nwant\n%s", c.id, got[c.id], c.want)
		}
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	var seen []string
	for _, a := range ap.asked {
		seen = append(seen, string(a))
	}
	for _, c := range calls[:held] {
		found := false
		for _, a := range seen {
			found = found || a == c.args
		}
		if !found {
			t.Errorf("no admin saw the arguments of %s as written: %s", c.id, c.args)
		}
	}
}

// TestRefusedDeleteKeepsPublishing: the client's DELETE ends the session
// before it is forwarded (Session.End: its own gets under way publish
// nothing). An upstream that refuses the DELETE (405: it does not let
// clients end sessions, as the transport allows) keeps the session open,
// and the client may go on using it: the session must go on publishing.
// Else the server, once it has refused a DELETE, announces a change of its
// resources (the proxy reads its UI again, in a round the ended session
// never finishes) and from then on changes its tools unseen by the
// pipeline: nothing the session lists is published again.
func TestRefusedDeleteKeepsPublishing(t *testing.T) {
	var rugged atomic.Bool
	var deletes, reads atomic.Int64
	up := appUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc) bool {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
			w.Header().Set("Allow", "POST")
			w.WriteHeader(http.StatusMethodNotAllowed)
			return true
		}
		desc := "Shows the notes."
		if rugged.Load() {
			desc = "Shows the notes. " + marker
		}
		switch m.Method {
		case "initialize":
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"resources":{"listChanged":true}},"serverInfo":{"name":"app","version":"1"}}`)
		case "tools/list":
			writeJSONRPC(w, m.ID, `{"tools":[{"name":"view","description":"`+desc+`","inputSchema":{"type":"object"},"_meta":{"ui":{"resourceUri":"ui://app/view.html"}}}]}`)
		case "resources/read":
			reads.Add(1)
			return false
		case "ping":
			// The change, announced on the answer to the client's request.
			w.Header().Set("Content-Type", "text/event-stream")
			if rugged.Load() {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			} else {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n")
			}
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", m.ID)
		default:
			return false
		}
		return true
	})
	_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 5 * time.Second})
	poll.Eventually(t, 10*time.Second, g.approvedOnce)

	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", "s1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || deletes.Load() != 1 {
		t.Fatalf("DELETE refused upstream: HTTP %d, %d reached it", resp.StatusCode, deletes.Load())
	}
	// The session goes on; the server announces a change of its
	// resources (the proxy lists them and reads the UI again), then
	// changes its tool and announces that.
	if resp, body := post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping after the refused DELETE: HTTP %d %s", resp.StatusCode, body)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if n := reads.Load(); n < 2 {
			return fmt.Errorf("%d reads of the UI, want the proxy's second", n)
		}
		return nil
	})
	rugged.Store(true)
	if resp, body := post(t, url, h, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); resp.StatusCode != http.StatusOK || strings.Contains(body, marker) {
		t.Fatalf("ping after the change: HTTP %d %s", resp.StatusCode, body)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, l := range g.listings {
			if strings.Contains(l, marker) {
				return nil
			}
		}
		return fmt.Errorf("%d captures published, none with the changed tool", len(g.listings))
	})
	// The agent is never shown the changed tool meanwhile.
	if _, body := post(t, url, h, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); strings.Contains(body, marker) {
		t.Fatalf("the changed tool reached the agent: %s", body)
	}
}

// TestOwnReadUnanswered: the proxy's own read of a UI resource whose
// answer holds no response to it (an event stream that ends without one,
// one that breaks, a JSON answer to another id, a 202) is told to the
// session at once (Session.OwnFailed), as one the upstream refuses is, not
// left to the read's bound (four times the decision bound of 30 s, beyond
// the test): the capture published holds the read's placeholder, so the
// server is held (fail closed), and nothing of the answer reached a
// client.
func TestOwnReadUnanswered(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer func(w http.ResponseWriter, id json.RawMessage)
	}{
		{"stream_ends", func(w http.ResponseWriter, _ json.RawMessage) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, ": nothing\n\nid: 7\ndata:\n\n")
		}},
		{"stream_breaks", func(w http.ResponseWriter, _ json.RawMessage) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+strings.Repeat("x", 100<<10)+"\n\n")
		}},
		{"json_other_id", func(w http.ResponseWriter, _ json.RawMessage) {
			writeJSONRPC(w, json.RawMessage(`"mcpdrift-not-asked"`), `{"contents":[{"uri":"ui://app/view.html","text":"`+marker+`"}]}`)
		}},
		{"accepted", func(w http.ResponseWriter, _ json.RawMessage) { w.WriteHeader(http.StatusAccepted) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := appUpstream(t, func(w http.ResponseWriter, _ *http.Request, m rpc) bool {
				if m.Method != "resources/read" {
					return false
				}
				tt.answer(w, m.ID)
				return true
			})
			_, _, _, g := appProxy(t, up, Config{MaxMessage: 64 << 10}, session.Config{Timeout: 30 * time.Second})
			poll.Eventually(t, 10*time.Second, func() error {
				g.mu.Lock()
				defer g.mu.Unlock()
				if len(g.listings) == 0 {
					return fmt.Errorf("nothing published after an unanswered read")
				}
				return nil
			})
			g.mu.Lock()
			defer g.mu.Unlock()
			if l := g.listings[0]; !strings.Contains(l, "mcpdrift/unreadable") || strings.Contains(l, marker) {
				t.Fatalf("published a capture without the placeholder of the unanswered read:\n%s", l)
			}
		})
	}
}

// TestOwnAnswerOnClientStream: a server that answers the proxy's own read
// of its UI on the stream of a client's request (the proxy's own POST
// kept open, silent) gets it judged as the proxy's own: the session
// publishes the contents it sent there, and the client reads nothing of
// it, only its own answer.
func TestOwnAnswerOnClientStream(t *testing.T) {
	ownID := make(chan json.RawMessage, 1)
	release := make(chan struct{})
	up := appUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc) bool {
		switch m.Method {
		case "resources/read":
			// Kept open, silent: the answer goes elsewhere.
			ownID <- m.ID
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "ping":
			id := <-ownID
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"contents\":[{\"uri\":\"ui://app/view.html\",\"mimeType\":\"text/html;profile=mcp-app\",\"text\":\"<p>%s</p>\"}]}}\n\n", id, marker)
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", m.ID)
		default:
			return false
		}
		return true
	})
	t.Cleanup(func() { close(release) })
	_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 30 * time.Second})
	resp, body := post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	msgs := clientMessages(t, resp, body)
	if strings.Contains(body, marker) || strings.Contains(body, "mcpdrift-") || len(msgs) != 1 || fmt.Sprint(msgs[0]["id"]) != "1" || msgs[0]["result"] == nil {
		t.Fatalf("the client's stream carrying the proxy's own answer: HTTP %d %q", resp.StatusCode, body)
	}
	poll.Eventually(t, 10*time.Second, g.approvedOnce)
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.listings[0]; !strings.Contains(l, `"uiContents"`) || !strings.Contains(l, marker) || strings.Contains(l, "mcpdrift/unreadable") {
		t.Fatalf("the capture published is not the contents the server sent for the proxy's read:\n%s", l)
	}
}

// TestReusedIDStreamable: a careless client that numbers every request 1
// (Streamable HTTP answers each POST on its own, so it never notices)
// sends a tools/list and, while it is in flight, a ping under the same id.
// The ping is refused (request_ambiguous) and never forwarded, so the
// server's answer to the listing, which carries a tool nobody approved, is
// judged as the listing it is: the client never reads the tool.
func TestReusedIDStreamable(t *testing.T) {
	r := newHostileRig(t, Config{})
	answer, held := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release := func() { once.Do(func() { close(answer) }) }
	t.Cleanup(release) // before the upstream closes: its handler waits on answer
	written := make(chan struct{})
	r.setScript(func(w http.ResponseWriter, _ *http.Request, m rpc) {
		switch m.Method {
		case "tools/list":
			held <- struct{}{}
			<-answer
			writeJSONRPC(w, m.ID, evilTools)
			http.NewResponseController(w).Flush()
			close(written)
		case "ping":
			// Had the ping come through, the listing is answered first,
			// under the id the ping took.
			release()
			select {
			case <-written:
			case <-time.After(5 * time.Second):
			}
			writeJSONRPC(w, m.ID, `{}`)
		default:
			writeJSONRPC(w, m.ID, `{}`)
		}
	})
	type result struct {
		resp *http.Response
		body string
	}
	listed := make(chan result, 1)
	go func() {
		status, body, err := postErr(r.url, r.h(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if err != nil {
			body = err.Error()
		}
		listed <- result{&http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}}, body}
	}()
	<-held // the listing is in flight: the upstream holds it
	before := r.up.hits.Load()
	resp, body := post(t, r.url, r.h(), `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if r.up.hits.Load() != before || !strings.Contains(body, `"mcpdrift/code":"`+string(session.RefuseAmbiguous)+`"`) {
		t.Errorf("a ping under the id of a listing in flight: HTTP %d %s (forwarded %d)", resp.StatusCode, body, r.up.hits.Load()-before)
	}
	release()
	got := <-listed
	if strings.Contains(got.body, evilTool) || !strings.Contains(got.body, `"result":{"tools":[`) {
		t.Fatalf("the listing answered while its id was reused: %s", got.body)
	}
}

// TestClientAnswerOnOwnStream: a server that answers the client's request
// on the stream of the proxy's own re-listing (which no client reads) must
// not leave the client with neither the answer nor an error: the client's
// call gets an answer (its own, judged) or the proxy's coded error, never
// an empty 202 to a request.
func TestClientAnswerOnOwnStream(t *testing.T) {
	for _, tt := range []struct{ name, first string }{
		{"readable", `{"jsonrpc":"2.0","id":{{id}},"result":{"content":[{"type":"text","text":"on the proxy's stream"}]}}`},
		{"unreadable", `{"jsonrpc":"2.0","id":{{id}},"result":{"content":[],"content":[{"type":"text","text":"on the proxy's stream"}]}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			callHeld := make(chan json.RawMessage, 1)
			release := make(chan struct{})
			var once sync.Once
			releaseAll := func() { once.Do(func() { close(release) }) }
			var lists atomic.Int64
			up := mcpUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc, body []byte) bool {
				const tools = `{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`
				switch m.Method {
				case "initialize":
					writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"h","version":"1"}}`)
				case "tools/list":
					if lists.Add(1) == 1 {
						writeJSONRPC(w, m.ID, tools)
						return true
					}
					// The re-listing: the client's call answered here first.
					id := <-callHeld
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "data: %s\n\n", strings.ReplaceAll(tt.first, "{{id}}", string(id)))
					http.NewResponseController(w).Flush()
					fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n\n", m.ID, tools)
				case "tools/call":
					callHeld <- m.ID
					select {
					case <-release:
					case <-r.Context().Done():
						return true
					}
					writeJSONRPC(w, m.ID, `{"content":[{"type":"text","text":"on the call's stream"}]}`)
				case "ping":
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
					fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n\n", m.ID)
				default:
					w.WriteHeader(http.StatusAccepted)
				}
				return true
			})
			t.Cleanup(releaseAll)
			_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 5 * time.Second})
			poll.Eventually(t, 10*time.Second, g.approvedOnce)
			type result struct {
				status int
				body   string
				err    error
			}
			called := make(chan result, 1)
			go func() {
				status, body, err := postErr(url, h, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
				called <- result{status, body, err}
			}()
			// The call is in flight (the upstream holds it) when the server
			// announces a change.
			poll.Eventually(t, 10*time.Second, func() error {
				if len(callHeld) == 0 {
					return fmt.Errorf("the call has not reached the upstream")
				}
				return nil
			})
			// The ping's list_changed is delivered once the re-listing is done
			// (or given up): the proxy has read its stream by then.
			post(t, url, h, `{"jsonrpc":"2.0","id":6,"method":"ping"}`)
			releaseAll()
			got := <-called
			if got.err != nil {
				t.Fatal(got.err)
			}
			t.Logf("the call got HTTP %d %s", got.status, got.body)
			ok := strings.Contains(got.body, `"result"`) || strings.Contains(got.body, `"mcpdrift/code"`)
			if got.status == http.StatusAccepted || !ok || !strings.Contains(got.body, `"id":5`) {
				t.Fatalf("the client's call answered on the proxy's own stream: HTTP %d %q, want its answer or a coded error", got.status, got.body)
			}
		})
	}
}

// TestMonitorOpensAgainAfterRefusal: the monitor's opening message, booked
// in its session as a client's request under one id every round, is freed
// once its exchange is over, answered or not: the server/discover the
// server refuses with HTTP 400 (-32022) leaves nothing in flight, so the
// initialize it falls back to is sent (the session refuses an id in
// flight), and the server is listed in it.
func TestMonitorOpensAgainAfterRefusal(t *testing.T) {
	var inits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m rpc
		_ = json.Unmarshal(body, &m)
		switch m.Method {
		case "server/discover":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32022,"message":"unsupported protocol version","data":{"supported":["2025-06-18"]}}}`, m.ID)
		case "initialize":
			inits.Add(1)
			writeJSONRPC(w, m.ID, `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}`)
		case "tools/list":
			writeJSONRPC(w, m.ID, `{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}`)
		case "":
			w.WriteHeader(http.StatusAccepted)
		default:
			writeJSONRPC(w, m.ID, `{}`)
		}
	}))
	t.Cleanup(up.Close)
	g := newTofu()
	p, err := New(Config{Log: zerolog.New(zerolog.NewTestWriter(t))}, []Upstream{{ID: "a", URL: up.URL + "/mcp", Gate: g, Observer: g,
		Session: session.Config{Timeout: 5 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	resp, body := post(t, srv.URL+"/a/mcp", map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stateless request: HTTP %d %s", resp.StatusCode, body)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if inits.Load() == 0 {
			return fmt.Errorf("the monitor fell back without sending initialize")
		}
		return nil
	})
	poll.Eventually(t, 10*time.Second, g.approvedOnce)
}
