package streamhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/ordered"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// legacySession is one client of the HTTP+SSE transport (2024-11-05): the
// server's messages arrive on the client's GET stream, the client's go by
// POST to the endpoint the stream named first, which the proxy rewrites to
// its own /<id>/messages?session=<id>.
type legacySession struct {
	id       string
	agent    string // the agent that opened it (agent.go)
	s        *session.Session
	q        *ordered.Queue[session.Decision] // what the session delivers, in the order the server sent it
	endpoint string                           // the upstream's message URL
	headers  http.Header                      // what the proxy's own requests carry (authorization)
	own      ownBound                         // the proxy's own requests in flight

	mu     lockorder.Mutex[lockorder.LegacySessionMu] // one writer of the client's stream at a time
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed bool
}

// toClient writes what the session delivers to the client's stream: an
// event framed already (ordered.Queue.Push).
func (l *legacySession) toClient(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errClientGone
	}
	if _, err := l.w.Write(b); err != nil {
		return fmt.Errorf("%w: %v", errClientGone, err)
	}
	if err := l.rc.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errClientGone, err)
	}
	return nil
}

// errClientGone is a write to a client's stream that failed.
var errClientGone = errors.New("the client's event stream is closed")

// reply writes one message of the proxy's own to the client's stream.
func (l *legacySession) reply(b []byte) error {
	if !frameable(b) {
		return errors.New("a message an event cannot carry unchanged")
	}
	return l.toClient(appendEvent(nil, nil, b))
}

func (l *legacySession) write(b []byte) error { return l.toClient(b) }

func (f *front) legacyStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpError(w, nil, CodeMethodNotAllowed, r.Method+" is not a method of the event stream")
		return
	}
	resp, err := f.send(r.Context(), http.MethodGet, f.up.SSEURL, forwardHeaders(r.Header, false), nil)
	if err != nil {
		httpError(w, nil, CodeUpstreamUnreachable, "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		f.refuseStatus(w, r, resp, nil, false, nil, nil)
		return
	}
	body := openBody(resp)
	if body.kind != mediaSSE {
		why := body.refused
		if why == "" {
			why = "not an event stream"
		}
		f.log.Warn().Str("code", string(session.DropFraming)).Str("why", why).Msg("upstream answer not passed on")
		httpError(w, nil, session.DropFraming, "the MCP server's event stream cannot be read as clients read it ("+why+")")
		return
	}
	l := &legacySession{id: newID(), agent: agentOf(r), w: w, rc: http.NewResponseController(w), headers: http.Header{}}
	if v := r.Header.Get("Authorization"); v != "" {
		l.headers.Set("Authorization", v)
	}
	// Every server message comes on this one stream: decisions that must
	// wait are made off it, and delivered in order (package ordered).
	l.q = ordered.New[session.Decision](l.toClient)
	scfg := f.up.Session
	scfg.Agent = l.agent
	l.s = session.New(scfg, f.up.Gate, f.up.Observer, func(b []byte) error {
		return l.own.send(f, func() *session.Session { return l.s }, func(ctx context.Context) { f.legacySend(ctx, l, b) })
	})
	f.mu.Lock()
	f.legacy[l.id] = l
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.legacy, l.id)
		f.mu.Unlock()
		l.s.End()
		// Decisions still made off the reader (bounded by the first-sight
		// wait) deliver, in order, before the stream ends.
		if err := l.q.Wait(); err != nil && !errors.Is(err, errClientGone) {
			f.log.Warn().Err(err).Msg("a decision made off the reader failed")
		}
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
	}()

	f.copyHeaders(w.Header(), resp.Header)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_ = l.rc.Flush()
	base, _ := url.Parse(f.up.SSEURL)
	rd := newSSEReader(body.r, f.p.cfg.MaxMessage)
	defer rd.release()
	ctx := r.Context()
	named := false
	for {
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				l.s.Dropped(session.DropFraming)
				f.log.Warn().Err(err).Msg("upstream event stream ended")
			}
			return
		}
		switch {
		case ev.HasData && string(bytes.TrimSpace(ev.Name)) == "endpoint":
			if named {
				// Only the first names the endpoint; a later one is read by
				// the Go SDK as a message, and must not move the proxy's
				// posts elsewhere.
				f.dropEvent(l.s, "a second endpoint event", ev)
				continue
			}
			endpoint, why := resolveEndpoint(base, ev.Data)
			if why != "" {
				l.s.Dropped(session.DropFraming)
				f.log.Warn().Str("code", string(session.DropFraming)).Str("why", why).Msg("unusable endpoint event")
				return
			}
			named = true
			l.mu.Lock()
			l.endpoint = endpoint
			l.mu.Unlock()
			err = l.write(appendNamed(nil, "endpoint", "/"+f.up.ID+"/messages?session="+l.id))
		case len(ev.Data) == 0:
			// Ids and retries mean nothing on this transport, and the Go
			// SDK reads every event as a message: only keep-alives pass.
			if ev.Comment {
				err = l.write(appendKeepAlive(nil))
			}
		default:
			// Every event with data is judged, whatever its name (the Go
			// SDK reads every event after the endpoint as a message), and
			// goes out as a message event, in the order the server sent
			// it.
			err = l.q.Push(ctx, l.s.Server(ctx, ev.Data), func(out []byte) []byte {
				if out == nil {
					return nil
				}
				if !frameable(out) {
					f.dropEvent(l.s, "a message that an event cannot carry unchanged", ev)
					return nil
				}
				return appendEvent(nil, ev, out)
			})
		}
		switch {
		case errors.Is(err, errClientGone):
			return
		case err != nil:
			f.log.Warn().Err(err).Msg("re-listing the server")
		}
	}
}

// resolveEndpoint reads the message URL an endpoint event names, resolved
// against the SSE URL; it must be of the SSE URL's origin (as the
// TypeScript SDK requires), or the proxy would post the client's messages,
// and its credentials, wherever the upstream said.
func resolveEndpoint(base *url.URL, data []byte) (string, string) {
	ref, err := url.Parse(string(data))
	if err != nil {
		return "", "an unreadable endpoint URL"
	}
	u := base.ResolveReference(ref)
	if u.Scheme != base.Scheme || u.Host != base.Host {
		return "", "an endpoint of another origin than the event stream's"
	}
	return u.String(), ""
}

// appendNamed writes an event of the proxy's own with a name and one line
// of data.
func appendNamed(dst []byte, name, data string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

func (f *front) legacyPost(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		httpError(w, nil, CodeMethodNotAllowed, r.Method+" is not a method of the message endpoint")
		return
	}
	f.mu.Lock()
	l := f.legacy[r.URL.Query().Get("session")]
	f.mu.Unlock()
	if l == nil {
		httpError(w, nil, CodeUnknownStream, "no open event stream with this session id")
		return
	}
	if !f.ownedBy(w, r, l.agent) {
		return
	}
	body, err := readBody(r, f.p.cfg.MaxMessage)
	if err != nil {
		refuseMessage(w, session.MessageTooLarge, session.TooLarge(f.p.cfg.MaxMessage))
		return
	}
	// The one parse of the client's message: the session and the headers'
	// checks read it, never the bytes again.
	msgs, batch, err := jsonrpc.SplitIn(new(canonjson.Doc), body, jsonrpc.Limits{})
	if err != nil {
		refuseMessage(w, session.InvalidMessage, session.Unreadable(err))
		return
	}
	// A call held for an admin's approval waits here, this POST with it;
	// the answer comes on the event stream like any other.
	d := l.s.Client(r.Context(), body, msgs, batch).Wait(r.Context())
	if d.ToClient != nil {
		if err := l.reply(d.ToClient); err != nil {
			httpError(w, nil, CodeStreamClosed, err.Error())
			return
		}
	}
	if d.ToServer == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	l.mu.Lock()
	endpoint := l.endpoint
	l.mu.Unlock()
	ids := requestIDs(d.ToServer, body, msgs)
	if endpoint == "" {
		l.s.Unanswered(ids)
		httpError(w, nil, CodeNoEndpoint, "the server has not named its message endpoint yet")
		return
	}
	resp, err := f.send(r.Context(), http.MethodPost, endpoint, forwardHeaders(r.Header, !bytes.Equal(d.ToServer, body)), d.ToServer)
	if err != nil {
		l.s.Unanswered(ids)
		httpError(w, nil, CodeUpstreamUnreachable, "the MCP server behind this proxy could not be reached")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// The client learns of the failure from this answer; an answer to
		// these requests that came later on the stream must not follow it.
		f.refuseStatus(w, r, resp, l.s, batch, nil, ids)
		return
	}
	// The answers come on the event stream; the body of this one is
	// nobody's to read. Its headers are judged like any answer's.
	f.copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if d.Opened {
		if err := l.s.ListAll(); err != nil {
			f.log.Warn().Err(err).Msg("listing the server")
		}
	}
}

// legacySend posts one of the proxy's own messages; its answer arrives on
// the event stream, where the session keeps it to itself.
func (f *front) legacySend(ctx context.Context, l *legacySession, b []byte) {
	ctx, cancel := context.WithTimeout(ctx, f.p.cfg.OwnTimeout)
	defer cancel()
	l.mu.Lock()
	endpoint, h := l.endpoint, l.headers.Clone()
	l.mu.Unlock()
	resp, err := f.ownPost(ctx, endpoint, h, b)
	if err != nil {
		f.log.Warn().Err(err).Msg("the proxy's own request failed")
		f.ownFailed(l.s, b, err)
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
}
