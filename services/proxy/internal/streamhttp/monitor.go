package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/ordered"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// monitor is the proxy's own view of an upstream its clients use without a
// session (2026-07-28, or a server that keeps none): the proxy opens it as a
// client would (server/discover or initialize), lists everything, publishes
// what it saw, and lists again when the server says something changed and
// every Config.Relist. Requests of stateless clients are judged by the
// monitor of their listing variant (monitors).
type monitor struct {
	s *session.Session
	// modern and version are what the monitor speaks: the era and version
	// of the request that started it, until the server refuses them and
	// names older ones (fallBack); written only by the monitor's goroutine
	// once it runs.
	modern  bool   // 2026-07-28: server/discover, _meta, subscriptions/listen
	version string // the protocol version it speaks
	caps    []byte // the client capabilities it declares (a JSON object); never changes
	primed  []byte // the first opening message, already decided on

	quit     chan struct{} // closed when it is forgotten (stop); Proxy.Close ends it too
	stopOnce sync.Once
	used     atomic.Int64 // when a request was last judged by it, in Unix nanoseconds

	mu      lockorder.Mutex[lockorder.MonitorMu]
	headers http.Header // version, authorization, the session id a server may hand out

	params paramBook // the x-mcp-header bindings of the tools it was listed
	own    ownBound  // its own requests in flight

	// authRefused: the server refused the monitor's requests for want of
	// authorization; a client's request with other credentials lends them
	// and wakes it (credentials) to open and list again at once.
	authRefused atomic.Bool
	wake        chan struct{}
}

// refusedAuth notes an answer of 401 or 403 to one of the monitor's own
// requests.
func (mon *monitor) refusedAuth(err error) {
	var re *refusedError
	if errors.As(err, &re) && (re.status == http.StatusUnauthorized || re.status == http.StatusForbidden) {
		mon.authRefused.Store(true)
	}
}

// credentials lends the monitor the Authorization of a client's request
// after the server refused it for want of one, and wakes it to list again.
func (mon *monitor) credentials(r *http.Request) {
	a := r.Header.Get("Authorization")
	if a == "" || !mon.authRefused.Load() {
		return
	}
	mon.mu.Lock()
	changed := mon.headers.Get("Authorization") != a
	if changed {
		mon.headers.Set("Authorization", a)
	}
	mon.mu.Unlock()
	if changed && mon.authRefused.CompareAndSwap(true, false) {
		select {
		case mon.wake <- struct{}{}:
		default:
		}
	}
}

func (mon *monitor) ownHeaders() http.Header {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	return mon.headers.Clone()
}

const (
	// defaultLegacyVersion is what a monitor opens an older server in
	// when nothing names a version.
	defaultLegacyVersion = jsonrpc.Protocol20250618
	// codeUnsupportedVersion is the JSON-RPC error of a request in a
	// protocol version the server does not speak (2026-07-28); its data's
	// "supported" lists the versions it does.
	codeUnsupportedVersion = -32022
)

// maxMonitors bounds the monitors of an upstream that serve one listing
// variant each. Every monitor lists the server every Config.Relist and
// holds a change stream open, and the variant is the client's to name (any
// capability names it likes): unbounded, clients could make the proxy
// list the server without end. Requests of a variant past the bound are
// judged by the default monitor (monitors.def), which fails closed on what
// its own listing does not hold approved. When the bound is reached, the
// monitors no request used for Config.SessionIdle (30 minutes) are stopped
// and give up their places first.
const maxMonitors = 16

// maxCapabilities bounds the client capabilities object a monitor copies
// into each of its own requests; a request declaring a larger one is judged
// by the default monitor.
const maxCapabilities = 16 << 10

// emptyCapabilities is what the default monitor declares.
var emptyCapabilities = []byte(`{}`)

// monitors are the proxy's own listings of one upstream for its stateless
// clients, guarded by front.mu.
//
// A 2026-07-28 request names its listing variant in its _meta (protocol
// version and client capabilities), and servers list differently by what a
// client declares; such a request is judged by the monitor of its variant,
// which declares the same. A request without _meta (a client of an older
// version on a server that keeps no session) names nothing: what its
// client declared went with an initialize the server kept no session for,
// and no later request can be tied to it. Those are judged by one default
// monitor, opened in the era of the first of them and declaring no
// capabilities.
type monitors struct {
	byVariant map[string]*monitor // by the variant of the requests it judges
	def       *monitor            // the default monitor, also in byVariant; nil until needed
	max       int                 // the bound on byVariant; 0 is maxMonitors (tests lower it)
	warned    bool                // the bound was hit and said so
}

// opening is how a monitor opens the server, and the listing variant of
// the requests it judges.
type opening struct {
	modern  bool
	version string
	caps    []byte // the client capabilities object to declare
	own     bool   // the request named its variant in _meta (2026-07-28)
	variant string
}

// follower returns a session for one stateless request, judged by the
// upstream's monitor for the request's listing variant (started on first
// use).
func (f *front) follower(r *http.Request, msgs []*jsonrpc.Message) (*session.Session, *paramBook) {
	o := openingOf(r, msgs)
	f.mu.Lock()
	mon := f.monitorFor(r, o)
	f.mu.Unlock()
	mon.used.Store(time.Now().UnixNano())
	mon.credentials(r)
	cfg := f.up.Session
	cfg.Follow = mon.s
	cfg.Agent = agentOf(r)
	return session.New(cfg, f.up.Gate, f.up.Observer, discard), &mon.params
}

// monitorFor returns the monitor that judges a request opened as o,
// starting it when there is none; f.mu is held.
func (f *front) monitorFor(r *http.Request, o opening) *monitor {
	ms := &f.mons
	if o.own {
		if mon := ms.byVariant[o.variant]; mon != nil {
			return mon
		}
		limit := ms.max
		if limit <= 0 {
			limit = maxMonitors
		}
		if len(ms.byVariant) >= limit {
			f.forgetIdleMonitors()
		}
		if len(ms.byVariant) < limit {
			return f.startMonitor(r, o)
		}
		if !ms.warned {
			ms.warned = true
			f.log.Warn().Int("max", limit).Str("variant", o.variant).
				Msg("too many listing variants of stateless clients: requests of new ones are judged by the default listing")
		}
		o = o.withoutCapabilities()
	}
	if ms.def == nil {
		// The default may already run as the monitor of a 2026-07-28
		// variant that declares nothing.
		ms.def = ms.byVariant[o.variant]
		if ms.def == nil {
			ms.def = f.startMonitor(r, o)
		}
	}
	return ms.def
}

// forgetIdleMonitors stops and forgets the monitors of variants no request
// used for Config.SessionIdle, the default's aside: made-up variants must
// not hold the places for good. f.mu is held.
func (f *front) forgetIdleMonitors() {
	idle := time.Now().Add(-f.p.cfg.SessionIdle).UnixNano()
	for variant, mon := range f.mons.byVariant {
		if mon != f.mons.def && mon.used.Load() < idle {
			mon.stop()
			delete(f.mons.byVariant, variant)
		}
	}
}

// startMonitor starts the monitor for o, run until the proxy closes; f.mu
// is held.
func (f *front) startMonitor(r *http.Request, o opening) *monitor {
	mon := f.newMonitor(r, o)
	if f.mons.byVariant == nil {
		f.mons.byVariant = map[string]*monitor{}
	}
	f.mons.byVariant[o.variant] = mon
	f.p.spawn(func(ctx context.Context) { f.runMonitor(ctx, mon) })
	return mon
}

// openingOf reads how to open the server for a stateless request: with the
// protocol version and client capabilities of the first message whose _meta
// names them (2026-07-28), else as the default monitor, in the request's
// era and declaring no capabilities.
func openingOf(r *http.Request, msgs []*jsonrpc.Message) opening {
	for _, m := range msgs {
		if version, caps, ok := metaOpening(m.Params); ok {
			// The variant of the monitor's own opening, which is the
			// request's (TestMonitorVariantIsTheRequests): the small
			// message is parsed again, not the request's params.
			return opening{modern: true, version: version, caps: caps, own: true, variant: session.VariantOf(openParams(true, version, caps))}
		}
	}
	o := opening{version: r.Header.Get("Mcp-Protocol-Version"), caps: emptyCapabilities}
	for _, m := range msgs {
		if bytes.Contains(m.Params, quotedMetaVersion) || m.Method == jsonrpc.MethodDiscover {
			o.modern = true
			if o.version == "" {
				o.version, _ = session.MetaVersion(m.Params)
			}
		}
	}
	o.modern = o.modern || o.version >= jsonrpc.ProtocolStateless
	if o.version == "" {
		o.version = defaultLegacyVersion
	}
	o.variant = session.VariantOf(openParams(o.modern, o.version, o.caps))
	return o
}

// withoutCapabilities is o for the default monitor: the same era and
// version, declaring no capabilities.
func (o opening) withoutCapabilities() opening {
	o.caps, o.own = emptyCapabilities, false
	o.variant = session.VariantOf(openParams(o.modern, o.version, o.caps))
	return o
}

// The quoted keys whose absence from a request's bytes spares parsing it.
var (
	quotedMetaKey     = []byte(`"` + jsonrpc.MetaKey + `"`)
	quotedMetaVersion = []byte(`"` + jsonrpc.MetaProtocolVersion + `"`)
)

// metaOpening reads the protocol version and the client capabilities
// object of a 2026-07-28 request's _meta (an absent one, or one that is
// not an object, declares nothing); ok is false when the _meta names no
// protocol version, or declares more than maxCapabilities bytes of them.
func metaOpening(params []byte) (version string, caps []byte, ok bool) {
	if !bytes.Contains(params, quotedMetaKey) && !bytes.Contains(params, []byte(`\u`)) {
		return "", nil, false // the key could be written with an escape
	}
	d := canonjson.Borrow()
	defer canonjson.Return(d) // what it returns is copied
	if d.Parse(params, canonjson.Limits{LaxNumbers: true}) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return "", nil, false
	}
	meta, ok := d.Get(canonjson.Root, jsonrpc.MetaKey)
	if !ok || d.Kind(meta) != canonjson.Object {
		return "", nil, false
	}
	v, ok := d.Get(meta, jsonrpc.MetaProtocolVersion)
	if !ok || d.Kind(v) != canonjson.String || d.Text(v) == "" {
		return "", nil, false
	}
	caps = emptyCapabilities
	if c, ok := d.Get(meta, jsonrpc.MetaClientCapabilities); ok && d.Kind(c) == canonjson.Object {
		raw := d.Raw(c)
		if len(raw) > maxCapabilities {
			return "", nil, false
		}
		caps = bytes.Clone(raw) // params is the request's buffer
	}
	return d.Text(v), caps, true
}

func (f *front) newMonitor(r *http.Request, o opening) *monitor {
	mon := &monitor{headers: http.Header{}, modern: o.modern, version: o.version, caps: o.caps, quit: make(chan struct{}), wake: make(chan struct{}, 1)}
	mon.used.Store(time.Now().UnixNano())
	if v := r.Header.Get("Authorization"); v != "" {
		mon.headers.Set("Authorization", v)
	}
	mon.headers.Set("Mcp-Protocol-Version", mon.version)
	cfg := f.up.Session
	if cfg.Meter != nil {
		// Nothing of the monitor's reaches a client, so nothing is withheld
		// from one; what its server sends that the proxy cannot judge is
		// still dropped, and counted.
		cfg.Meter = dropsOnly{cfg.Meter}
	}
	if mon.modern {
		cfg.OwnMeta = mon.meta()
	}
	cfg.ToolsPage = mon.params.note
	mon.s = session.New(cfg, f.up.Gate, f.up.Observer, func(b []byte) error {
		return mon.own.send(f, func() *session.Session { return mon.s }, func(ctx context.Context) {
			err := f.own(ctx, mon.s, mon.ownHeaders(), b)
			if err != nil {
				f.ownFailed(mon.s, b, err)
			}
			mon.refusedAuth(err)
		})
	})
	// The session learns its variant from the opening message now, so that
	// the first stateless request is judged in it; its listing is on the
	// way, so decisions await the verdict on it.
	mon.primed = ownClient(context.Background(), mon.s, mon.openMessage())
	mon.s.WillList()
	return mon
}

// openMessage is what the monitor opens with: server/discover, or
// initialize for an older server.
func (mon *monitor) openMessage() string {
	method := jsonrpc.MethodInitialize
	if mon.modern {
		method = jsonrpc.MethodDiscover
	}
	return `{"jsonrpc":"2.0","id":"mcpdrift-open","method":"` + method + `","params":` + string(openParams(mon.modern, mon.version, mon.caps)) + `}`
}

// openParams are the params of a monitor's opening message: _meta naming
// version and caps (2026-07-28), or those of initialize.
func openParams(modern bool, version string, caps []byte) []byte {
	if modern {
		return append(append([]byte(`{"`+jsonrpc.MetaKey+`":`), ownMeta(version, caps)...), '}')
	}
	b := canonjson.AppendString([]byte(`{"protocolVersion":`), version)
	b = append(append(append(b, `,"capabilities":`...), caps...), `,"clientInfo":{"name":"mcpdrift-proxy","version":"1"}}`...)
	return b
}

// meta is the _meta of the monitor's own 2026-07-28 requests.
func (mon *monitor) meta() []byte { return ownMeta(mon.version, mon.caps) }

func ownMeta(version string, caps []byte) []byte {
	b := []byte(`{"` + jsonrpc.MetaProtocolVersion + `":`)
	b = canonjson.AppendString(b, version)
	b = append(b, `,"`+jsonrpc.MetaClientInfo+`":{"name":"mcpdrift-proxy","version":"1"},"`+jsonrpc.MetaClientCapabilities+`":`...)
	return append(append(b, caps...), '}')
}

// runMonitor opens, lists and listens until the proxy closes; every round
// ends after Config.Relist (or when the change stream ends) and starts
// again, so a server that sends no notifications is still looked at.
func (f *front) runMonitor(ctx context.Context, mon *monitor) {
	ctx, cancel := until(ctx, mon.quit) // ended by Close, or by stop
	defer cancel()
	for {
		f.monitorRound(ctx, mon)
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.p.cfg.Relist):
		case <-mon.wake:
		}
	}
}

// stop ends the monitor's work: it was forgotten.
func (mon *monitor) stop() { mon.stopOnce.Do(func() { close(mon.quit) }) }

// stopped reports whether the monitor was told to stop.
func (mon *monitor) stopped() bool {
	select {
	case <-mon.quit:
		return true
	default:
		return false
	}
}

func (f *front) monitorRound(ctx context.Context, mon *monitor) {
	if err := f.open(ctx, mon); err != nil {
		mon.refusedAuth(err)
		f.log.Warn().Err(err).Msg("opening the server")
		return
	}
	if !mon.modern {
		if err := f.ownExchange(ctx, mon, `{"jsonrpc":"2.0","method":"`+jsonrpc.MethodInitialized+`"}`); err != nil {
			mon.refusedAuth(err)
			f.log.Warn().Err(err).Msg("sending notifications/initialized")
			return
		}
	}
	if err := mon.s.ListAll(); err != nil {
		f.log.Warn().Err(err).Msg("listing the server")
	}
	if mon.modern {
		f.listen(ctx, mon)
	}
}

// open sends the monitor's opening message. When the server answers that
// it does not speak the monitor's protocol version (error -32022, as an
// HTTP error or in the answer), the monitor falls back to the newest
// 2026-07-28-era version the server names below its own or, failing that,
// to the initialize handshake (the newest older version the server names,
// else 2025-06-18), and opens again. The fallback is kept: later rounds
// open in it at once.
func (f *front) open(ctx context.Context, mon *monitor) error {
	for {
		from := mon.version
		err := f.ownExchange(ctx, mon, mon.openMessage())
		var refused *versionRefused
		if !errors.As(err, &refused) || !mon.fallBack(refused.supported) {
			return err
		}
		f.log.Info().Str("refused", from).Str("version", mon.version).Bool("initialize", !mon.modern).
			Msg("the server does not speak the protocol version, falling back")
	}
}

// versionRefused is the server's answer that it does not speak the
// protocol version of the monitor's opening message.
type versionRefused struct{ supported []string }

func (e *versionRefused) Error() string {
	return "the server does not speak this protocol version (supported: " + strings.Join(e.supported, ", ") + ")"
}

// versionRefusal reads an answer to the monitor's opening message: a
// JSON-RPC error -32022 yields the versions the server says it supports.
func versionRefusal(raw []byte) (*versionRefused, bool) {
	if !bytes.Contains(raw, []byte("32022")) {
		return nil, false
	}
	m, err := jsonrpc.Parse(raw, jsonrpc.Limits{})
	if err != nil || m.Kind != jsonrpc.KindResponse || string(m.ID) != `"mcpdrift-open"` || m.Error == nil {
		return nil, false
	}
	var e struct {
		Code int `json:"code"`
		Data struct {
			Supported []string `json:"supported"`
		} `json:"data"`
	}
	if json.Unmarshal(m.Error, &e) != nil || e.Code != codeUnsupportedVersion {
		return nil, false
	}
	return &versionRefused{supported: e.Data.Supported}, true
}

// fallBack moves the monitor to an older protocol version than the one the
// server refused, given the versions it supports; false when there is none
// to move to (it already uses the initialize handshake).
func (mon *monitor) fallBack(supported []string) bool {
	if !mon.modern {
		return false
	}
	modern, legacy := "", ""
	for _, v := range supported {
		switch {
		case !isVersion(v):
		case v >= jsonrpc.ProtocolStateless && v < mon.version && v > modern:
			modern = v
		case v < jsonrpc.ProtocolStateless && v > legacy:
			legacy = v
		}
	}
	switch {
	case modern != "":
		mon.speak(modern, true)
	case legacy != "":
		mon.speak(legacy, false)
	default:
		mon.speak(defaultLegacyVersion, false)
	}
	return true
}

// speak sets the version the monitor and its session use.
func (mon *monitor) speak(version string, modern bool) {
	mon.version, mon.modern = version, modern
	mon.mu.Lock()
	mon.headers.Set("Mcp-Protocol-Version", version)
	mon.headers.Del("Mcp-Session-Id")
	mon.mu.Unlock()
	if modern {
		mon.s.SetOwnMeta(mon.meta())
	} else {
		mon.s.SetOwnMeta(nil)
	}
}

// isVersion reports a protocol version as MCP names them (YYYY-MM-DD).
func isVersion(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i, c := range []byte(v) {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ownExchange sends one message of the monitor's and feeds the answer to
// its session; a session id the server hands out is kept. An answer to the
// opening message that refuses its protocol version is a *versionRefused.
func (f *front) ownExchange(ctx context.Context, mon *monitor, msg string) error {
	forward := mon.primed
	if forward != nil {
		mon.primed = nil
	} else {
		forward = ownClient(ctx, mon.s, msg)
	}
	if forward == nil {
		return nil
	}
	if id := idOf(forward); id != nil {
		// Booked as a client's request of the monitor's session: once the
		// exchange is over, answered or not, its id is free again for the
		// next round's (the session refuses an id in flight).
		defer mon.s.Unanswered([][]byte{id})
	}
	ctx, cancel := context.WithTimeout(ctx, f.p.cfg.OwnTimeout)
	defer cancel()
	resp, err := f.ownPost(ctx, f.up.URL, mon.ownHeaders(), forward)
	var refused *refusedError
	if errors.As(err, &refused) {
		if r, ok := versionRefusal(refused.body); ok {
			return r
		}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		mon.mu.Lock()
		mon.headers.Set("Mcp-Session-Id", sid)
		mon.mu.Unlock()
	}
	var versionErr *versionRefused
	err = f.feed(ctx, mon.s, resp, true, idOf(forward), func(raw []byte) {
		if r, ok := versionRefusal(raw); ok {
			versionErr = r
		}
	})
	if versionErr != nil {
		return versionErr
	}
	return err
}

// ownClient passes a message of the proxy's own to sess as its client's,
// and returns what to forward (nil: nothing, or the message did not split,
// which a message of the proxy's own always does).
func ownClient(ctx context.Context, sess *session.Session, msg string) []byte {
	msgs, batch, err := jsonrpc.Split([]byte(msg), jsonrpc.Limits{})
	if err != nil {
		return nil
	}
	return sess.Client(ctx, []byte(msg), msgs, batch).ToServer
}

// ownAnswer passes a message of the answer to a request of the proxy's own
// to sess, which keeps it to itself (nothing of it reaches a client).
func ownAnswer(ctx context.Context, sess *session.Session, raw []byte) error {
	d := sess.Server(ctx, raw).Wait(ctx)
	d.Report()
	return d.Err
}

// feed passes the messages of an answer (JSON or an event stream) to sess,
// and to inspect when it is not nil; a request of the server's among them,
// which no client reads, is answered in the client's stead
// (Session.Unroutable). With untilResponse it is the answer to
// the proxy's own message whose id is sent (nil: one without an id): an
// event stream is left once the response to sent arrived, and a message
// holding a response to any other id (a client's request answered on a
// stream no client reads) is dropped (response_unmatched), not fed: else
// the session would take the client's request for answered, and the
// client get neither its answer nor an error.
func (f *front) feed(ctx context.Context, sess *session.Session, resp *http.Response, untilResponse bool, sent []byte, inspect func([]byte)) error {
	b := openBody(resp)
	switch b.kind {
	case mediaRefused:
		return fmt.Errorf("an answer the proxy cannot read as clients read it: %s", b.refused)
	case mediaJSON:
		raw, err := readAll(b.r, f.p.cfg.MaxMessage)
		if err != nil {
			return err
		}
		if inspect != nil {
			inspect(raw)
		}
		if unroutable, err := sess.Unroutable(raw); unroutable {
			return err
		}
		if untilResponse {
			if foreign, _ := answersOf(raw, sent); foreign {
				sess.Dropped(session.DropUnmatched)
				return nil
			}
		}
		return ownAnswer(ctx, sess, raw)
	case mediaSSE:
		rd := newSSEReader(b.r, f.p.cfg.MaxMessage)
		defer rd.release()
		// Nothing of it reaches a client; the decisions that wait (a
		// list_changed held until the proxy has re-listed) are made off
		// the reader, so that a burst of list_changed is coalesced rather
		// than re-listed one at a time (package ordered).
		q := ordered.New[session.Decision](func([]byte) error { return nil })
		defer func() { _ = q.Wait() }()
		for {
			ev, err := rd.next()
			if err != nil {
				return nil // the stream ended
			}
			if !ev.HasData || !isMessageName(ev.Name) {
				continue // no client reads it as a message
			}
			if inspect != nil {
				inspect(ev.Data)
			}
			if unroutable, err := sess.Unroutable(ev.Data); unroutable {
				// No client reads this stream: the server's request is
				// answered in the client's stead.
				if err != nil {
					f.log.Warn().Err(err).Msg("answering the server")
				}
				continue
			}
			answered := false
			if untilResponse {
				var foreign bool
				if foreign, answered = answersOf(ev.Data, sent); foreign {
					sess.Dropped(session.DropUnmatched)
					continue
				}
			}
			if err := q.Push(ctx, sess.Server(ctx, ev.Data), nil); err != nil {
				f.log.Warn().Err(err).Msg("re-listing the server")
			}
			if answered {
				return nil
			}
		}
	}
	return nil
}

// answersOf reports whether a message (or a batch) holds a response to an
// id other than sent (foreign), and whether it holds the response to sent
// (answered). A message that cannot be read is tied to the ids a lenient
// reader finds in it, as the session ties it (session.LooseIDs).
func answersOf(raw, sent []byte) (foreign, answered bool) {
	msgs, _, err := jsonrpc.Split(raw, jsonrpc.Limits{})
	if err != nil {
		for _, id := range session.LooseIDs(raw) {
			if sent != nil && bytes.Equal(id, sent) {
				answered = true
			} else {
				foreign = true
			}
		}
		return foreign, answered
	}
	for _, m := range msgs {
		if m.Kind != jsonrpc.KindResponse {
			continue
		}
		if sent != nil && bytes.Equal(m.ID, sent) {
			answered = true
		} else {
			foreign = true
		}
	}
	return foreign, answered
}

// idOf returns the id of one of the proxy's own messages (nil when it has
// none).
func idOf(msg []byte) []byte {
	if m, err := jsonrpc.Parse(msg, jsonrpc.Limits{}); err == nil {
		return m.ID
	}
	return nil
}

// listen holds a subscriptions/listen stream open for list changes, for at
// most Config.Relist; each change makes the monitor list again.
func (f *front) listen(ctx context.Context, mon *monitor) {
	ctx, cancel := context.WithTimeout(ctx, f.p.cfg.Relist)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":"mcpdrift-listen","method":"` + jsonrpc.MethodSubscriptionsListen + `","params":{"` + jsonrpc.MetaKey + `":` + string(mon.meta()) +
		`,"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true}}}`
	resp, err := f.ownPost(ctx, f.up.URL, mon.ownHeaders(), []byte(body))
	if err != nil {
		if ctx.Err() == nil {
			f.log.Info().Err(err).Msg("subscriptions/listen: no change stream; the next round lists again")
		}
		<-ctx.Done()
		return
	}
	defer resp.Body.Close()
	if mediaType(resp.Header) != "text/event-stream" {
		<-ctx.Done() // no change stream: the next round lists again
		return
	}
	_ = f.feed(ctx, mon.s, resp, false, nil, nil)
	<-ctx.Done()
}

// dropsOnly is a session.Meter that counts drops and no withheld items.
type dropsOnly struct{ session.Meter }

func (dropsOnly) Withheld(surface.Kind, int) {}
