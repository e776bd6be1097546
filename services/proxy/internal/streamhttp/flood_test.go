package streamhttp

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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session/sessiontest"
)

// TestListChangedFloodStreamable: a server floods its session's GET stream
// with 10,000 tools/list_changed, and answers the proxy's re-listings only
// once the proxy has read the flood (as a server that does not read while
// it writes). The proxy re-lists at most twice (one in flight, one owed),
// the agent hears of the change, an agent's tools/call sent during the
// flood is answered, and the approved surface is served after it.
func TestListChangedFloodStreamable(t *testing.T) {
	const burst = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The decision bound outlasts the flood: reading 10,000 events can
	// take longer than the rig's 5 s on a loaded machine, and a held
	// list_changed given up at the bound makes the next one held rather
	// than coalesced (and a re-listing in flight that long, a second).
	r := newHostileRigBound(t, Config{}, 5*time.Minute)
	var relists atomic.Int64
	read := make(chan struct{}) // closed once the proxy has read the whole flood
	r.setScript(func(w http.ResponseWriter, req *http.Request, m rpc) {
		switch m.Method {
		case "tools/list":
			if strings.HasPrefix(string(m.ID), `"mcpdrift-`) {
				relists.Add(1)
				select {
				case <-read:
				case <-req.Context().Done():
					return
				}
			}
			writeJSONRPC(w, m.ID, cleanTools)
		case "tools/call":
			writeJSONRPC(w, m.ID, `{"content":[{"type":"text","text":"echoed"}]}`)
		default:
			writeJSONRPC(w, m.ID, `{}`)
		}
	})
	r.up.mu.Lock()
	r.up.get = func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for range burst {
			_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
		}
		w.(http.Flusher).Flush()
		<-req.Context().Done()
	}
	r.up.mu.Unlock()

	// The agent's GET stream: it counts the list_changed it gets.
	get, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.h() {
		get.Header.Set(k, v)
	}
	get.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var heard atomic.Int64
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "list_changed") {
				heard.Add(1)
			}
		}
	}()

	// A call during the flood: answered (after the re-listing).
	called := make(chan string, 1)
	go func() {
		_, body := post(t, r.url, r.h(), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
		called <- body
	}()
	poll.Eventually(t, 3*time.Minute, func() error {
		if n := r.meter.Drops(session.DropCoalesced); n < burst-1 {
			return fmt.Errorf("%d of %d list_changed read and coalesced", n, burst-1)
		}
		return nil
	})
	close(read)
	select {
	case body := <-called:
		if !strings.Contains(body, "echoed") {
			t.Fatalf("tools/call during the flood: %s", body)
		}
	case <-ctx.Done():
		t.Fatal("tools/call during the flood not answered before the deadline")
	}
	poll.Eventually(t, 3*time.Minute, func() error {
		if heard.Load() == 0 {
			return fmt.Errorf("the agent heard of no change")
		}
		return nil
	})
	if n := relists.Load(); n < 1 || n > 2 {
		t.Errorf("the server saw %d re-listings for %d list_changed, want 1 or 2", n, burst)
	}
	if n := heard.Load(); n > 2 {
		t.Errorf("the agent got %d list_changed, want 1 or 2", n)
	}
	_, body := post(t, r.url, r.h(), `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
	if !strings.Contains(body, `"name":"echo"`) {
		t.Fatalf("listing after the flood: %s", body)
	}
	t.Logf("%d list_changed: %d re-listings, the agent heard %d, drops %s", burst, relists.Load(), heard.Load(), r.meter)
}

// TestOwnInFlightBounded: a session's own requests in flight upstream are
// bounded; past the bound one is refused (session.ErrServerBacklog, which
// the session counts and fails closed on), and once those in flight have
// ended the session is told, to list again what was refused.
func TestOwnInFlightBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &Proxy{done: make(chan struct{})}
	f := &front{p: p}
	var b ownBound
	release := make(chan struct{})
	var ran atomic.Int64
	do := func(context.Context) { <-release; ran.Add(1) }
	drained := make(chan struct{})
	sess := session.New(session.Config{}, nil, nil, func([]byte) error { return nil })
	told := func() *session.Session { close(drained); return sess }
	for i := range maxOwnInFlight {
		if err := b.send(f, told, do); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := b.send(f, told, do); !errors.Is(err, session.ErrServerBacklog) {
		t.Fatalf("past the bound: %v, want ErrServerBacklog", err)
	}
	close(release)
	select {
	case <-drained:
	case <-ctx.Done():
		t.Fatal("the session was never told the requests in flight ended")
	}
	p.wg.Wait()
	if n := ran.Load(); n != maxOwnInFlight {
		t.Fatalf("%d ran, want %d", n, maxOwnInFlight)
	}
}

// TestListChangedFloodMonitor: a stateless 2026-07-28 server floods the
// monitor's change stream (subscriptions/listen) with 10,000
// tools/list_changed and answers the proxy's re-listings only once the
// proxy has read the flood. The monitor re-lists at most twice beyond its
// first listing, and stateless calls and listings are served after.
func TestListChangedFloodMonitor(t *testing.T) {
	const burst = 10000
	srv := newCapServer()
	meter := &sessiontest.Meter[session.Code]{}
	var own atomic.Int64
	read := make(chan struct{})
	var flooded atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m rpc
		_ = json.Unmarshal(body, &m)
		switch {
		case m.Method == "subscriptions/listen" && !flooded.Swap(true):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for range burst {
				_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		case m.Method == "tools/list" && strings.HasPrefix(string(m.ID), `"mcpdrift-`):
			if own.Add(1) > 1 {
				select {
				case <-read:
				case <-r.Context().Done():
					return
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	g := newTofu()
	p, err := New(Config{Relist: time.Minute, Log: zerolog.New(zerolog.NewTestWriter(t))},
		[]Upstream{{ID: "ev", URL: up.URL + "/mcp", Gate: g, Observer: g, Session: session.Config{Timeout: 5 * time.Minute, Meter: meter}}})
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(p)
	t.Cleanup(func() { proxy.Close(); p.Close() })
	c := &capClient{t: t, url: proxy.URL + "/ev/mcp", caps: `{}`}
	c.tools() // starts the monitor of the client's variant
	poll.Eventually(t, time.Minute, func() error {
		if n := meter.Drops(session.DropCoalesced); n < burst-1 {
			return fmt.Errorf("%d of %d list_changed read and coalesced", n, burst-1)
		}
		return nil
	})
	close(read)
	poll.Eventually(t, time.Minute, func() error {
		if names := c.tools(); !slices.Contains(names, "basic") {
			return fmt.Errorf("served %v", names)
		}
		return nil
	})
	if text, refusal := c.call("basic"); refusal != "" {
		t.Fatalf("a call after the flood: %q %s", text, refusal)
	}
	if n := own.Load(); n < 2 || n > 3 {
		t.Errorf("the server saw %d listings of the proxy's own for %d list_changed, want 2 or 3 (the first, then at most two)", n, burst)
	}
	t.Logf("%d list_changed on the change stream: %d listings of the proxy's own, drops %s", burst, own.Load(), meter)
}
