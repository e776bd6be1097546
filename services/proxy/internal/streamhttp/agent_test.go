package streamhttp

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/edgeauth"
)

// agentHeader names the agent of a test request: the edge's part, played
// by asAgents, which puts it in the request's context.
const agentHeader = "X-Test-Agent"

type agentTransport struct{ agent string }

func (t agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(agentHeader, t.agent)
	return http.DefaultTransport.RoundTrip(r)
}

// asAgents serves p with each request's agent taken from agentHeader.
func asAgents(t testing.TB, p http.Handler) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r.WithContext(edgeauth.WithAgent(r.Context(), r.Header.Get(agentHeader))))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSessionAgent: in every mode, a session's calls are reported with
// the agent that opened it (stateless ones with the agent of each
// request), and a session is refused (403 session_forbidden) to a request
// of another agent naming it.
func TestSessionAgent(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := newRig(t, m)
			srv := asAgents(t, r.p)
			via := srv.URL + strings.TrimPrefix(r.via, r.proxy.URL)
			alice := r.connectWith(t, via, &http.Client{Transport: agentTransport{"alice"}})
			poll.Eventually(t, 10*time.Second, r.gate.approvedOnce)
			poll.Eventually(t, 10*time.Second, func() error {
				if res := call(t, alice, "echo", map[string]any{"text": "hi"}); res.IsError {
					return fmt.Errorf("echo refused: %s", text(res))
				}
				return nil
			})
			// A call is reported once its answer is written: poll for it.
			poll.Eventually(t, 10*time.Second, func() error {
				r.gate.mu.Lock()
				defer r.gate.mu.Unlock()
				var agents []string
				for _, c := range r.gate.calls {
					if c.Tool == "echo" {
						agents = append(agents, c.Agent)
					}
				}
				if len(agents) == 0 || agents[len(agents)-1] != "alice" {
					return fmt.Errorf("echo calls reported with agents %q, want the last alice's", agents)
				}
				return nil
			})
			switch {
			case m.opts == nil:
				legacyTheft(t, srv.URL)
			case !m.opts.Stateless:
				const body = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
				for _, agent := range []string{"bob", ""} {
					resp, got := post(t, via, sessionHeaders(agent, alice.ID(), m.version), body)
					if status := resp.StatusCode; status != http.StatusForbidden || !strings.Contains(got, string(edgeauth.CodeSessionForbidden)) {
						t.Errorf("agent %q on alice's session: %d %s, want 403 %s", agent, resp.StatusCode, got, edgeauth.CodeSessionForbidden)
					}
				}
				if resp, got := post(t, via, sessionHeaders("alice", alice.ID(), m.version), body); resp.StatusCode != http.StatusOK {
					t.Errorf("alice on her session: %d %s, want 200", resp.StatusCode, got)
				}
			}
		})
	}
}

// sessionHeaders name a session, its protocol version and the agent.
func sessionHeaders(agent, sid, version string) map[string]string {
	return map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": version, agentHeader: agent}
}

// legacyTheft opens an HTTP+SSE stream as alice and posts to its message
// URL as bob (refused) and as alice (accepted).
func legacyTheft(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ev/sse", nil)
	req.Header.Set(agentHeader, "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	endpoint := ""
	for endpoint == "" && sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(rest, "/messages?session=") {
			endpoint = rest
		}
	}
	if endpoint == "" {
		t.Fatalf("no endpoint event on alice's stream: %v", sc.Err())
	}
	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, c := range []struct {
		agent string
		want  int
	}{{"bob", http.StatusForbidden}, {"alice", http.StatusAccepted}} {
		resp, b := post(t, base+endpoint, map[string]string{agentHeader: c.agent}, ping)
		if resp.StatusCode != c.want {
			t.Errorf("%s posting to alice's stream: %d %s, want %d", c.agent, resp.StatusCode, b, c.want)
		}
	}
}
