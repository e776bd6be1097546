package streamhttp

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// TestOwnReadRefused: the proxy's own read of a UI resource that the
// upstream refuses at the HTTP level is told to the session at once
// (Session.OwnFailed), not left to the read's bound (four times the
// decision bound of 30 s here, beyond the test).
//
//   - Refused otherwise than 404: the read is made once more, and refused
//     again gets its placeholder at once, so the capture published is no
//     surface and the server is held (fail closed: a server that refused
//     the proxy's own gets alone would otherwise keep its surface from
//     being published).
//   - Refused with 404 (the upstream no longer knows the session, as after
//     the client's DELETE): the session ended, and the proxy forgets it, as
//     when the upstream answers a client's request so: the agent's next
//     request is answered 404 by the proxy itself, and the session
//     publishes nothing for the gets it had under way (Session.End; the
//     session's tests hold that part).
func TestOwnReadRefused(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
	}{{"server_error", http.StatusInternalServerError}, {"session_unknown", http.StatusNotFound}} {
		t.Run(tt.name, func(t *testing.T) {
			var reads atomic.Int64
			var mu sync.Mutex
			var agentIDs []string // the ids of the agent's requests the upstream got
			up := appUpstream(t, func(w http.ResponseWriter, _ *http.Request, m rpc) bool {
				if m.ID != nil && !strings.HasPrefix(string(m.ID), `"mcpdrift-`) {
					mu.Lock()
					agentIDs = append(agentIDs, string(m.ID))
					mu.Unlock()
				}
				if m.Method != "resources/read" {
					return false
				}
				reads.Add(1)
				http.Error(w, "refused", tt.status)
				return true
			})
			_, url, h, g := appProxy(t, up, Config{}, session.Config{Timeout: 30 * time.Second})
			if tt.status != http.StatusNotFound {
				poll.Eventually(t, 10*time.Second, func() error {
					g.mu.Lock()
					defer g.mu.Unlock()
					if len(g.listings) == 0 {
						return fmt.Errorf("nothing published after %d refused reads", reads.Load())
					}
					return nil
				})
				g.mu.Lock()
				defer g.mu.Unlock()
				if l := g.listings[0]; !strings.Contains(l, "mcpdrift/unreadable") {
					t.Fatalf("published a capture without the placeholder of the refused read:\n%s", l)
				}
				if n := reads.Load(); n != 2 {
					t.Fatalf("the upstream got %d reads, want the read and the one made again", n)
				}
				return
			}
			// Until the proxy has forgotten the session the agent's requests
			// pass; each has an id of its own, and the one answered 404
			// must not have reached the upstream.
			id := 100
			var body string
			poll.Eventually(t, 10*time.Second, func() error {
				id++
				var resp *http.Response
				resp, body = post(t, url, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id))
				if resp.StatusCode != http.StatusNotFound {
					return fmt.Errorf("the agent's request after the refused read: HTTP %d %s, want the proxy's 404", resp.StatusCode, body)
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			for _, got := range agentIDs {
				if got == fmt.Sprint(id) {
					t.Fatalf("the agent's request answered 404 reached the upstream (the proxy answered %s)", body)
				}
			}
			if !strings.Contains(body, `"session_unknown"`) {
				t.Fatalf("the agent's request on the forgotten session: %s, want the proxy's session_unknown", body)
			}
		})
	}
}

// TestOwnReadClosed: the proxy's own read of a UI that the proxy's Close
// cuts short (a restart, a rolling update) is not a failure of the
// server's: the session is not told (front.ownFailed), so no placeholder
// is published and the server is not held fleet-wide for it. Before, the
// cancelled read was told as lost and the capture published with its
// placeholder. Nothing is published within three times the wait of a
// read made again after Close; a publication would come within it.
func TestOwnReadClosed(t *testing.T) {
	var reads atomic.Int64
	up := appUpstream(t, func(w http.ResponseWriter, r *http.Request, m rpc) bool {
		if m.Method != "resources/read" {
			return false
		}
		reads.Add(1)
		<-r.Context().Done() // answered never: the proxy closes first
		return true
	})
	p, _, _, g := appProxy(t, up, Config{}, session.Config{Timeout: 30 * time.Second})
	poll.Eventually(t, 10*time.Second, func() error {
		if reads.Load() == 0 {
			return fmt.Errorf("the proxy has not read its UI yet")
		}
		return nil
	})
	p.Close()
	deadline := time.Now().Add(3 * 250 * time.Millisecond)
	for time.Now().Before(deadline) {
		g.mu.Lock()
		published := append([]string(nil), g.listings...)
		g.mu.Unlock()
		if len(published) > 0 {
			t.Fatalf("published %d captures after Close cut the proxy's read short:\n%s", len(published), published[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
