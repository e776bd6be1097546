package streamhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// capServer is a stateless 2026-07-28 MCP server written by hand, as servers
// that use sampling behave: tool "basic" is listed to every client, tool
// "sampler" only to clients whose request _meta declares the sampling
// capability, and only those may call it. A request without _meta declares
// nothing.
type capServer struct {
	mu      sync.Mutex
	listens int            // subscriptions/listen streams open
	opened  map[string]int // server/discover requests, by the capability names declared
}

func newCapServer() *capServer { return &capServer{opened: map[string]int{}} }

func (s *capServer) openListens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listens
}

func (s *capServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
			Name string                     `json:"name"`
		} `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(req.Params.Meta["io.modelcontextprotocol/clientCapabilities"], &caps)
	_, sampling := caps["sampling"]
	result := ""
	switch req.Method {
	case "server/discover":
		names := make([]string, 0, len(caps))
		for k := range caps {
			names = append(names, k)
		}
		slices.Sort(names)
		s.mu.Lock()
		s.opened[strings.Join(names, ",")]++
		s.mu.Unlock()
		result = `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"caps","version":"1"}}`
	case "subscriptions/listen":
		s.mu.Lock()
		s.listens++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.listens--
			s.mu.Unlock()
		}()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done() // nothing changes until the listener leaves
		return
	case "tools/list":
		tools := `{"name":"basic","description":"Works for every client.","inputSchema":{"type":"object"}}`
		if sampling {
			tools += `,{"name":"sampler","description":"Asks the client's model.","inputSchema":{"type":"object"}}`
		}
		result = `{"tools":[` + tools + `]}`
	case "tools/call":
		if req.Params.Name != "basic" && (req.Params.Name != "sampler" || !sampling) {
			writeJSON(w, http.StatusOK, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"unknown tool %q"}}`, req.ID, req.Params.Name))
			return
		}
		result = `{"content":[{"type":"text","text":"` + req.Params.Name + ` ran"}]}`
	case "ping":
		result = `{}`
	default:
		writeJSON(w, http.StatusOK, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no method %q"}}`, req.ID, req.Method))
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":`+result+`}`))
}

// newCapRig is a proxy in front of a capServer, with the in-memory gate;
// maxMon, when not 0, lowers the bound on monitors per variant.
func newCapRig(t *testing.T, maxMon int, log zerolog.Logger) (*rig, *capServer) {
	t.Helper()
	srv := newCapServer()
	r := &rig{gate: newTofu(), mode: mode{name: "caps", version: "2026-07-28"}}
	r.upstream = httptest.NewServer(srv)
	t.Cleanup(r.upstream.Close)
	up := Upstream{ID: "ev", URL: r.upstream.URL + "/mcp", Gate: r.gate, Observer: r.gate, Session: session.Config{Timeout: 5 * time.Second}}
	r.direct = up.URL
	p, err := New(Config{Relist: 200 * time.Millisecond, Log: log}, []Upstream{up})
	if err != nil {
		t.Fatal(err)
	}
	p.fronts["ev"].mons.max = maxMon // before any request: nothing else reads it yet
	r.p = p
	r.proxy = httptest.NewServer(p)
	t.Cleanup(func() { r.proxy.Close(); p.Close() })
	r.via = r.proxy.URL + "/ev/mcp"
	return r, srv
}

// capClient sends stateless 2026-07-28 requests declaring caps (a JSON
// object), or, when caps is "", requests without _meta.
type capClient struct {
	t    *testing.T
	url  string
	caps string
	seq  int
}

// params are the params of a request with members (JSON object members
// without braces, or "") and the client's _meta.
func (c *capClient) params(members string) string {
	var parts []string
	if members != "" {
		parts = append(parts, members)
	}
	if c.caps != "" {
		parts = append(parts, `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"agent","version":"1"},"io.modelcontextprotocol/clientCapabilities":`+c.caps+`}`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func (c *capClient) request(method, name, members string) map[string]json.RawMessage {
	c.t.Helper()
	c.seq++
	h := map[string]string{"Mcp-Method": method, "Mcp-Protocol-Version": "2026-07-28"}
	if name != "" {
		h["Mcp-Name"] = name
	}
	resp, body := post(c.t, c.url, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, c.seq, method, c.params(members)))
	var out map[string]json.RawMessage
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		c.t.Fatalf("%s: HTTP %d %s", method, resp.StatusCode, body)
	}
	return out
}

// tools lists the tools the client is served.
func (c *capClient) tools() []string {
	c.t.Helper()
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	out := c.request("tools/list", "", "")
	if err := json.Unmarshal(out["result"], &res); err != nil {
		c.t.Fatalf("tools/list: %s", out)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// call calls tool and returns its text, or the proxy's refusal code ("" when
// the call was served).
func (c *capClient) call(tool string) (text, refusal string) {
	c.t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
		Meta    struct {
			Code string `json:"mcpdrift/code"`
		} `json:"_meta"`
	}
	out := c.request("tools/call", tool, fmt.Sprintf(`"name":%q,"arguments":{}`, tool))
	if err := json.Unmarshal(out["result"], &res); err != nil || len(res.Content) == 0 {
		c.t.Fatalf("tools/call %s: %s", tool, out)
	}
	if res.IsError && res.Meta.Code == "" {
		c.t.Fatalf("tools/call %s: an error without the proxy's code: %s", tool, out)
	}
	return res.Content[0].Text, res.Meta.Code
}

// monitorsOf reports the upstream's monitors: how many run, and the default.
func monitorsOf(r *rig) (n int, byVariant map[string]*monitor, def *monitor) {
	f := r.p.fronts["ev"]
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mons.byVariant), maps.Clone(f.mons.byVariant), f.mons.def
}

// TestMonitorPerVariant: behind the proxy, a stateless 2026-07-28 server
// that lists and runs a tool only for clients declaring sampling. Each
// client is judged by the proxy's own listing made declaring what it
// declares: the sampling client lists and calls "sampler", the client
// declaring nothing sees only "basic" and its call to "sampler" is refused
// with tool_not_approved. The proxy ran one monitor per variant, each
// published in the variant of the requests it judges, requests without
// _meta share the one that declares nothing, and Close ends them all.
func TestMonitorPerVariant(t *testing.T) {
	var logs syncbuf.Buffer
	r, srv := newCapRig(t, 0, zerolog.New(&logs))
	sampling := &capClient{t: t, url: r.via, caps: `{"sampling":{}}`}
	plain := &capClient{t: t, url: r.via, caps: `{}`}
	legacy := &capClient{t: t, url: r.via} // no _meta: the default monitor

	if got := sampling.tools(); !slices.Equal(got, []string{"basic", "sampler"}) {
		t.Fatalf("the sampling client was served %v", got)
	}
	if got := plain.tools(); !slices.Equal(got, []string{"basic"}) {
		t.Fatalf("the client declaring nothing was served %v", got)
	}
	for _, tc := range []struct {
		name, tool string
		c          *capClient
		text, code string
	}{
		{"sampling_basic", "basic", sampling, "basic ran", ""},
		{"sampling_sampler", "sampler", sampling, "sampler ran", ""},
		{"plain_basic", "basic", plain, "basic ran", ""},
		{"plain_sampler", "sampler", plain, "", "tool_not_approved"},
		{"legacy_basic", "basic", legacy, "basic ran", ""},
		{"legacy_sampler", "sampler", legacy, "", "tool_not_approved"},
	} {
		text, code := tc.c.call(tc.tool)
		if code != tc.code || (tc.code == "" && text != tc.text) {
			t.Errorf("%s: %q refused with %q, want %q refused with %q", tc.name, text, code, tc.text, tc.code)
		}
	}
	if out := legacy.request("ping", "", ""); out["result"] == nil {
		t.Errorf("ping without _meta: %s", out)
	}

	n, byVariant, def := monitorsOf(r)
	wantSampling := session.VariantOf([]byte(sampling.params("")))
	wantPlain := session.VariantOf([]byte(plain.params("")))
	if n != 2 || byVariant[wantSampling] == nil || byVariant[wantPlain] == nil || def != byVariant[wantPlain] {
		t.Fatalf("%d monitors (%v, default %p), want one for each of the two variants, the default the one declaring nothing", n, byVariant, def)
	}
	r.gate.mu.Lock()
	published := slices.Sorted(maps.Keys(r.gate.views))
	r.gate.mu.Unlock()
	if want := slices.Sorted(slices.Values([]string{wantSampling, wantPlain})); !slices.Equal(published, want) {
		t.Errorf("listings published in variants %v, want the clients' %v", published, want)
	}
	srv.mu.Lock()
	opened := len(srv.opened)
	srv.mu.Unlock()
	if opened != 2 {
		t.Errorf("the server was opened declaring %d sets of capabilities, want 2: %v", opened, srv.opened)
	}
	if strings.Contains(logs.String(), `"level":"warn"`) {
		t.Errorf("warnings:\n%s", logs.String())
	}

	// Close ends every monitor: it returns once their goroutines are done,
	// and the change streams they held are gone.
	poll.Eventually(t, 10*time.Second, func() error {
		if n := srv.openListens(); n != 2 {
			return fmt.Errorf("%d change streams open, want one per monitor (2)", n)
		}
		return nil
	})
	closed := make(chan struct{})
	go func() { r.p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Proxy.Close did not return within 10s")
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if n := srv.openListens(); n != 0 {
			return fmt.Errorf("%d change streams still open after Close", n)
		}
		return nil
	})
}

// TestMonitorBound: past the bound on monitors, requests of a new variant
// are judged by the default monitor (the one declaring nothing): served
// what it approved, refused what it did not, and the bound is logged once.
func TestMonitorBound(t *testing.T) {
	tests := []struct {
		name     string
		first    string // the variant that takes the one place
		monitors int    // the monitors then running
	}{
		{"default_within_bound", `{}`, 1},
		{"default_past_bound", `{"sampling":{}}`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			r, _ := newCapRig(t, 1, zerolog.New(&logs))
			first := &capClient{t: t, url: r.via, caps: tt.first}
			first.tools()
			for _, caps := range []string{`{}`, `{"sampling":{}}`, `{"elicitation":{}}`, `{"sampling":{},"roots":{"listChanged":true}}`} {
				c := &capClient{t: t, url: r.via, caps: caps}
				wantTools, wantCode := []string{"basic"}, "tool_not_approved"
				if caps == tt.first && caps != `{}` {
					wantTools, wantCode = []string{"basic", "sampler"}, "" // the one variant of its own
				}
				if got := c.tools(); !slices.Equal(got, wantTools) {
					t.Errorf("%s: served %v, want %v", caps, got, wantTools)
				}
				if _, code := c.call("sampler"); code != wantCode {
					t.Errorf("%s: a call to sampler refused with %q, want %q", caps, code, wantCode)
				}
				if text, code := c.call("basic"); code != "" || text != "basic ran" {
					t.Errorf("%s: a call to basic: %q, %q", caps, text, code)
				}
			}
			if n, _, def := monitorsOf(r); n != tt.monitors || def == nil {
				t.Errorf("%d monitors (default %p), want %d and a default", n, def, tt.monitors)
			}
			if got := strings.Count(logs.String(), "too many listing variants"); got != 1 || !strings.Contains(logs.String(), `"level":"warn"`) {
				t.Errorf("the bound logged %d times, want once at warn:\n%s", got, logs.String())
			}
		})
	}
}

// variantGate records the variants a session asks the gate about, and knows
// none of them.
type variantGate struct {
	mu    sync.Mutex
	asked []string
}

func (g *variantGate) View(_ context.Context, variant string, _ bool, _ time.Duration) (session.View, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, variant)
	return session.View{}, false
}

func (g *variantGate) Listing(session.Listed, []byte) {}
func (g *variantGate) Seen(session.Listed)            {}
func (g *variantGate) Call(session.Call)              {}

// TestMonitorVariantIsTheRequests: the monitor a 2026-07-28 request is
// judged by decides in the request's own listing variant: the variant its
// session derives from the monitor's opening message (server/discover with
// the request's protocol version and clientCapabilities copied) equals the
// variant of the request, whatever the capabilities object looks like.
// Requests that name no variant go to the default monitor.
func TestMonitorVariantIsTheRequests(t *testing.T) {
	meta := func(caps string) string {
		return `{"name":"basic","arguments":{"x":1},"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28"` + caps + `}}`
	}
	tests := []struct {
		name   string
		params string
		own    bool // the request names its variant
	}{
		{"sampling", meta(`,"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}`), true},
		{"empty", meta(`,"io.modelcontextprotocol/clientCapabilities":{}`), true},
		{"absent", meta(``), true},
		{"null", meta(`,"io.modelcontextprotocol/clientCapabilities":null`), true},
		{"nested_and_spaced", meta(`,"io.modelcontextprotocol/clientCapabilities": { "roots" : {"listChanged":true}, "elicitation":{"form":{},"url":{}} ,"sampling":{"tools":{}}}`), true},
		{"escaped_name", meta(`,"io.modelcontextprotocol/clientCapabilities":{"s\u0061mpling":{},"\u00e9":{}}`), true},
		{"escaped_meta_key", `{"\u005fmeta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}`, true},
		{"later_version", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2027-01-01","io.modelcontextprotocol/clientCapabilities":{"experimental":{"x":{}}}}}`, true},
		{"no_meta", `{"name":"basic"}`, false},
		{"meta_without_version", `{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}`, false},
		{"version_not_a_string", `{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728,"io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}`, false},
		{"capabilities_too_large", meta(`,"io.modelcontextprotocol/clientCapabilities":{"x":"` + strings.Repeat("x", maxCapabilities) + `"}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + tt.params + `}`
			msgs, _, err := jsonrpc.Split([]byte(body), jsonrpc.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/ev/mcp", strings.NewReader(body))
			o := openingOf(req, msgs)
			if o.own != tt.own {
				t.Fatalf("own = %v, want %v", o.own, tt.own)
			}
			if !tt.own {
				if string(o.caps) != "{}" || o.variant != session.VariantOf(openParams(o.modern, o.version, emptyCapabilities)) {
					t.Fatalf("a request naming no variant opens %+v, want the default", o)
				}
				return
			}
			want := session.VariantOf([]byte(tt.params))
			if o.variant != want {
				t.Fatalf("monitor key %s, the request's variant %s", o.variant, want)
			}
			// The monitor's session, opened from that, decides in it.
			g := &variantGate{}
			p, err := New(Config{Log: zerolog.Nop()}, []Upstream{{ID: "ev", URL: "http://127.0.0.1:1/mcp", Gate: g, Observer: g}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			mon := p.fronts["ev"].newMonitor(req, o)
			if !strings.Contains(mon.openMessage(), `"method":"server/discover"`) {
				t.Fatalf("the monitor opens with %s", mon.openMessage())
			}
			follower := session.New(session.Config{Follow: mon.s, Timeout: time.Millisecond}, g, g, discard)
			msgs, batch, err := jsonrpc.Split([]byte(body), jsonrpc.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if out := follower.Client(context.Background(), []byte(body), msgs, batch); out.ToClient == nil {
				t.Fatalf("a call with no verdict was not refused: %+v", out)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.asked) == 0 || g.asked[0] != want {
				t.Fatalf("decided in variants %v, want the request's %s", g.asked, want)
			}
		})
	}
}

// TestMonitorIdleForgotten: at the bound, a monitor no request used for
// Config.SessionIdle is stopped and gives its place to a new variant; a
// recent one keeps it, and the variant it turned away goes to the default.
func TestMonitorIdleForgotten(t *testing.T) {
	r, _ := newCapRig(t, 1, zerolog.Nop())
	const idle = 50 * time.Millisecond
	r.p.cfg.SessionIdle = idle // before any request: nothing else reads it yet
	sampling := &capClient{t: t, url: r.via, caps: `{"sampling":{}}`}
	if got := sampling.tools(); !slices.Equal(got, []string{"basic", "sampler"}) {
		t.Fatalf("the sampling client was served %v", got)
	}
	_, before, _ := monitorsOf(r)
	var first *monitor
	firstVariant := ""
	for v, m := range before {
		first, firstVariant = m, v
	}
	used := time.Now()
	poll.Eventually(t, 10*time.Second, func() error {
		if since := time.Since(used); since <= 2*idle {
			return fmt.Errorf("the sampling variant's monitor unused for %v, want over %v", since, 2*idle)
		}
		return nil
	})

	elicit := &capClient{t: t, url: r.via, caps: `{"elicitation":{}}`}
	if got := elicit.tools(); !slices.Equal(got, []string{"basic"}) {
		t.Fatalf("the elicitation client was served %v", got)
	}
	n, after, def := monitorsOf(r)
	if n != 1 || def != nil || after[firstVariant] != nil {
		t.Fatalf("after the idle monitor was forgotten: %d monitors, default %p, the idle one kept: %v", n, def, after[firstVariant] != nil)
	}
	if !first.stopped() {
		t.Error("the forgotten monitor still runs")
	}
	// The new monitor is recent: the sampling variant, back, is judged by
	// the default monitor, which declares nothing.
	if _, code := sampling.call("sampler"); code != "tool_not_approved" {
		t.Errorf("a call to sampler past the bound: %q, want tool_not_approved", code)
	}
	if _, _, def := monitorsOf(r); def == nil {
		t.Error("no default monitor judged the variant past the bound")
	}
}
