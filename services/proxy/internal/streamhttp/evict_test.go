package streamhttp

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestSessionEvictionUnderLoad: while requests use sessions (each notes
// its session's last use once it has looked the session up), new sessions
// keep registering past MaxSessions, so each registration sweeps the
// tracked sessions for the idle and the least recently used. The sweep
// reads every session's last use while requests write it: under -race, a
// read without the session's lock shows (issue 15). The bound holds
// throughout.
func TestSessionEvictionUnderLoad(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler()) // never reached
	t.Cleanup(up.Close)
	g := newTofu()
	const maxSessions = 4
	p, err := New(Config{MaxSessions: maxSessions, Log: zerolog.New(zerolog.NewTestWriter(t))},
		[]Upstream{{ID: "m", URL: up.URL + "/mcp", Gate: g, Observer: g, Session: session.Config{Timeout: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := p.fronts["m"]
	var hot []*tracked
	for i := range maxSessions {
		tr := f.newTracked("")
		if !f.register(tr, fmt.Sprintf("hot-%d", i)) {
			t.Fatalf("session hot-%d not registered", i)
		}
		hot = append(hot, tr)
	}
	req := httptest.NewRequest(http.MethodPost, "/m/mcp", nil)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")

	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, tr := range hot {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
					tr.note(req) // a request on the session, after its lookup
				}
			}
		})
	}
	for i := range 2000 {
		if !f.register(f.newTracked(""), fmt.Sprintf("new-%d", i)) {
			t.Fatalf("session new-%d not registered", i)
		}
		f.mu.Lock()
		n := len(f.sessions)
		f.mu.Unlock()
		if n > maxSessions {
			t.Fatalf("%d sessions tracked, want at most %d", n, maxSessions)
		}
	}
	close(done)
	wg.Wait()
}
