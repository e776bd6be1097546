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
// Nothing of an upstream's answers reaches a client unjudged: a body is
// read by its Content-Type and Content-Encoding the way clients read them
// (openBody), an event stream by the WHATWG rules (sseReader), and every
// message goes out as the bytes the session returned for it (the original,
// or a listing with something withheld), an SSE event re-emitted from its
// parsed fields, never its original bytes. What cannot be read so is
// dropped and counted, and the request it answered gets an error with a
// stable code; an answer other than 2xx gets the proxy's own error. Only
// sessions whose initialize the proxy forwarded are tracked. Upstream
// requests go out on net/http's Transport, HTTP/1.1 only (ADR 0005).
package streamhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/edgeauth"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/ordered"
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
	// Refuse answers a request on another agent's session (403) and counts
	// it (edgeauth.Edge.Refuse); edgeauth.Refuse when nil.
	Refuse func(w http.ResponseWriter, status int, code session.Code)
	// Stripped counts one header of an upstream's answer or a client's
	// request that the proxy dropped or scoped, by class (StripClasses;
	// isolate.go); nil counts nothing.
	Stripped func(class string)

	// direct is the default Client's Transport, which upstream requests
	// go to without the Client's bookkeeping: that client follows no
	// redirect, keeps no cookies and sets no timeout, so its Do and its
	// Transport's RoundTrip answer alike.
	direct http.RoundTripper
}

func (c Config) withDefaults() Config {
	if c.Client == nil {
		// Upstream requests are HTTP/1.1 on net/http's Transport; the
		// proxy's own client (h1) was no faster on the whole path (ADR 0005).
		var http1 http.Protocols
		http1.SetHTTP1(true)
		tr := &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConns: 256, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, Protocols: &http1,
		}
		c.Client, c.direct = &http.Client{Transport: tr, CheckRedirect: noRedirects}, tr
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
	if c.Refuse == nil {
		c.Refuse = edgeauth.Refuse
	}
	return c
}

// noRedirects keeps the proxy where it was configured to go: an upstream
// cannot send the client's messages (and their session id) elsewhere with
// a redirect; the redirect itself is answered as an upstream failure.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Proxy serves every upstream's routes.
type Proxy struct {
	cfg    Config
	fronts map[string]*front
	done   chan struct{} // closed by Close: ends the proxy's own work
	closed sync.Once
	wg     sync.WaitGroup
}

// New checks the upstreams and returns the proxy.
func New(cfg Config, ups []Upstream) (*Proxy, error) {
	cfg = cfg.withDefaults()
	p := &Proxy{cfg: cfg, fronts: map[string]*front{}, done: make(chan struct{})}
	for _, u := range ups {
		if u.ID == "" || strings.ContainsAny(u.ID, "/?#") {
			return nil, fmt.Errorf("upstream id %q: want a server id", u.ID)
		}
		if _, dup := p.fronts[u.ID]; dup {
			return nil, fmt.Errorf("upstream %s given twice", u.ID)
		}
		if u.URL == "" && u.SSEURL == "" {
			return nil, fmt.Errorf("upstream %s: no URL", u.ID)
		}
		for _, raw := range []string{u.URL, u.SSEURL} {
			if raw == "" {
				continue
			}
			if pu, err := url.Parse(raw); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				return nil, fmt.Errorf("upstream %s: %q is not an http(s) URL", u.ID, raw)
			}
		}
		if u.Session.Server == "" {
			u.Session.Server = u.ID
		}
		p.fronts[u.ID] = &front{p: p, up: u, log: cfg.Log.With().Str("server", u.ID).Logger(), cookies: cookiePrefix(u.ID),
			sessions: map[string]*tracked{}, legacy: map[string]*legacySession{}}
	}
	return p, nil
}

// Close ends the proxy's own work (listings, streams it holds upstream).
func (p *Proxy) Close() {
	p.closed.Do(func() { close(p.done) })
	p.wg.Wait()
}

// spawn runs f as the proxy's own work, on a context that Close ends; Close
// waits for it.
func (p *Proxy) spawn(f func(ctx context.Context)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := until(context.Background(), p.done)
		defer cancel()
		f(ctx)
	}()
}

// until returns a context of parent that also ends once done is closed;
// cancel it to release what it holds.
func until(parent context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ServeHTTP routes /<server-id>/mcp (Streamable HTTP), /<server-id>/sse and
// /<server-id>/messages (HTTP+SSE).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, route, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	f := p.fronts[id]
	if (f == nil || id == ".well-known") && p.oauthRoute(w, r) {
		return
	}
	if f == nil {
		httpError(w, nil, CodeUnknownServer, fmt.Sprintf("no MCP server %q behind this proxy", id))
		return
	}
	// No cache stores what the proxy answers: a stored answer would be
	// served again unjudged (isolate.go).
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case route == "mcp" && f.up.URL != "":
		f.streamable(w, r)
	case route == "sse" && f.up.SSEURL != "":
		f.legacyStream(w, r)
	case route == "messages" && f.up.SSEURL != "":
		f.legacyPost(w, r)
	default:
		httpError(w, nil, CodeUnknownRoute, fmt.Sprintf("server %q has no route %q here", id, "/"+route))
	}
}

// front is the proxy's side of one upstream.
type front struct {
	p   *Proxy
	up  Upstream
	log zerolog.Logger
	// cookies is the prefix of the upstream's cookie names at the client
	// (isolate.go).
	cookies  string
	warnedAt stripLog

	mu       lockorder.Mutex[lockorder.FrontMu]
	sessions map[string]*tracked       // by Mcp-Session-Id
	legacy   map[string]*legacySession // by the proxy's own session id
	mons     monitors                  // the listings for stateless clients, one per variant (monitor.go)
	// advertised is the protected-resource metadata URL the upstream's
	// last challenge named (on its own origin; oauth.go).
	advertised string
}

// tracked is a Streamable HTTP session with the upstream.
type tracked struct {
	s     *session.Session
	agent string // the agent that opened it (agent.go)

	// used is when a request last used the session (Unix nanoseconds):
	// written by every request on it and read by the eviction sweep of
	// another session's registration, so atomic rather than under mu.
	used atomic.Int64

	mu      lockorder.Mutex[lockorder.TrackedMu]
	id      string      // Mcp-Session-Id
	headers http.Header // what the proxy's own requests carry: version, authorization

	params paramBook // the x-mcp-header bindings of the tools it was listed
	own    ownBound  // the proxy's own requests in flight

	gate getGate // the client's requests behind its GET stream (order.go)

	// listRefused: the server refused the proxy's own listing for want of
	// authorization, made with Authorization refusedWith ("" for none).
	// relistedWith: the credentials it listed again with since.
	listRefused               bool
	refusedWith, relistedWith string
}

// note keeps what the proxy's own requests of the session carry from the
// client's request r; relist is true when the proxy's own listing was
// refused for want of authorization and r brings credentials it has not
// tried (oauth.go: a client that authenticates after initialize).
func (t *tracked) note(r *http.Request) (relist bool) {
	t.used.Store(time.Now().UnixNano())
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range []string{"Mcp-Protocol-Version", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			t.headers.Set(h, v)
		}
	}
	return t.relistLocked()
}

// relistLocked reports (once per credentials) that the proxy's own
// listing, refused for want of authorization, is due again with the
// credentials the session's requests now carry; t.mu held.
func (t *tracked) relistLocked() bool {
	a := t.headers.Get("Authorization")
	if !t.listRefused || a == "" || a == t.refusedWith || a == t.relistedWith {
		return false
	}
	t.listRefused, t.relistedWith = false, a
	return true
}

// ownRefused notes that the server refused a request of the proxy's own
// made with h for want of authorization (401 or 403); relist as note's,
// for credentials a client's request brought meanwhile.
func (t *tracked) ownRefused(h http.Header, err error) (relist bool) {
	var re *refusedError
	if !errors.As(err, &re) || (re.status != http.StatusUnauthorized && re.status != http.StatusForbidden) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.listRefused, t.refusedWith = true, h.Get("Authorization")
	return t.relistLocked()
}

// relistAuthorized lists the server again on the proxy's own account,
// with the credentials the client's requests brought.
func (t *tracked) relistAuthorized(f *front) {
	t.s.WillList()
	if err := t.s.ListAll(); err != nil {
		f.log.Warn().Err(err).Msg("listing the server")
	}
}

func (f *front) newTracked(agent string) *tracked {
	t := &tracked{headers: http.Header{}, agent: agent}
	t.used.Store(time.Now().UnixNano())
	cfg := f.up.Session
	cfg.Agent = agent
	cfg.ToolsPage = t.params.note
	t.s = session.New(cfg, f.up.Gate, f.up.Observer, func(b []byte) error {
		return t.own.send(f, func() *session.Session { return t.s }, func(ctx context.Context) {
			h := t.ownHeaders()
			err := f.own(ctx, t.s, h, b)
			var re *refusedError
			if errors.As(err, &re) && re.status == http.StatusNotFound {
				// The upstream no longer knows the session: it ended (as
				// when it answers a client's request so), before what
				// failed is told.
				f.forget(t.sessionID())
			}
			if err != nil {
				f.ownFailed(t.s, b, err)
			}
			if t.ownRefused(h, err) {
				t.relistAuthorized(f)
			}
		})
	})
	return t
}

// ownFailed tells sess that its own request b failed (Session.OwnFailed),
// unless the proxy is closing: a request Close cut short is the proxy's
// end, not the server's doing, and must not hold the server fleet-wide
// (the session publishes nothing more of that round).
func (f *front) ownFailed(sess *session.Session, b []byte, err error) {
	select {
	case <-f.p.done:
		return
	default:
	}
	sess.OwnFailed(b, err)
}

// sessionID is the upstream's id of the session ("" before it named one).
func (t *tracked) sessionID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id
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

// session returns the tracked session with the given id, or nil when the
// proxy does not know it. A session exists only once the proxy forwarded
// its initialize and the upstream's 2xx answer named it (register): a
// session id the proxy did not see handed out (made up, from before a
// restart, from another replica, or one the upstream ended) is never
// taken up, since nothing the proxy judged stands behind it. The client
// gets 404 and opens a new session, as the transport says.
func (f *front) session(id string) *tracked {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id]
}

// register keeps t under the session id the upstream named in its answer
// to t's initialize; false when that id is already tracked (the existing
// session is left as it is).
func (f *front) register(t *tracked, id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions[id] != nil {
		return false
	}
	t.mu.Lock()
	t.id = id
	t.mu.Unlock()
	f.addLocked(t)
	return true
}

// addLocked keeps t, forgetting idle sessions and, past the limit, the
// least recently used one.
func (f *front) addLocked(t *tracked) {
	if len(f.sessions) >= f.p.cfg.MaxSessions {
		idleSince := time.Now().Add(-f.p.cfg.SessionIdle).UnixNano()
		oldestID, oldestUsed := "", int64(0)
		for id, s := range f.sessions {
			used := s.used.Load() // once: requests on s write it meanwhile
			if used < idleSince {
				delete(f.sessions, id)
				s.s.End()
				continue
			}
			if oldestID == "" || used < oldestUsed {
				oldestID, oldestUsed = id, used
			}
		}
		if len(f.sessions) >= f.p.cfg.MaxSessions && oldestID != "" {
			f.sessions[oldestID].s.End()
			delete(f.sessions, oldestID)
		}
	}
	f.sessions[t.id] = t
}

// forget forgets the session id, which ended (the client deleted it, or
// the upstream no longer knows it), and tells its session (Session.End).
func (f *front) forget(id string) {
	f.mu.Lock()
	t := f.sessions[id]
	delete(f.sessions, id)
	f.mu.Unlock()
	if t != nil {
		t.s.End()
	}
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
	if len(r.Header.Values("Mcp-Session-Id")) > 1 {
		// The proxy would judge by one, the server might serve another.
		httpError(w, nil, CodeInvalidMessage, "more than one Mcp-Session-Id header")
		return
	}
	switch r.Method {
	case http.MethodPost:
		f.post(w, r)
	case http.MethodGet:
		f.get(w, r)
	case http.MethodDelete:
		f.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, nil, CodeMethodNotAllowed, r.Method+" is not an MCP method of this endpoint")
	}
}

func (f *front) post(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, f.p.cfg.MaxMessage)
	if err != nil {
		refuseMessage(w, session.MessageTooLarge, session.TooLarge(f.p.cfg.MaxMessage))
		return
	}
	// The one parse of the client's message: the session and the headers'
	// checks read it, never the bytes again. It is borrowed and given back
	// when the POST is served: nothing keeps it longer (the session decides
	// on the client's message within Client and Wait, on this goroutine,
	// and keeps only copies and slices of body, which is not pooled).
	d := canonjson.Borrow()
	defer canonjson.Return(d)
	msgs, batch, err := jsonrpc.SplitIn(d, body, jsonrpc.Limits{})
	if err != nil {
		refuseMessage(w, session.InvalidMessage, session.Unreadable(err))
		return
	}
	if text := headerMismatch(r.Header, msgs, batch); text != "" {
		headerError(w, firstID(msgs, batch), text)
		return
	}
	var t *tracked
	sess, book := (*session.Session)(nil), (*paramBook)(nil)
	sid := r.Header.Get("Mcp-Session-Id")
	switch {
	case sid != "":
		if t = f.owned(w, r, sid, firstID(msgs, batch)); t == nil {
			return
		}
	case opens(msgs):
		t = f.newTracked(agentOf(r)) // kept once the upstream names the session
	default:
		sess, book = f.follower(r, msgs)
	}
	if t != nil {
		if t.note(r) {
			// Credentials the proxy's refused listing lacked: list again
			// with them, beside the client's request.
			t.relistAuthorized(f)
		}
		sess, book = t.s, &t.params
	}
	if !batch {
		if text := paramMismatch(r.Context(), f.firstSightWait(), r.Header, msgs[0], sess, book); text != "" {
			headerError(w, msgs[0].ID, text)
			return
		}
	}
	// A call held for an admin's approval waits here, this POST with it
	// (its answer is the call's); the session's other requests go on.
	o := sess.Client(r.Context(), body, msgs, batch).Wait(r.Context())
	if o.ToServer == nil {
		writeJSON(w, http.StatusOK, o.ToClient)
		return
	}
	ids := requestIDs(o.ToServer, body, msgs)
	if t != nil && sid != "" {
		t.afterOpening(r) // the client's order: its GET stream first
	}
	resp, err := f.send(r.Context(), r.Method, f.up.URL, outHeaders(r.Header, body, o.ToServer, msgs, batch, book), o.ToServer)
	if err != nil {
		f.log.Warn().Err(err).Msg("upstream unreachable")
		sess.Unanswered(ids)
		writeJSON(w, session.HTTPStatus(CodeUpstreamUnreachable), errorBody(batch, ids, CodeUpstreamUnreachable, "mcpdrift proxy: the MCP server behind this proxy could not be reached"))
		return
	}
	defer resp.Body.Close()
	if sid != "" && resp.StatusCode == http.StatusNotFound {
		f.forget(sid) // the upstream ended it: from now on the proxy answers 404 itself
	}
	named := ""
	if t != nil && sid == "" && resp.StatusCode/100 == 2 {
		nsids := resp.Header.Values("Mcp-Session-Id")
		switch {
		case len(nsids) == 0: // a server that keeps no session
		case len(nsids) > 1 || !validSessionID(nsids[0]):
			f.refuse(w, sess, batch, o.ToClient, ids, http.StatusBadGateway, session.DropFraming,
				"the MCP server named its session in an unreadable Mcp-Session-Id header", "unreadable Mcp-Session-Id")
			return
		case !f.register(t, nsids[0]):
			f.refuse(w, sess, batch, o.ToClient, ids, http.StatusBadGateway, CodeSessionConflict,
				"the MCP server named a session that is already open; its answer is not passed on", "session id already tracked")
			return
		default:
			named = nsids[0]
		}
	}
	if o.Opened && t != nil && resp.StatusCode/100 == 2 {
		t.expectGet() // before the client hears of it: its next request waits for its GET
	}
	f.answer(w, r, resp, sess, batch, o.ToClient, ids, named)
	if o.Opened && resp.StatusCode/100 == 2 {
		if err := sess.ListAll(); err != nil {
			f.log.Warn().Err(err).Msg("listing the server")
		}
	}
}

// answer passes the upstream's answer to a POST on to the client: every
// message judged by sess, the proxy's own replies (refusals in a batch)
// added, and an error for each forwarded request (ids) that the answer
// left unanswered. Nothing of the upstream's body reaches the client
// unjudged: a status other than 2xx gets the proxy's own error, a body the
// proxy cannot read the clients' way is refused. named is the session id
// an initialize's answer opened ("" when none).
func (f *front) answer(w http.ResponseWriter, r *http.Request, resp *http.Response, sess *session.Session, batch bool, reply []byte, ids [][]byte, named string) {
	ctx := r.Context()
	if resp.StatusCode/100 != 2 {
		f.refuseStatus(w, r, resp, sess, batch, reply, ids)
		return
	}
	b := openBody(resp)
	if b.kind == mediaRefused {
		if named != "" {
			f.forget(named) // the client is not told of it
		}
		f.refuse(w, sess, batch, reply, ids, http.StatusOK, session.DropFraming, "the MCP server's answer cannot be read as clients read it ("+b.refused+")", b.refused)
		return
	}
	f.copyHeaders(w.Header(), resp.Header)
	if named != "" {
		w.Header().Set("Mcp-Session-Id", named)
	}
	var out []byte
	switch b.kind {
	case mediaSSE:
		f.pipeSSE(w, ctx, b.r, sess, reply, ids, len(ids) == 0)
		return
	case mediaJSON:
		raw, err := readAll(b.r, f.p.cfg.MaxMessage)
		if errors.Is(err, errTooLarge) {
			sess.Dropped(session.DropFraming)
			f.refuse(w, sess, batch, reply, ids, http.StatusBadGateway, CodeUpstreamTooLarge, "the MCP server's answer is too large: "+err.Error(), err.Error())
			return
		}
		if err != nil {
			f.refuse(w, sess, batch, reply, ids, http.StatusOK, session.DropFraming, "the MCP server's answer could not be read: "+err.Error(), err.Error())
			return
		}
		if len(ids) == 0 {
			if foreign, _ := answersOf(raw, nil); foreign {
				// No request of this POST's: see pipeSSE.
				sess.Dropped(session.DropUnmatched)
				raw = nil
			}
		}
		d := sess.Server(ctx, raw).Wait(ctx)
		defer d.Report() // once the answer is written
		out, err = d.Delivery()
		if err != nil {
			f.log.Warn().Err(err).Msg("re-listing the server")
		}
	}
	errs := unansweredErrors(sess, ids, CodeNoResponse, "mcpdrift proxy: the MCP server's answer held no response to this request")
	out = joinAnswers(batch, reply, out, errs)
	if out == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// The length given, the answer goes out whole at the flush, before
	// the report.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	_ = http.NewResponseController(w).Flush()
}

// refuse answers a POST whose upstream answer the proxy does not pass on:
// the proxy's own replies (refusals in a batch), and for each forwarded
// request still unanswered an error with code, which is also the drop
// counted when it is one of session.DropCodes. what names it in the log
// when not "".
func (f *front) refuse(w http.ResponseWriter, sess *session.Session, batch bool, reply []byte, ids [][]byte, status int, code session.Code, text, what string) {
	if slices.Contains(session.DropCodes, code) {
		sess.Dropped(code)
	}
	if what != "" {
		f.log.Warn().Str("code", string(code)).Str("why", what).Msg("upstream answer not passed on")
	}
	out := joinAnswers(batch, reply, unansweredErrors(sess, ids, code, "mcpdrift proxy: "+text))
	if out == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	writeJSON(w, status, out)
}

// keptOnError are the headers of an upstream answer other than 2xx that a
// client acts on: how to authenticate, when to retry, which methods the
// endpoint allows.
var keptOnError = []string{"Retry-After", "Allow"} // and WWW-Authenticate's Bearer challenges, and Set-Cookie scoped (isolate.go)

// refuseStatus answers for an upstream answer other than 2xx: its status
// (a redirect, which would take the client past the proxy, becomes 502)
// and the headers a client acts on, with the proxy's own JSON-RPC error
// (code upstream_http_error) for each forwarded request (ids) in place of
// the body, which clients would surface to the model. Only a JSON body
// that sess judges to be error responses to those requests passes, judged
// (the Go SDK reads a JSON-RPC error from such a body: a server's
// "unsupported protocol version" names the versions it speaks there). A
// 404 stays 404, so that a client of a session the server ended opens a
// new one.
func (f *front) refuseStatus(w http.ResponseWriter, r *http.Request, resp *http.Response, sess *session.Session, batch bool, reply []byte, ids [][]byte) {
	ctx := r.Context()
	status := resp.StatusCode
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	for k, vs := range resp.Header {
		switch k = http.CanonicalHeaderKey(k); {
		case k == "Www-Authenticate":
			vs, left := bearerChallenges(vs) // isolate.go
			f.stripped(StripAuthChallenge, left)
			if len(vs) > 0 {
				f.challenges(r, vs) // resource_metadata names the proxy's (oauth.go)
				w.Header()["WWW-Authenticate"] = vs
			}
		case slices.Contains(keptOnError, k):
			w.Header()[k] = slices.Clone(vs)
		case k == "Set-Cookie":
			f.setCookies(w.Header(), vs)
		default:
			f.stripped(stripClass(k), len(vs))
		}
	}
	text := fmt.Sprintf("mcpdrift proxy: the MCP server answered HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	var judged, errs [][]byte
	if len(ids) > 0 {
		// Every forwarded request the judged errors do not answer gets the
		// proxy's error: those still pending, and those whose answer in
		// the body was dropped (a result under an error status).
		var answered map[string]bool
		judged, answered = f.judgedErrors(ctx, resp, sess)
		sess.Unanswered(ids)
		for _, id := range ids {
			if !answered[string(id)] {
				errs = append(errs, session.Reply(id, CodeUpstreamHTTP, text))
			}
		}
	}
	if len(judged) == 0 && len(errs) == 0 {
		errs = [][]byte{errorBody(true, ids, CodeUpstreamHTTP, text)}
	}
	out := joinAnswers(batch, reply, judged, errs)
	writeJSON(w, status, out)
}

// judgedErrors returns the error responses of a JSON body as sess judged
// them, and the ids they answer; anything else in it is dropped (its
// request then gets the proxy's error).
func (f *front) judgedErrors(ctx context.Context, resp *http.Response, sess *session.Session) ([][]byte, map[string]bool) {
	b := openBody(resp)
	if b.kind != mediaJSON {
		return nil, nil
	}
	raw, err := readAll(b.r, f.p.cfg.MaxMessage)
	if err != nil {
		return nil, nil
	}
	d := sess.Server(ctx, raw).Wait(ctx)
	d.Report()
	out := d.ToClient
	if out == nil {
		return nil, nil
	}
	msgs, _, err := jsonrpc.Split(out, jsonrpc.Limits{})
	if err != nil {
		return nil, nil
	}
	var errs [][]byte
	answered := map[string]bool{}
	for _, m := range msgs {
		if m.Kind == jsonrpc.KindResponse && m.Error != nil {
			errs = append(errs, m.Raw)
			answered[string(m.ID)] = true
		} else {
			sess.Dropped(session.DropFraming)
		}
	}
	return errs, answered
}

// get passes a stream of server messages (the session's GET stream, and
// its resumption with Last-Event-ID) on, every event judged. A GET
// without a session is judged by the stateless clients' listing; one with
// a session the proxy does not know is answered 404 by the proxy.
func (f *front) get(w http.ResponseWriter, r *http.Request) {
	var sess *session.Session
	var opened func()
	sid := r.Header.Get("Mcp-Session-Id")
	if sid != "" {
		t := f.owned(w, r, sid, nil)
		if t == nil {
			return
		}
		t.note(r)
		sess = t.s
		opened = t.opening()
	} else {
		sess, _ = f.follower(r, nil)
	}
	resp, err := f.send(r.Context(), http.MethodGet, f.up.URL, forwardHeaders(r.Header, false), nil)
	if opened != nil {
		opened() // the server has the stream: the client's later requests go on
	}
	if err != nil {
		httpError(w, nil, CodeUpstreamUnreachable, "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if sid != "" && resp.StatusCode == http.StatusNotFound {
		f.forget(sid)
	}
	if resp.StatusCode/100 != 2 {
		f.refuseStatus(w, r, resp, nil, false, nil, nil)
		return
	}
	b := openBody(resp)
	switch b.kind {
	case mediaSSE:
		f.copyHeaders(w.Header(), resp.Header)
		f.pipeSSE(w, r.Context(), b.r, sess, nil, nil, false)
	case mediaEmpty:
		w.WriteHeader(resp.StatusCode)
	default:
		// A GET stream is an event stream or nothing: the TypeScript SDK
		// reads any 2xx body of it as one, whatever its Content-Type.
		why := b.refused
		if why == "" {
			why = "a JSON body on a GET stream"
		}
		sess.Dropped(session.DropFraming)
		f.log.Warn().Str("code", string(session.DropFraming)).Str("why", why).Msg("upstream answer not passed on")
		httpError(w, nil, session.DropFraming, "the MCP server's stream cannot be read as clients read it ("+why+")")
	}
}

func (f *front) delete(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	var t *tracked
	if sid != "" {
		if t = f.owned(w, r, sid, nil); t == nil {
			return
		}
		// The client ends its session: the proxy's own gets that the
		// upstream refuses from now on are the end's doing, not the
		// server's (Session.End, before the DELETE can bring them).
		t.s.End()
	}
	resp, err := f.send(r.Context(), http.MethodDelete, f.up.URL, forwardHeaders(r.Header, false), nil)
	if err != nil {
		if t != nil {
			t.s.Continue() // not ended: it goes on publishing
		}
		httpError(w, nil, CodeUpstreamUnreachable, "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	switch {
	case sid != "" && (resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotFound):
		f.forget(sid)
	case t != nil:
		// The upstream refused to end it (405: it does not let clients
		// end sessions): the session goes on, and publishes again
		// (Session.Continue).
		t.s.Continue()
	}
	if resp.StatusCode/100 != 2 {
		f.refuseStatus(w, r, resp, nil, false, nil, nil)
		return
	}
	w.WriteHeader(resp.StatusCode) // a body of a DELETE's answer is nobody's to read
}

// pipeSSE passes an event stream on event by event, each message judged by
// sess and re-emitted from its parsed fields; pre, when set, is sent first
// as an event of its own. The headers go out with the first event when it
// comes within headWait, and on their own once headWait has passed
// without one (lateHead): a client may wait for them before it goes on
// (the Go SDK does for its GET stream), and a stream can stay quiet for
// long; an answer that comes at once costs one write, not two. When the stream ends, the requests of ids (those a
// POST forwarded) it left unanswered get errors, unless the stream can be
// resumed (an event carried an id) and ended without a fault: the client
// then resumes it and their answers may come on the resumed stream.
// noRequests: the stream answers a POST that forwarded no request; a
// response on it is dropped (response_unmatched).
func (f *front) pipeSSE(w http.ResponseWriter, ctx context.Context, body io.Reader, sess *session.Session, pre []byte, ids [][]byte, noRequests bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var buf []byte
	if pre != nil {
		buf = appendEvent(buf, nil, pre)
		_, _ = w.Write(buf)
	}
	rd := newSSEReader(body, f.p.cfg.MaxMessage)
	defer rd.release()
	head := startLateHead(rc)
	defer head.stop() // before net/http ends the response
	// The server's messages are delivered in the order it sent them, the
	// decisions that wait (a list_changed held until the proxy has
	// re-listed, a page whose verdict is due) made off the reader, which
	// reads on meanwhile: a burst of list_changed is coalesced by the
	// session rather than re-listed one at a time (package ordered).
	q := ordered.New[session.Decision](func(b []byte) error {
		head.stop()
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
		_ = rc.Flush()
		return nil
	})
	defer func() { _ = q.Wait() }() // before the handler returns: nothing is written after
	resumable := false
	for {
		ev, err := rd.next()
		if err != nil {
			_ = q.Wait() // what was read is delivered first
			if ctx.Err() != nil {
				if !resumable {
					sess.Unanswered(ids) // the client went away: nobody waits for these
				}
				return
			}
			code := CodeNoResponse
			if !errors.Is(err, io.EOF) {
				f.log.Warn().Err(err).Msg("upstream event stream ended")
				sess.Dropped(session.DropFraming)
				code, resumable = session.DropFraming, false
			}
			if resumable {
				return
			}
			buf = buf[:0]
			for _, e := range unansweredErrors(sess, ids, code, "mcpdrift proxy: the MCP server's event stream ended without a readable response to this request") {
				buf = appendEvent(buf, nil, e)
			}
			if len(buf) > 0 {
				head.stop()
				_, _ = w.Write(buf)
				_ = rc.Flush()
			}
			return
		}
		resumable = resumable || (ev.HasID && len(ev.ID) > 0 && cleanID(ev.ID))
		if noRequests && ev.HasData && isMessageName(ev.Name) {
			if foreign, _ := answersOf(ev.Data, nil); foreign {
				// The answer to a POST that forwarded no request, which
				// no client reads (the SDKs discard it): a response in it,
				// to a request of the client's in flight on another POST,
				// would have the session take that request for answered,
				// and its own POST get an empty 202. Dropped: the request
				// is answered on its own stream, or with an error there.
				sess.Dropped(session.DropUnmatched)
				if err := q.Push(ctx, session.Decision{ToClient: appendIDOnly(nil, ev)}, nil); errors.Is(err, errClientGone) {
					return
				}
				continue
			}
		}
		err = f.relay(ctx, q, sess, ev)
		switch {
		case errors.Is(err, errClientGone):
			return // the client went away
		case err != nil:
			f.log.Warn().Err(err).Msg("re-listing the server")
		}
	}
}

// headWait is how long an event stream's headers wait for its first event
// to go out with (pipeSSE).
const headWait = time.Millisecond

// lateHead flushes an event stream's head (status and headers, and
// whatever was written before the first event) once headWait has passed,
// unless the handler has begun writing by then (stop). The flush runs on
// the timer's goroutine, under mu, while the handler waits on the
// upstream; stop hands the writer back to the handler alone.
type lateHead struct {
	t    *time.Timer
	mu   sync.Mutex
	done bool // the handler writes alone from now on
}

func startLateHead(rc *http.ResponseController) *lateHead {
	h := &lateHead{}
	h.t = time.AfterFunc(headWait, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.done {
			_ = rc.Flush()
		}
	})
	return h
}

// stop ends the timer; once it returns the timer's flush has run or never
// will. Call it before each write of the handler's, and before the
// handler returns.
func (h *lateHead) stop() {
	if h.t.Stop() {
		return // it never ran
	}
	h.mu.Lock()
	h.done = true
	h.mu.Unlock()
}

// relay pushes to q what the client gets of one upstream event,
// re-emitted from its parsed fields, never its original bytes: the
// message sess returns for its data (the bytes sess judged), with the
// event's id; when sess keeps or drops the message, only the event's id
// and retry (so resumption still counts it); a comment as an empty
// keep-alive. An event with data under a name no client takes for a
// message is dropped (framing_invalid). What the message showed is
// reported once the event is sent (ordered). (HTTP+SSE has its own loop:
// legacyStream.)
func (f *front) relay(ctx context.Context, q *ordered.Queue[session.Decision], sess *session.Session, ev *event) error {
	if len(ev.Data) == 0 {
		// No data, or empty data: a priming event for resumption (the Go
		// SDK skips it; nothing in it to judge).
		b := appendIDOnly(nil, ev)
		if len(b) == 0 && ev.Comment {
			b = appendKeepAlive(b)
		}
		return q.Push(ctx, session.Decision{ToClient: b}, nil)
	}
	if !isMessageName(ev.Name) {
		f.dropEvent(sess, "an event with data under a name no client reads as a message", ev)
		return q.Push(ctx, session.Decision{ToClient: appendIDOnly(nil, ev)}, nil)
	}
	return q.Push(ctx, sess.Server(ctx, ev.Data), func(out []byte) []byte {
		switch {
		case out == nil:
			return appendIDOnly(nil, ev)
		case !frameable(out):
			f.dropEvent(sess, "a message that an event cannot carry unchanged", ev)
			return appendIDOnly(nil, ev)
		}
		// Sized for the fields and the data's framing (one line, mostly).
		return appendEvent(make([]byte, 0, len(out)+len(ev.ID)+len(ev.Retry)+48), ev, out)
	})
}

// dropEvent counts and logs an event the proxy does not deliver.
func (f *front) dropEvent(sess *session.Session, why string, ev *event) {
	sess.Dropped(session.DropFraming)
	f.log.Warn().Str("code", string(session.DropFraming)).Str("why", why).Int("bytes", len(ev.Data)).Msg("upstream event dropped")
}

// own sends a request the proxy makes itself (a listing) and feeds its
// answer to sess, which keeps it to itself.
func (f *front) own(ctx context.Context, sess *session.Session, h http.Header, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, f.p.cfg.OwnTimeout)
	defer cancel()
	resp, err := f.ownPost(ctx, f.up.URL, h, body)
	if err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
		return err
	}
	defer resp.Body.Close()
	if err := f.feed(ctx, sess, resp, true, idOf(body), nil); err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
		return err
	}
	// The answer is read: a get of the proxy's own it held no response to
	// (a stream that ended or broke without one, an answer to another id,
	// a 202) is lost, and fails at once; one answered is no longer the
	// session's to fail (OwnFailed does nothing then).
	f.ownFailed(sess, body, errOwnUnanswered)
	return nil
}

// errOwnUnanswered: the upstream's answer to a request of the proxy's own
// held no response to it.
var errOwnUnanswered = errors.New("the server's answer held no response to it")

// ownPost posts a message of the proxy's own with h and the headers every
// such request carries (content type, accepted answers, Mcp-Method); an
// answer other than 2xx comes back as an error holding its start.
func (f *front) ownPost(ctx context.Context, target string, h http.Header, body []byte) (*http.Response, error) {
	h = h.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if m, err := jsonrpc.Parse(body, jsonrpc.Limits{}); err == nil && m.Method != "" {
		h.Set("Mcp-Method", m.Method)
		// A request that names an item (the proxy's own reads of UI
		// resources and gets of prompts) mirrors it in Mcp-Name, which a
		// 2026-07-28 server requires.
		if key, ok := nameParam[m.Method]; ok {
			if d, params, ok := m.ParamsObject(); ok {
				if v, ok := d.Get(params, key); ok && d.Kind(v) == canonjson.String {
					h.Set("Mcp-Name", headerValue(d.Text(v)))
				}
			}
		}
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
	f.upstreamCookies(h) // only the upstream's own cookies reach it (isolate.go)
	req.Header = h
	if rt := f.p.cfg.direct; rt != nil {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, &url.Error{Op: urlErrorOp(method), URL: req.URL.Redacted(), Err: err} // as Client.Do says it
		}
		return resp, nil
	}
	return f.p.cfg.Client.Do(req)
}

// urlErrorOp is how Client.Do names a method in its errors.
func urlErrorOp(method string) string {
	return method[:1] + strings.ToLower(method[1:])
}

// opens reports a message that opens a session (initialize).
func opens(msgs []*jsonrpc.Message) bool {
	for _, m := range msgs {
		if m.Kind == jsonrpc.KindRequest && m.Method == jsonrpc.MethodInitialize {
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

// outHeaders are the headers a client's POST is forwarded with: as
// forwardHeaders says, except for one tools/call whose arguments the
// policy sanitized (body and forward differ, one message): its Mcp-Method
// and Mcp-Name still describe it, and its Mcp-Param-* headers are made
// again from the new arguments (syncParams).
func outHeaders(in http.Header, body, forward []byte, msgs []*jsonrpc.Message, batch bool, book *paramBook) http.Header {
	rewritten := !bytes.Equal(forward, body)
	if !rewritten || batch || msgs[0].Method != jsonrpc.MethodToolsCall {
		return forwardHeaders(in, rewritten)
	}
	h := forwardHeaders(in, false)
	syncParams(h, forward, book)
	return h
}

// mediaType is the media type of an answer to one of the proxy's own
// requests, read as the answers to clients are (openBody); "" when it is
// neither JSON nor an event stream.
func mediaType(h http.Header) string {
	switch m, _ := mediaOf(h); m {
	case mediaJSON:
		return "application/json"
	case mediaSSE:
		return "text/event-stream"
	}
	return ""
}

// errTooLarge is a body or message over Config.MaxMessage.
var errTooLarge = errors.New("a message too large")

// readBody reads a client's request body, at most max bytes (readAll): in
// one piece when it declares its length.
func readBody(r *http.Request, max int) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > int64(max) {
		return readAll(r.Body, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.Body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// readAll reads at most max bytes of r.
func readAll(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, max)
	}
	return b, nil
}

// requestIDs returns the ids of the requests in what was forwarded (the
// client's body, or the batch left once refusals were taken out).
func requestIDs(forward, body []byte, msgs []*jsonrpc.Message) [][]byte {
	if !bytes.Equal(forward, body) {
		var err error
		if msgs, _, err = jsonrpc.Split(forward, jsonrpc.Limits{}); err != nil {
			return nil
		}
	}
	var ids [][]byte
	for _, m := range msgs {
		if m.Kind == jsonrpc.KindRequest {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// unansweredErrors returns an error response for each of ids that sess
// still has pending (and forgets them), with code as mcpdrift/code.
func unansweredErrors(sess *session.Session, ids [][]byte, code session.Code, text string) [][]byte {
	if len(ids) == 0 {
		return nil
	}
	var out [][]byte
	for _, id := range sess.Unanswered(ids) {
		out = append(out, session.Reply(id, code, text))
	}
	return out
}

// errorBody is one error for each of ids (one with a null id when there
// are none), as a batch when the client sent one or there are several.
func errorBody(batch bool, ids [][]byte, code session.Code, text string) []byte {
	if len(ids) == 0 {
		return session.Reply(nil, code, text)
	}
	var errs [][]byte
	for _, id := range ids {
		errs = append(errs, session.Reply(id, code, text))
	}
	return joinAnswers(batch, errs)
}

// joinAnswers joins answers to the client (each a message, a batch, or
// nil) and single messages (more) into one body: a batch when the client
// sent one or there are several messages, else the one message; nil when
// there is none.
func joinAnswers(batch bool, parts ...any) []byte {
	var elems [][]byte
	add := func(b []byte) {
		if b = bytes.TrimSpace(b); len(b) == 0 {
			return
		}
		if b[0] != '[' {
			elems = append(elems, b)
			return
		}
		msgs, _, err := jsonrpc.Split(b, jsonrpc.Limits{})
		if err != nil {
			return // never: the session returns what it judged
		}
		for _, m := range msgs {
			elems = append(elems, m.Raw)
		}
	}
	for _, p := range parts {
		switch p := p.(type) {
		case []byte:
			add(p)
		case [][]byte:
			for _, b := range p {
				add(b)
			}
		}
	}
	switch {
	case len(elems) == 0:
		return nil
	case len(elems) == 1 && !batch:
		return elems[0]
	}
	return append(append([]byte{'['}, bytes.Join(elems, []byte{','})...), ']')
}

// unknownSession answers a request naming a session the proxy did not
// register: 404, so that the client opens a new one.
func unknownSession(w http.ResponseWriter, id []byte) {
	httpError(w, id, CodeSessionUnknown, "no session with this Mcp-Session-Id is open through this proxy; initialize a new one")
}

// validSessionID reports a session id as the transport allows them:
// visible ASCII.
func validSessionID(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// httpError answers a request the proxy refuses alone with code: the
// code's HTTP status and JSON-RPC error (session.Reply, session.HTTPStatus:
// the registry's), so that clients that read only JSON-RPC learn why too.
func httpError(w http.ResponseWriter, id []byte, code session.Code, text string) {
	writeJSON(w, session.HTTPStatus(code), session.Reply(id, code, "mcpdrift proxy: "+text))
}

// refuseMessage answers a client's message the proxy cannot take with
// reply, the answer every transport gives it (session.Unreadable,
// session.TooLarge), under code's HTTP status.
func refuseMessage(w http.ResponseWriter, code session.Code, reply []byte) {
	writeJSON(w, session.HTTPStatus(code), reply)
}

// headerError refuses a request whose headers disagree with its body:
// HTTP 400 with the HeaderMismatch error of the transport (2026-07-28).
func headerError(w http.ResponseWriter, id []byte, text string) {
	httpError(w, id, CodeHeaderMismatch, text)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
