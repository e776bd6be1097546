// Package streamhttp is the MCP proxy's HTTP side. It fronts upstream MCP
// servers, each under its own server id, on every HTTP transport MCP has
// had:
//
//   - Streamable HTTP with sessions (2025-03-26 to 2025-11-25): POST with a
//     JSON or SSE answer, Mcp-Session-Id, the GET stream, DELETE,
//     Last-Event-ID resumption, 202 for notifications and responses;
//   - stateless Streamable HTTP (2026-07-28, and servers of any era that
//     keep no session): every POST stands alone; the proxy keeps listings
//     of its own per upstream, one per listing variant of its stateless
//     clients (server/discover or initialize, then every list, re-done on
//     list_changed), and judges each request by the one of its variant;
//   - HTTP+SSE (2024-11-05): a GET event stream whose endpoint event the
//     proxy rewrites to its own message URL.
//
// Bodies and events are forwarded as the original bytes; only a listing
// with something withheld is rebuilt (session.Session decides), and SSE
// events keep their ids and names. Upstream requests go out on h1, an
// HTTP/1.1 client that works on the handler's own goroutine.
package streamhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/h1"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Upstream is one MCP server the proxy fronts.
type Upstream struct {
	ID       string // the server id: its routes are /<ID>/mcp, /<ID>/sse, /<ID>/messages
	URL      string // its Streamable HTTP endpoint, or ""
	SSEURL   string // its 2024-11-05 SSE endpoint, or ""
	Gate     session.Gate
	Observer session.Observer
	Session  session.Config // Server is set to ID when empty
}

// Config tunes the HTTP side; zero fields take the defaults.
type Config struct {
	Client      *http.Client  // upstream requests; streams have no overall timeout
	MaxMessage  int           // largest body or SSE event, either way (64 MiB)
	SessionIdle time.Duration // a session unused this long is forgotten (30 min)
	MaxSessions int           // sessions kept per upstream (10,000)
	OwnTimeout  time.Duration // bound on each request the proxy makes itself (30 s)
	Relist      time.Duration // how often a stateless upstream is listed again (1 min)
	Log         zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.Client == nil {
		// Upstream requests are HTTP/1.1 on the handler's own goroutine
		// (h1); what h1 does not take on goes through net/http's Transport.
		c.Client = &http.Client{Transport: h1.New(h1.Config{Fallback: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConns: 256, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ForceAttemptHTTP2: true,
		}})}
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = 64 << 20
	}
	if c.SessionIdle <= 0 {
		c.SessionIdle = 30 * time.Minute
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 10000
	}
	if c.OwnTimeout <= 0 {
		c.OwnTimeout = 30 * time.Second
	}
	if c.Relist <= 0 {
		c.Relist = time.Minute
	}
	return c
}

// Proxy serves every upstream's routes.
type Proxy struct {
	cfg    Config
	fronts map[string]*front
	ctx    context.Context // ends the proxy's own work on Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// New checks the upstreams and returns the proxy.
func New(cfg Config, ups []Upstream) (*Proxy, error) {
	cfg = cfg.withDefaults()
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, fronts: map[string]*front{}, ctx: ctx, stop: stop}
	for _, u := range ups {
		if u.ID == "" || strings.ContainsAny(u.ID, "/?#") {
			stop()
			return nil, fmt.Errorf("upstream id %q: want a server id", u.ID)
		}
		if _, dup := p.fronts[u.ID]; dup {
			stop()
			return nil, fmt.Errorf("upstream %s given twice", u.ID)
		}
		if u.URL == "" && u.SSEURL == "" {
			stop()
			return nil, fmt.Errorf("upstream %s: no URL", u.ID)
		}
		for _, raw := range []string{u.URL, u.SSEURL} {
			if raw == "" {
				continue
			}
			if pu, err := url.Parse(raw); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				stop()
				return nil, fmt.Errorf("upstream %s: %q is not an http(s) URL", u.ID, raw)
			}
		}
		if u.Session.Server == "" {
			u.Session.Server = u.ID
		}
		p.fronts[u.ID] = &front{p: p, up: u, log: cfg.Log.With().Str("server", u.ID).Logger(),
			sessions: map[string]*tracked{}, legacy: map[string]*legacySession{}}
	}
	return p, nil
}

// Close ends the proxy's own work (listings, streams it holds upstream).
func (p *Proxy) Close() {
	p.stop()
	p.wg.Wait()
}

// go runs f as the proxy's own work, ended by Close.
func (p *Proxy) spawn(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// ServeHTTP routes /<server-id>/mcp (Streamable HTTP), /<server-id>/sse and
// /<server-id>/messages (HTTP+SSE).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, route, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	f := p.fronts[id]
	if f == nil {
		httpError(w, http.StatusNotFound, nil, "unknown_server", fmt.Sprintf("no MCP server %q behind this proxy", id))
		return
	}
	switch {
	case route == "mcp" && f.up.URL != "":
		f.streamable(w, r)
	case route == "sse" && f.up.SSEURL != "":
		f.legacyStream(w, r)
	case route == "messages" && f.up.SSEURL != "":
		f.legacyPost(w, r)
	default:
		httpError(w, http.StatusNotFound, nil, "unknown_route", fmt.Sprintf("server %q has no route %q here", id, "/"+route))
	}
}

// front is the proxy's side of one upstream.
type front struct {
	p   *Proxy
	up  Upstream
	log zerolog.Logger

	mu       sync.Mutex
	sessions map[string]*tracked       // by Mcp-Session-Id
	legacy   map[string]*legacySession // by the proxy's own session id
	mons     monitors                  // the listings for stateless clients, one per variant (monitor.go)
}

// tracked is a Streamable HTTP session with the upstream.
type tracked struct {
	s *session.Session

	mu      sync.Mutex
	id      string      // Mcp-Session-Id
	headers http.Header // what the proxy's own requests carry: version, authorization
	used    time.Time
}

func (t *tracked) note(r *http.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.used = time.Now()
	for _, h := range []string{"Mcp-Protocol-Version", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			t.headers.Set(h, v)
		}
	}
}

func (f *front) newTracked() *tracked {
	t := &tracked{headers: http.Header{}, used: time.Now()}
	t.s = session.New(f.up.Session, f.up.Gate, f.up.Observer, discard, func(b []byte) error {
		f.p.spawn(func() { f.own(t.s, t.ownHeaders(), b) })
		return nil
	})
	return t
}

func (t *tracked) ownHeaders() http.Header {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.headers.Clone()
	if t.id != "" {
		h.Set("Mcp-Session-Id", t.id)
	}
	return h
}

func discard([]byte) error { return nil }

// session returns the tracked session with the given id, creating it when
// the proxy does not know it (a restart, or another proxy replica began it):
// what it decides then rests on the gate alone until it sees a listing.
func (f *front) session(id string) *tracked {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.sessions[id]; t != nil {
		return t
	}
	t := f.newTracked()
	t.id = id
	f.addLocked(t)
	return t
}

func (f *front) register(t *tracked, id string) {
	t.mu.Lock()
	t.id = id
	t.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(t)
}

// addLocked keeps t, forgetting idle sessions and, past the limit, the
// least recently used one.
func (f *front) addLocked(t *tracked) {
	if len(f.sessions) >= f.p.cfg.MaxSessions {
		var oldest *tracked
		for id, s := range f.sessions {
			s.mu.Lock()
			idle, used := time.Since(s.used) > f.p.cfg.SessionIdle, s.used
			s.mu.Unlock()
			if idle {
				delete(f.sessions, id)
				continue
			}
			if oldest == nil || used.Before(oldest.used) {
				oldest = s
			}
		}
		if len(f.sessions) >= f.p.cfg.MaxSessions && oldest != nil {
			delete(f.sessions, oldest.id)
		}
	}
	f.sessions[t.id] = t
}

func (f *front) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, id)
}

// firstSightWait bounds a wait for what the proxy has not seen yet.
func (f *front) firstSightWait() time.Duration {
	if f.up.Session.Timeout > 0 {
		return f.up.Session.Timeout
	}
	return 2 * time.Second
}

// streamable serves the Streamable HTTP endpoint.
func (f *front) streamable(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		f.post(w, r)
	case http.MethodGet:
		f.get(w, r)
	case http.MethodDelete:
		f.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, http.StatusMethodNotAllowed, nil, "method_not_allowed", r.Method+" is not an MCP method of this endpoint")
	}
}

func (f *front) post(w http.ResponseWriter, r *http.Request) {
	body, err := readAll(r.Body, f.p.cfg.MaxMessage)
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, nil, "message_too_large", err.Error())
		return
	}
	msgs, batch, err := jsonrpc.Split(body, jsonrpc.Limits{})
	if err != nil {
		httpError(w, http.StatusBadRequest, nil, "invalid_message", "unreadable JSON-RPC message: "+err.Error())
		return
	}
	if text := headerMismatch(r.Header, msgs, batch); text != "" {
		headerError(w, firstID(msgs, batch), text)
		return
	}
	var t *tracked
	sess := (*session.Session)(nil)
	sid := r.Header.Get("Mcp-Session-Id")
	switch {
	case sid != "":
		t = f.session(sid)
	case opens(msgs):
		t = f.newTracked() // kept once the upstream names the session
	default:
		sess = f.follower(r, msgs)
	}
	if t != nil {
		t.note(r)
		sess = t.s
	}
	if !batch {
		ctx, cancel := context.WithTimeout(r.Context(), f.firstSightWait())
		text := paramMismatch(ctx, r.Header, msgs[0], sess)
		cancel()
		if text != "" {
			headerError(w, msgs[0].ID, text)
			return
		}
	}
	o := sess.ClientSplit(r.Context(), body, msgs, batch)
	if o.Forward == nil {
		writeJSON(w, http.StatusOK, o.Reply)
		return
	}
	resp, err := f.send(r.Context(), r.Method, f.up.URL, forwardHeaders(r.Header, !bytes.Equal(o.Forward, body)), o.Forward)
	if err != nil {
		f.log.Warn().Err(err).Msg("upstream unreachable")
		httpError(w, http.StatusBadGateway, firstID(msgs, batch), "upstream_unreachable", "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if t != nil && sid == "" {
		if nsid := resp.Header.Get("Mcp-Session-Id"); nsid != "" && resp.StatusCode < 300 {
			f.register(t, nsid)
		}
	}
	if sid != "" && resp.StatusCode == http.StatusNotFound {
		f.forget(sid) // the upstream ended it
	}
	f.answer(w, r.Context(), resp, sess, o.Reply)
	if o.Opened && resp.StatusCode < 300 {
		if err := sess.ListAll(); err != nil {
			f.log.Warn().Err(err).Msg("listing the server")
		}
	}
}

// answer passes the upstream's answer to a POST on to the client, every
// message judged by sess, with the proxy's own replies (refusals in a
// batch) added.
func (f *front) answer(w http.ResponseWriter, ctx context.Context, resp *http.Response, sess *session.Session, reply []byte) {
	switch mediaType(resp.Header) {
	case "text/event-stream":
		f.pipeSSE(w, ctx, resp, sess, reply)
		return
	case "application/json":
		if resp.StatusCode >= 300 {
			break
		}
		raw, err := readAll(resp.Body, f.p.cfg.MaxMessage)
		if err != nil {
			httpError(w, http.StatusBadGateway, nil, "upstream_message_too_large", err.Error())
			return
		}
		out, seen, err := sess.ServerLater(ctx, raw)
		defer seen.Report() // once the answer is written
		if err != nil {
			f.log.Warn().Err(err).Msg("re-listing the server")
		}
		copyHeaders(w.Header(), resp.Header)
		if reply != nil {
			out = mergeBatches(reply, out)
		}
		if out == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		// The length given, the answer goes out whole at the flush, before
		// the report.
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
		_ = http.NewResponseController(w).Flush()
		return
	}
	if reply != nil && resp.StatusCode == http.StatusAccepted {
		// Everything forwarded was a notification or response; what the
		// proxy refused still needs its answers.
		copyHeaders(w.Header(), resp.Header)
		writeJSON(w, http.StatusOK, reply)
		return
	}
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(f.p.cfg.MaxMessage)))
}

// get passes the session's stream of server messages (and its resumption
// with Last-Event-ID) through the session.
func (f *front) get(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	resp, err := f.send(r.Context(), http.MethodGet, f.up.URL, forwardHeaders(r.Header, false), nil)
	if err != nil {
		httpError(w, http.StatusBadGateway, nil, "upstream_unreachable", "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if sid == "" || mediaType(resp.Header) != "text/event-stream" || resp.StatusCode != http.StatusOK {
		copyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(f.p.cfg.MaxMessage)))
		return
	}
	t := f.session(sid)
	t.note(r)
	f.pipeSSE(w, r.Context(), resp, t.s, nil)
}

func (f *front) delete(w http.ResponseWriter, r *http.Request) {
	resp, err := f.send(r.Context(), http.MethodDelete, f.up.URL, forwardHeaders(r.Header, false), nil)
	if err != nil {
		httpError(w, http.StatusBadGateway, nil, "upstream_unreachable", "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" && resp.StatusCode < 300 {
		f.forget(sid)
	}
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(f.p.cfg.MaxMessage)))
}

// pipeSSE passes an event stream on event by event, each message judged by
// sess; pre, when set, is sent first as an event of its own. The headers go
// out with the first event when it has already arrived, and at once
// otherwise: a client may wait for them before it goes on (the Go SDK does
// for its GET stream), and a stream can stay quiet for long.
func (f *front) pipeSSE(w http.ResponseWriter, ctx context.Context, resp *http.Response, sess *session.Session, pre []byte) {
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	var buf []byte
	if pre != nil {
		buf = appendEvent(buf, nil, pre)
		_, _ = w.Write(buf)
	}
	rd := newSSEReader(resp.Body, f.p.cfg.MaxMessage)
	flushed := false
	for {
		if !flushed && !rd.ready() {
			_ = rc.Flush()
			flushed = true
		}
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				f.log.Warn().Err(err).Msg("upstream event stream ended")
			}
			return
		}
		var seen session.Seen
		buf, seen = f.relay(buf[:0], ctx, sess, ev)
		if len(buf) == 0 {
			seen.Report()
			continue
		}
		if _, err := w.Write(buf); err != nil {
			seen.Report()
			return // the client went away
		}
		_ = rc.Flush()
		seen.Report()
		flushed = true
	}
}

// relay appends what the client gets of one upstream event: the event as
// it came when sess passes its message unchanged, the event rebuilt around
// the message sess passes instead, or, when sess keeps the message to
// itself, only the event's id (so resumption still counts it). What the
// message showed is the caller's to report once the event is sent.
func (f *front) relay(buf []byte, ctx context.Context, sess *session.Session, ev *event) ([]byte, session.Seen) {
	if !ev.HasData {
		return append(buf, ev.Raw...), session.Seen{}
	}
	out, seen, err := sess.ServerLater(ctx, ev.Data)
	if err != nil {
		f.log.Warn().Err(err).Msg("re-listing the server")
	}
	switch {
	case out == nil && ev.HasID:
		return appendIDOnly(buf, ev), seen
	case out == nil:
		return buf, seen
	case bytes.Equal(out, ev.Data):
		return append(buf, ev.Raw...), seen
	}
	return appendEvent(buf, ev, out), seen
}

// own sends a request the proxy makes itself (a listing) and feeds its
// answer to sess, which keeps it to itself.
func (f *front) own(sess *session.Session, h http.Header, body []byte) {
	ctx, cancel := context.WithTimeout(f.p.ctx, f.p.cfg.OwnTimeout)
	defer cancel()
	resp, err := f.ownPost(ctx, f.up.URL, h, body)
	if err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
		return
	}
	defer resp.Body.Close()
	if err := f.feed(ctx, sess, resp, true, nil); err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
	}
}

// ownPost posts a message of the proxy's own with h and the headers every
// such request carries (content type, accepted answers, Mcp-Method); an
// answer other than 2xx comes back as an error holding its start.
func (f *front) ownPost(ctx context.Context, target string, h http.Header, body []byte) (*http.Response, error) {
	h = h.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if m, err := jsonrpc.Parse(body, jsonrpc.Limits{}); err == nil && m.Method != "" {
		h.Set("Mcp-Method", m.Method)
	}
	resp, err := f.send(ctx, http.MethodPost, target, h, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		ans, _ := readAll(resp.Body, 4096)
		resp.Body.Close()
		return nil, &refusedError{status: resp.StatusCode, body: ans}
	}
	return resp, nil
}

// refusedError is an answer other than 2xx to a request of the proxy's own,
// with the start of its body.
type refusedError struct {
	status int
	body   []byte
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("the server refused it: HTTP %d: %.200s", e.status, e.body)
}

// send makes a request upstream.
func (f *front) send(ctx context.Context, method, target string, h http.Header, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header = h
	return f.p.cfg.Client.Do(req)
}

// opens reports a message that opens a session (initialize).
func opens(msgs []*jsonrpc.Message) bool {
	for _, m := range msgs {
		if m.Kind == jsonrpc.KindRequest && m.Method == "initialize" {
			return true
		}
	}
	return false
}

func firstID(msgs []*jsonrpc.Message, batch bool) []byte {
	if batch || len(msgs) == 0 || msgs[0].Kind != jsonrpc.KindRequest {
		return nil
	}
	return msgs[0].ID
}

// hopHeaders are a single connection's business, never forwarded;
// Content-Length is the new body's, Accept-Encoding the proxy's own (it
// must read what it judges).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Accept-Encoding", "Host"}

// forwardHeaders are the client's headers for the upstream request; when
// the body was rewritten (a batch with refusals taken out) the headers that
// describe one message are dropped, since they no longer describe it.
func forwardHeaders(in http.Header, rewritten bool) http.Header {
	h := in.Clone()
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for _, k := range strings.Split(in.Get("Connection"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			h.Del(k)
		}
	}
	if rewritten {
		for k := range h {
			if strings.HasPrefix(http.CanonicalHeaderKey(k), "Mcp-Param-") || http.CanonicalHeaderKey(k) == "Mcp-Method" || http.CanonicalHeaderKey(k) == "Mcp-Name" {
				h.Del(k)
			}
		}
	}
	return h
}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
	dst.Del("Content-Encoding") // the client gets what the proxy read
}

func mediaType(h http.Header) string {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// readAll reads at most max bytes of r.
func readAll(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("a message of more than %d bytes", max)
	}
	return b, nil
}

// mergeBatches joins two answers (a message or a batch each) into one batch.
func mergeBatches(a, b []byte) []byte {
	if b == nil {
		return a
	}
	elems := func(x []byte) []byte {
		x = bytes.TrimSpace(x)
		if len(x) > 0 && x[0] == '[' {
			return bytes.TrimSpace(x[1 : len(x)-1])
		}
		return x
	}
	return append(append(append(append([]byte{'['}, elems(a)...), ','), elems(b)...), ']')
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// httpError answers with a JSON-RPC error carrying a stable code in its
// data, so that clients that read only JSON-RPC learn why too.
func httpError(w http.ResponseWriter, status int, id []byte, code, text string) {
	writeJSON(w, status, jsonrpc.ErrorResponseData(id, -32600, "mcpdrift proxy: "+text, code))
}

// headerError refuses a request whose headers disagree with its body:
// HTTP 400 with the HeaderMismatch error of the transport (2026-07-28).
func headerError(w http.ResponseWriter, id []byte, text string) {
	writeJSON(w, http.StatusBadRequest, jsonrpc.ErrorResponseData(id, codeHeaderMismatch, "mcpdrift proxy: "+text, "header_mismatch"))
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
