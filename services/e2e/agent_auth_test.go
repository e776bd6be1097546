package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/pkitest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const (
	aliceToken = "alice-agent-secret-0123456789"
	bobToken   = "bob-agent-secret-0123456789"
	// upstreamOAuth stands for an OAuth access token meant for the
	// upstream: it must reach it untouched.
	upstreamOAuth = "Bearer upstream-oauth-access-token"
)

// headerTransport adds headers to every request (an agent's credentials).
type headerTransport struct {
	h    map[string]string
	next http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.next.RoundTrip(r)
}

// connectAs connects the Go SDK client to endpoint with headers on every
// request.
func connectAs(endpoint string, headers map[string]string, rt http.RoundTripper) (*mcp.ClientSession, error) {
	if rt == nil {
		rt = http.DefaultTransport
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: headerTransport{h: headers, next: rt}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// recordingUpstream is a Go SDK MCP server (tool echo) that records the
// credentials that reach it.
func recordingUpstream(t *testing.T) (url string, seen func() []string) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1.0.0"}, nil)
	setEcho(s, "Echo the text back.")
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		for _, k := range []string{"Mcpdrift-Agent-Token", "Authorization"} {
			for _, v := range r.Header.Values(k) {
				if !slices.Contains(got, k+": "+v) {
					got = append(got, k+": "+v)
				}
			}
		}
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// rpcCode is the mcpdrift/code of a JSON-RPC error body.
func rpcCode(body []byte) string {
	var m struct {
		Error struct {
			Data struct {
				Code string `json:"mcpdrift/code"`
			} `json:"data"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &m)
	return m.Error.Data.Code
}

// TestAgentAuth: the proxy command in HTTP mode with an agent tokens file,
// in front of a real MCP server, on the real pipeline with the audit sink
// and ClickHouse. Without a token the Go SDK client cannot connect (401,
// a Bearer challenge, agent_unauthenticated); with one (in the proxy's
// own header, beside an OAuth token for the upstream, or as
// Authorization) the Go SDK and TypeScript SDK clients are served, and
// the upstream never sees the proxy's tokens but gets the OAuth token.
// One agent's token on another's session is refused (403
// session_forbidden). Each call's agent reaches ClickHouse, and driftctl
// audit agents groups and filters by it.
func TestAgentAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	ch, db, natsURL := startAudited(t)

	upURL, upSeen := recordingUpstream(t)
	tokens := filepath.Join(t.TempDir(), "agents")
	if err := os.WriteFile(tokens, []byte("alice:"+aliceToken+"\nbob:"+bobToken+"\nts-agent:ts-agent-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := runHTTPProxy(t, "agents", "--nats-url", natsURL, "--upstream", "web="+upURL, "--agent-tokens-file", tokens)
	ep := base + "/web/mcp"

	// Refused without a token, and with a wrong one.
	if cs, err := connectAs(ep, nil, nil); err == nil {
		cs.Close()
		t.Fatal("the Go SDK client connected without an agent token")
	}
	post := func(headers map[string]string, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, ep, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, c := range []struct {
		name    string
		headers map[string]string
		code    string
	}{
		{"no token", nil, "agent_unauthenticated"},
		{"an upstream's OAuth token only", map[string]string{"Authorization": upstreamOAuth}, "agent_unauthenticated"},
		{"a wrong token", map[string]string{"Mcpdrift-Agent-Token": aliceToken + "0"}, "agent_credential_invalid"},
	} {
		resp, b := post(c.headers, initialize)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") || rpcCode(b) != c.code {
			t.Errorf("%s: %d %q %s, want 401, a Bearer challenge and %s", c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b, c.code)
		}
	}

	// OAuth discovery at the proxy's origin asks for no agent credential
	// (clients fetch it without their MCP headers); this upstream has no
	// metadata, so the proxy answers what it found, never the edge's 401.
	if resp, err := http.Get(base + "/.well-known/oauth-protected-resource/web/mcp"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("OAuth discovery at the proxy's origin: %d, want no agent challenge", resp.StatusCode)
		}
	}

	alice, err := connectAs(ep, map[string]string{"Mcpdrift-Agent-Token": aliceToken, "Authorization": upstreamOAuth}, nil)
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	t.Cleanup(func() { _ = alice.Close() })
	bob, err := connectAs(ep, map[string]string{"Authorization": "Bearer " + bobToken}, nil)
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	t.Cleanup(func() { _ = bob.Close() })
	for name, cs := range map[string]*mcp.ClientSession{"alice": alice, "bob": bob} {
		poll.Eventually(t, wait, func() error {
			got, isErr := echo(cs, "from "+name)
			return awaiting(!isErr && got == "from "+name, name+"'s call served", got)
		})
	}
	// The TypeScript SDK client, its token in the proxy's header.
	tr := tsClient{requirePeers(t)}.run(t, endpoint{Transport: transportHTTP, URL: ep,
		Headers: map[string]string{"Mcpdrift-Agent-Token": "ts-agent-secret-0123456789"}}, nil,
		[]step{{Method: "tools/call", Params: params(map[string]any{"name": "echo", "arguments": map[string]any{"text": "from ts"}})}})
	if len(tr.Steps) != 1 || tr.Steps[0].Error != nil || !strings.Contains(string(tr.Steps[0].Result), "from ts") {
		t.Fatalf("the TypeScript client through the proxy: %+v", tr.Steps)
	}

	// Bob's token on alice's session: refused, whatever it asks.
	call := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"stolen"}}}`
	sid := alice.ID()
	resp, b := post(map[string]string{"Authorization": "Bearer " + bobToken, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}, call)
	if resp.StatusCode != http.StatusForbidden || rpcCode(b) != "session_forbidden" {
		t.Errorf("bob on alice's session: %d %s, want 403 session_forbidden", resp.StatusCode, b)
	}
	resp, b = post(map[string]string{"Mcpdrift-Agent-Token": aliceToken, "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-11-25"}, call)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "stolen") {
		t.Errorf("alice on her own session: %d %s, want 200 and the echo", resp.StatusCode, b)
	}
	for _, v := range upSeen() {
		if strings.Contains(v, aliceToken) || strings.Contains(v, bobToken) || strings.HasPrefix(v, "Mcpdrift-Agent-Token") {
			t.Errorf("the upstream got the proxy's credential: %s", v)
		}
	}
	if !slices.Contains(upSeen(), "Authorization: "+upstreamOAuth) {
		t.Errorf("the upstream did not get alice's OAuth token; it got %q", upSeen())
	}

	// The agents in ClickHouse.
	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	poll.Eventually(t, wait, func() error {
		rows, err := conn.Query(context.Background(), `SELECT agent, uniqExact(event_id) FROM `+db+`.call_observations
			WHERE server = 'web' AND tool = 'echo' GROUP BY agent ORDER BY agent`)
		if err != nil {
			return err
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var agent string
			var n uint64
			if err := rows.Scan(&agent, &n); err != nil {
				return err
			}
			got = append(got, agent)
		}
		return awaiting(slices.Equal(got, []string{"alice", "bob", "ts-agent"}), "calls of alice, bob and ts-agent in call_observations", fmt.Sprint(got))
	})
	var listed uint64
	if err := conn.QueryRow(context.Background(), `SELECT count() FROM `+db+`.list_observations WHERE server = 'web' AND agent = 'alice'`).Scan(&listed); err != nil || listed == 0 {
		t.Errorf("alice's listing in list_observations: %d, %v", listed, err)
	}
	out, err := exec.Command(filepath.Join(build(t), "driftctl"), "audit", "agents", "--agent", "bob", "--json",
		"--clickhouse", ch.Addr, "--database", db).CombinedOutput()
	if err != nil {
		t.Fatalf("driftctl audit agents: %v\n%s", err, out)
	}
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("driftctl audit agents --json: %v: %s", err, out)
		}
		rows = append(rows, r)
	}
	if len(rows) != 1 || rows[0]["agent"] != "bob" || rows[0]["tool"] != "echo" {
		t.Errorf("driftctl audit agents --agent bob: %s", out)
	}
}

// TestAgentClientCertificate: the proxy command serving HTTPS with a
// client CA: an agent with a certificate the CA issued is served, its
// certificate's CN the agent of its session; an agent without one cannot
// connect.
func TestAgentClientCertificate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	pki := pkitest.New(t, "carol")
	p := startPipeline(t)
	sub, err := p.nc.SubscribeSync(bus.CallObservationsSubject("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	_, upURL := httpUpstream(t, nil)
	base := runHTTPProxy(t, "mtls", "--nats-url", p.nc.ConnectedUrl(), "--upstream", "web="+upURL,
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--client-ca", pki.CA)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("the proxy serves %s, want https", base)
	}
	withCert := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{pki.Client}}}
	cs, err := connectAs(base+"/web/mcp", nil, withCert)
	if err != nil {
		t.Fatalf("carol, with her certificate: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(cs, "from carol")
		return awaiting(!isErr && got == "from carol", "carol's call served", got)
	})
	noCert := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}}
	if cs, err := connectAs(base+"/web/mcp", nil, noCert); err == nil {
		cs.Close()
		t.Fatal("a client without a certificate connected")
	}
	// The agent of carol's calls, on the bus.
	poll.Eventually(t, wait, func() error {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			return awaiting(false, "a call observation naming carol", err.Error())
		}
		var batch mcpdriftv1.CallObservations
		if err := proto.Unmarshal(m.Data, &batch); err != nil {
			t.Fatal(err)
		}
		var agents []string
		for _, c := range batch.Calls {
			agents = append(agents, c.Agent)
		}
		return awaiting(slices.Contains(agents, "carol"), "a call observation naming carol", fmt.Sprint(agents))
	})
}
