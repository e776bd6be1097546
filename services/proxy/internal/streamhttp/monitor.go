package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// monitor is the proxy's own view of an upstream its clients use without a
// session (2026-07-28, or a server that keeps none): the proxy opens it as a
// client would (server/discover or initialize), lists everything, publishes
// what it saw, and lists again when the server says something changed and
// every Config.Relist. Requests of stateless clients are judged by it.
type monitor struct {
	s *session.Session
	// modern and version are what the monitor speaks: the era and version
	// of the request that started it, until the server refuses them and
	// names older ones (fallBack); written only by the monitor's goroutine
	// once it runs.
	modern  bool   // 2026-07-28: server/discover, _meta, subscriptions/listen
	version string // the protocol version it speaks
	primed  []byte // the first opening message, already decided on

	mu      sync.Mutex
	headers http.Header // version, authorization, the session id a server may hand out
}

func (mon *monitor) ownHeaders() http.Header {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	return mon.headers.Clone()
}

const (
	defaultLegacyVersion = "2025-06-18"
	firstModernVersion   = "2026-07-28"
	// codeUnsupportedVersion is the JSON-RPC error of a request in a
	// protocol version the server does not speak (2026-07-28); its data's
	// "supported" lists the versions it does.
	codeUnsupportedVersion = -32022
)

// follower returns a session for one stateless request, judged by the
// upstream's monitor (started on first use, in the era of that request).
func (f *front) follower(r *http.Request, msgs []*jsonrpc.Message) *session.Session {
	f.mu.Lock()
	mon := f.mon
	if mon == nil {
		mon = f.newMonitor(r, msgs)
		f.mon = mon
		f.p.spawn(func() { f.runMonitor(mon) })
	}
	f.mu.Unlock()
	cfg := f.up.Session
	cfg.Follow = mon.s
	return session.New(cfg, f.up.Gate, f.up.Observer, discard, discard)
}

func (f *front) newMonitor(r *http.Request, msgs []*jsonrpc.Message) *monitor {
	mon := &monitor{headers: http.Header{}, version: r.Header.Get("Mcp-Protocol-Version")}
	if v := r.Header.Get("Authorization"); v != "" {
		mon.headers.Set("Authorization", v)
	}
	for _, m := range msgs {
		if bytes.Contains(m.Params, []byte(`"io.modelcontextprotocol/protocolVersion"`)) || m.Method == "server/discover" {
			mon.modern = true
			if mon.version == "" {
				mon.version = metaVersion(m.Params)
			}
		}
	}
	mon.modern = mon.modern || mon.version >= firstModernVersion
	if mon.version == "" {
		mon.version = defaultLegacyVersion
	}
	mon.headers.Set("Mcp-Protocol-Version", mon.version)
	cfg := f.up.Session
	cfg.Meter = nil // nothing of the monitor's reaches a client: nothing withheld from one
	if mon.modern {
		cfg.OwnMeta = ownMeta(mon.version)
	}
	mon.s = session.New(cfg, f.up.Gate, f.up.Observer, discard, func(b []byte) error {
		f.p.spawn(func() { f.own(mon.s, mon.ownHeaders(), b) })
		return nil
	})
	// The session learns its variant from the opening message now, so that
	// the first stateless request is judged in it; its listing is on the
	// way, so decisions await the verdict on it.
	mon.primed = mon.s.Client(context.Background(), []byte(mon.openMessage())).Forward
	mon.s.WillList()
	return mon
}

// openMessage is what the monitor opens with: server/discover, or
// initialize for an older server.
func (mon *monitor) openMessage() string {
	if mon.modern {
		return `{"jsonrpc":"2.0","id":"mcpdrift-open","method":"server/discover","params":{"_meta":` + string(ownMeta(mon.version)) + `}}`
	}
	return `{"jsonrpc":"2.0","id":"mcpdrift-open","method":"initialize","params":{"protocolVersion":` +
		string(canonjson.AppendString(nil, mon.version)) + `,"capabilities":{},"clientInfo":{"name":"mcpdrift-proxy","version":"1"}}}`
}

func ownMeta(version string) []byte {
	b := []byte(`{"io.modelcontextprotocol/protocolVersion":`)
	b = canonjson.AppendString(b, version)
	return append(b, `,"io.modelcontextprotocol/clientInfo":{"name":"mcpdrift-proxy","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`...)
}

func metaVersion(params []byte) string {
	d := new(canonjson.Doc)
	if d.Parse(params, canonjson.Limits{LaxNumbers: true}) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return ""
	}
	meta, ok := d.Get(canonjson.Root, "_meta")
	if !ok || d.Kind(meta) != canonjson.Object {
		return ""
	}
	if v, ok := d.Get(meta, "io.modelcontextprotocol/protocolVersion"); ok && d.Kind(v) == canonjson.String {
		return d.Text(v)
	}
	return ""
}

// runMonitor opens, lists and listens until the proxy closes; every round
// ends after Config.Relist (or when the change stream ends) and starts
// again, so a server that sends no notifications is still looked at.
func (f *front) runMonitor(mon *monitor) {
	for {
		f.monitorRound(mon)
		select {
		case <-f.p.ctx.Done():
			return
		case <-time.After(f.p.cfg.Relist):
		}
	}
}

func (f *front) monitorRound(mon *monitor) {
	ctx := f.p.ctx
	if err := f.open(ctx, mon); err != nil {
		f.log.Warn().Err(err).Msg("opening the server")
		return
	}
	if !mon.modern {
		if err := f.ownExchange(ctx, mon, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
			f.log.Warn().Err(err).Msg("notifications/initialized")
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
		case v >= firstModernVersion && v < mon.version && v > modern:
			modern = v
		case v < firstModernVersion && v > legacy:
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
		mon.s.SetOwnMeta(ownMeta(version))
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
		forward = mon.s.Client(ctx, []byte(msg)).Forward
	}
	if forward == nil {
		return nil
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
	err = f.feed(ctx, mon.s, resp, true, func(raw []byte) {
		if r, ok := versionRefusal(raw); ok {
			versionErr = r
		}
	})
	if versionErr != nil {
		return versionErr
	}
	return err
}

// feed passes the messages of an answer (JSON or an event stream) to sess,
// and to inspect when it is not nil; with untilResponse an event stream is
// left once a response arrived.
func (f *front) feed(ctx context.Context, sess *session.Session, resp *http.Response, untilResponse bool, inspect func([]byte)) error {
	switch mediaType(resp.Header) {
	case "application/json":
		raw, err := readAll(resp.Body, f.p.cfg.MaxMessage)
		if err != nil {
			return err
		}
		if inspect != nil {
			inspect(raw)
		}
		_, err = sess.Server(ctx, raw)
		return err
	case "text/event-stream":
		rd := newSSEReader(resp.Body, f.p.cfg.MaxMessage)
		for {
			ev, err := rd.next()
			if err != nil {
				return nil // the stream ended
			}
			if !ev.HasData {
				continue
			}
			if inspect != nil {
				inspect(ev.Data)
			}
			if _, err := sess.Server(ctx, ev.Data); err != nil {
				f.log.Warn().Err(err).Msg("re-listing the server")
			}
			if m, err := jsonrpc.Parse(ev.Data, jsonrpc.Limits{}); untilResponse && err == nil && m.Kind == jsonrpc.KindResponse {
				return nil
			}
		}
	}
	return nil
}

// listen holds a subscriptions/listen stream open for list changes, for at
// most Config.Relist; each change makes the monitor list again.
func (f *front) listen(ctx context.Context, mon *monitor) {
	ctx, cancel := context.WithTimeout(ctx, f.p.cfg.Relist)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":"mcpdrift-listen","method":"subscriptions/listen","params":{"_meta":` + string(ownMeta(mon.version)) +
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
	_ = f.feed(ctx, mon.s, resp, false, nil)
	<-ctx.Done()
}
