package streamhttp

import (
	"bytes"
	"context"
	"net/http"
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
	s       *session.Session
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

const defaultLegacyVersion = "2025-06-18"

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
	mon.modern = mon.modern || mon.version >= "2026-07-28"
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
	if err := f.ownExchange(ctx, mon, mon.openMessage()); err != nil {
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

// ownExchange sends one message of the monitor's and feeds the answer to
// its session; a session id the server hands out is kept.
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
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		mon.mu.Lock()
		mon.headers.Set("Mcp-Session-Id", sid)
		mon.mu.Unlock()
	}
	return f.feed(ctx, mon.s, resp, true)
}

// feed passes the messages of an answer (JSON or an event stream) to sess;
// with untilResponse an event stream is left once a response arrived.
func (f *front) feed(ctx context.Context, sess *session.Session, resp *http.Response, untilResponse bool) error {
	switch mediaType(resp.Header) {
	case "application/json":
		raw, err := readAll(resp.Body, f.p.cfg.MaxMessage)
		if err != nil {
			return err
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
	_ = f.feed(ctx, mon.s, resp, false)
	<-ctx.Done()
}
