package streamhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// legacySession is one client of the HTTP+SSE transport (2024-11-05): the
// server's messages arrive on the client's GET stream, the client's go by
// POST to the endpoint the stream named first, which the proxy rewrites to
// its own /<id>/messages?session=<id>.
type legacySession struct {
	id       string
	s        *session.Session
	endpoint string      // the upstream's message URL
	headers  http.Header // what the proxy's own requests carry (authorization)

	mu     sync.Mutex // one writer of the client's stream at a time
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed bool
}

// toClient writes one message to the client's stream.
func (l *legacySession) toClient(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("the client's event stream is closed")
	}
	if _, err := l.w.Write(appendEvent(nil, nil, b)); err != nil {
		return err
	}
	return l.rc.Flush()
}

func (l *legacySession) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err != nil {
		return err
	}
	return l.rc.Flush()
}

func (f *front) legacyStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpError(w, http.StatusMethodNotAllowed, nil, "method_not_allowed", r.Method+" is not a method of the event stream")
		return
	}
	resp, err := f.send(r.Context(), http.MethodGet, f.up.SSEURL, forwardHeaders(r.Header, false), nil)
	if err != nil {
		httpError(w, http.StatusBadGateway, nil, "upstream_unreachable", "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || mediaType(resp.Header) != "text/event-stream" {
		copyHeaders(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(f.p.cfg.MaxMessage)))
		return
	}
	l := &legacySession{id: newID(), w: w, rc: http.NewResponseController(w), headers: http.Header{}}
	if v := r.Header.Get("Authorization"); v != "" {
		l.headers.Set("Authorization", v)
	}
	cfg := f.up.Session
	cfg.SerialServer = true // every server message comes on this one stream
	l.s = session.New(cfg, f.up.Gate, f.up.Observer, l.toClient, func(b []byte) error {
		f.p.spawn(func() { f.legacySend(l, b) })
		return nil
	})
	f.mu.Lock()
	f.legacy[l.id] = l
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.legacy, l.id)
		f.mu.Unlock()
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
	}()

	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(http.StatusOK)
	_ = l.rc.Flush()
	base, _ := url.Parse(f.up.SSEURL)
	rd := newSSEReader(resp.Body, f.p.cfg.MaxMessage)
	ctx := r.Context()
	for {
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				f.log.Warn().Err(err).Msg("upstream event stream ended")
			}
			return
		}
		var out []byte
		var seen session.Seen
		switch {
		case string(ev.Name) == "endpoint":
			ref, err := url.Parse(string(ev.Data))
			if err != nil {
				f.log.Warn().Err(err).Msg("unreadable endpoint event")
				return
			}
			l.mu.Lock()
			l.endpoint = base.ResolveReference(ref).String()
			l.mu.Unlock()
			own := "/" + f.up.ID + "/messages?session=" + l.id
			out = appendEvent(nil, ev, []byte(own))
		default:
			out, seen = f.relay(nil, ctx, l.s, ev)
		}
		if len(out) > 0 {
			if err := l.write(out); err != nil {
				seen.Report()
				return
			}
		}
		seen.Report()
	}
}

func (f *front) legacyPost(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		httpError(w, http.StatusMethodNotAllowed, nil, "method_not_allowed", r.Method+" is not a method of the message endpoint")
		return
	}
	f.mu.Lock()
	l := f.legacy[r.URL.Query().Get("session")]
	f.mu.Unlock()
	if l == nil {
		httpError(w, http.StatusNotFound, nil, "unknown_session", "no open event stream with this session id")
		return
	}
	body, err := readAll(r.Body, f.p.cfg.MaxMessage)
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, nil, "message_too_large", err.Error())
		return
	}
	o := l.s.Client(r.Context(), body)
	if o.Reply != nil {
		if err := l.toClient(o.Reply); err != nil {
			httpError(w, http.StatusGone, nil, "stream_closed", err.Error())
			return
		}
	}
	if o.Forward == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	l.mu.Lock()
	endpoint := l.endpoint
	l.mu.Unlock()
	if endpoint == "" {
		httpError(w, http.StatusConflict, nil, "no_endpoint", "the server has not named its message endpoint yet")
		return
	}
	resp, err := f.send(r.Context(), http.MethodPost, endpoint, forwardHeaders(r.Header, len(o.Forward) != len(body)), o.Forward)
	if err != nil {
		httpError(w, http.StatusBadGateway, nil, "upstream_unreachable", "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, int64(f.p.cfg.MaxMessage)))
	if o.Opened && resp.StatusCode < 300 {
		if err := l.s.ListAll(); err != nil {
			f.log.Warn().Err(err).Msg("listing the server")
		}
	}
}

// legacySend posts one of the proxy's own messages; its answer arrives on
// the event stream, where the session keeps it to itself.
func (f *front) legacySend(l *legacySession, b []byte) {
	ctx, cancel := context.WithTimeout(f.p.ctx, f.p.cfg.OwnTimeout)
	defer cancel()
	l.mu.Lock()
	endpoint, h := l.endpoint, l.headers.Clone()
	l.mu.Unlock()
	resp, err := f.ownPost(ctx, endpoint, h, b)
	if err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
}
