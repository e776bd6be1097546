package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// The server-to-client direction. Every message from upstream is parsed by
// the proxy's strict parser and judged before any byte of it reaches the
// client; there is no branch that passes on what could not be judged
// (docs/adr/0006). A message is delivered as the bytes the session returns:
// the original, a listing with unapproved items taken out, or the proxy's
// own error for the client's pending request. What cannot be read, is
// ambiguous, answers nothing pending, or comes from a server that is not
// served is dropped and counted (DropCodes).

// Server decides on one message from the upstream server: the one way
// bytes from upstream reach a client. It never waits itself: a decision
// that must wait (a listing page whose verdict is due, a server request on
// first sight, a list_changed held until the proxy has re-listed) is left
// to Decision.Wait, which a serial transport runs off its reader (package
// ordered) and any other transport where it stands.
func (s *Session) Server(ctx context.Context, raw []byte) Decision {
	out, later, seen, err := s.judgeServer(ctx, raw, true)
	d := Decision{ToClient: out, Err: err, seen: seen}
	if later != nil {
		d.later = func(ctx context.Context) Decision {
			out, err := later(ctx)
			return Decision{ToClient: out, Err: err}
		}
	}
	return d
}

// Seen is what handling a server message observed (the calls it answered),
// to be reported once the message is delivered: the observer queues for
// publishing, and may wake its publisher, which the answer need not wait
// for.
type Seen struct {
	s       *Session
	calls   []Call
	notice  bool   // the message is one notification
	request bool   // the message is one request of the server's ...
	id      []byte // ... with this id
}

// Report hands what was seen to the observer; call it once.
func (o Seen) Report() {
	for _, c := range o.calls {
		o.s.observe(c)
	}
}

// decision is the part of a decision on a server message that waits (for
// a verdict, or the proxy's own re-listing): it returns the bytes to
// deliver and the error of what it sent the server meanwhile.
type decision func(ctx context.Context) ([]byte, error)

// judgeServer decides on one message from the server. It returns the bytes
// to deliver now, or later, a decision to run before delivering (only for
// a message that came alone and mayWait).
func (s *Session) judgeServer(ctx context.Context, raw []byte, mayWait bool) (out []byte, later decision, seen Seen, err error) {
	seen = Seen{s: s}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, seen, nil // no message at all (an empty body): nothing to deliver or judge
	}
	// The one parse of the message: every later reader (the engine hashing
	// a page, the filter, the instructions pin) reads it, never the bytes
	// again. It is given back once no decision keeps it.
	d := canonjson.Borrow()
	d.SetLazy(surface.LazyValues)
	defer func() {
		if later == nil {
			canonjson.Return(d)
		}
	}()
	msgs, batch, perr := jsonrpc.SplitIn(d, raw, jsonrpc.Limits{})
	if perr != nil {
		return s.unreadable(raw, perr), nil, seen, nil
	}
	if !batch {
		seen.notice, seen.request = msgs[0].Kind == jsonrpc.KindNotification, msgs[0].Kind == jsonrpc.KindRequest
		if seen.request {
			seen.id = bytes.Clone(msgs[0].ID)
		}
		out, later, err := s.serverMessage(ctx, msgs[0], mayWait, &seen)
		return out, later, seen, err
	}
	// A batch: each element is judged like a single message, without
	// waiting (the batch goes out whole), so a listing inside it is
	// filtered like any other.
	var kept [][]byte
	var errs []error
	changed := false
	for _, m := range msgs {
		b, _, err := s.serverMessage(ctx, m, false, &seen)
		errs = append(errs, err)
		changed = changed || !bytes.Equal(b, m.Raw)
		if b != nil {
			kept = append(kept, b)
		}
	}
	switch {
	case !changed:
		return raw, nil, seen, errors.Join(errs...)
	case len(kept) == 0:
		return nil, nil, seen, errors.Join(errs...)
	}
	return joinBatch(kept), nil, seen, errors.Join(errs...)
}

// unreadable handles a message the proxy's parser refuses. Nothing of it
// reaches the client: when it can be told which pending request it
// answers, that request gets an error saying why, and a listing it
// answered is reported as invalid; otherwise it is dropped.
func (s *Session) unreadable(raw []byte, perr error) []byte {
	code := DropUnreadable
	if errors.Is(perr, jsonrpc.ErrAmbiguous) {
		code = DropAmbiguous
	}
	s.Dropped(code)
	why := "the server sent a message the proxy could not read (" + string(code) + ")"
	var answers [][]byte
	matched := false
	for _, id := range looseIDs(raw) {
		b, ok := s.unreadableAnswer(id, code, why)
		matched = matched || ok
		if b != nil {
			answers = append(answers, b)
		}
	}
	switch {
	case !matched:
		// It may have been a listing: nothing the server lists is trusted
		// until the proxy has judged a listing again.
		s.poison(why)
		return nil
	case len(answers) == 0:
		return nil // the proxy's own
	case len(answers) == 1:
		return answers[0]
	}
	return joinBatch(answers)
}

// unreadableAnswer is what the client gets in place of an unreadable
// answer to its pending request id: an error with the drop's code (nil
// when id is not pending, or is the proxy's own; matched says it was one of
// the two). A listing it answered fails, and is published as failing.
func (s *Session) unreadableAnswer(id []byte, code Code, why string) (answer []byte, matched bool) {
	p, ok := s.reqs.take(string(id))
	switch {
	case ok && p.own:
		if p.got.kind != 0 {
			s.readDone(p, nil, why)
		}
		if p.kind != 0 {
			s.failListing(p.kind, refOf(p), why, true)
		}
		return nil, true
	case !ok:
		return nil, false
	case p.kind != 0:
		s.failListing(p.kind, refOf(p), why, true)
	}
	return Reply(id, code, "mcpdrift proxy: the server's answer could not be read exactly as a client would read it, so it was dropped"), true
}

// LooseIDs reads the ids of a message the strict parser refuses as a
// lenient reader would (looseIDs): those the session ties it to.
func LooseIDs(raw []byte) [][]byte { return looseIDs(raw) }

// looseIDs reads the ids of a message the strict parser refused, the way a
// lenient reader would, as raw JSON (strings or numbers): the "id" members
// of the top-level object, or of the objects of a top-level array (a
// batch), read token by token so that what comes after an id (a NaN, a
// second value) does not hide it, nor a byte order mark before it.
func looseIDs(raw []byte) [][]byte {
	raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var ids [][]byte
	keyDepth, depth, expectKey := 0, 0, false
	for {
		tok, err := dec.Token()
		if err != nil {
			return ids
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if depth == 0 {
					keyDepth = 1
					if d == '[' {
						keyDepth = 2
					}
				}
				depth++
				if depth == keyDepth {
					expectKey = d == '{'
				}
			case '}', ']':
				depth--
				if depth == 0 {
					return ids
				}
				expectKey = depth == keyDepth // a member's value ended
			}
			continue
		}
		if depth != keyDepth {
			continue
		}
		if !expectKey {
			expectKey = true // a scalar value ended
			continue
		}
		expectKey = false
		if k, _ := tok.(string); k != "id" {
			continue
		}
		v, err := dec.Token()
		if err != nil {
			return ids
		}
		switch id := v.(type) {
		case string:
			ids = append(ids, strconv.AppendQuote(nil, id))
		case json.Number:
			ids = append(ids, []byte(id))
		}
		expectKey = true
	}
}

// serverMessage decides on one message. mayWait says that the message
// came alone and its decision may wait for what is due (a verdict, the
// proxy's own re-listing): it then returns later, to run before
// delivering, and no out. The calls it answers go to seen.
func (s *Session) serverMessage(ctx context.Context, m *jsonrpc.Message, mayWait bool, seen *Seen) (out []byte, later decision, err error) {
	raw := m.Raw
	switch m.Kind {
	case jsonrpc.KindNotification:
		kinds := listChanged[m.Method]
		j := s.judge() // a stateless client's change stream: the session that judges it re-lists
		for _, k := range kinds {
			// One re-listing in flight and one owed, however many come
			// (flood.go).
			if err := j.relistSoon(k, true); err != nil {
				// Delivered only as any notification is: while open.
				out, _, _ := s.whileOpen(ctx, m, false, func() ([]byte, error) { return nil, nil })
				return out, nil, err
			}
		}
		if len(kinds) == 0 || !mayWait {
			return s.whileOpen(ctx, m, mayWait, func() ([]byte, error) { return nil, nil })
		}
		if !j.holdChange(kinds) {
			// One of the same listings is held already: delivered once
			// the same re-listing is done, it says all this one would.
			s.Dropped(DropCoalesced)
			return nil, nil, nil
		}
		// Judged before it is forwarded: the client hears of the change
		// once the proxy has re-listed, so that what it lists or calls next
		// is decided on the new listing; and only while the server is
		// open: a closed server's list_changed is the proxy's business.
		variant := s.currentVariant()
		return nil, func(ctx context.Context) ([]byte, error) {
			defer j.releaseChange(kinds)
			for _, k := range kinds {
				j.waitRelisted(ctx, k)
			}
			if open, _ := s.servedWhole(ctx, variant, false); open {
				return raw, nil
			}
			s.Dropped(DropServerClosed)
			return nil, nil
		}, nil
	case jsonrpc.KindRequest:
		return s.serverRequest(ctx, m, mayWait)
	}
	p, ok := s.reqs.take(string(m.ID))
	switch {
	case !ok:
		return s.unmatched(m), nil, nil
	case p.own:
		return nil, nil, s.ownResponse(p, m)
	}
	switch {
	case p.method == jsonrpc.MethodInitialize || p.method == jsonrpc.MethodDiscover:
		if m.Result == nil {
			return raw, nil, nil
		}
		s.init.set(bytes.Clone(m.Result))
		s.mu.Lock()
		s.declared = declaredKinds(m)
		s.mu.Unlock()
		return s.pinInit(ctx, s.currentVariant(), m), nil, nil
	case p.kind != 0:
		return s.listPage(ctx, p.kind, m, mayWait)
	case p.got.kind != 0:
		return s.uiAnswer(ctx, p, m), nil, nil
	case p.method == jsonrpc.MethodToolsCall:
		seen.calls = append(seen.calls, Call{Tool: p.tool, Error: m.Error != nil || isToolError(m.Result), Latency: time.Since(p.start), ArgsDigest: p.digest, AlertCode: p.alert, Arguments: p.args, Policy: p.policy})
	}
	return raw, nil, nil
}

// unmatched handles a response to no request the client has pending: a
// second answer, an answer to nothing, or an id written another way than
// the request's ("2" for 2, 2.0, 2e0), which clients that coerce ids would
// take for the answer. It never reaches the client; a pending request whose
// id it coerces to is answered with an error instead, so that the client
// does not wait for an answer that will not come.
func (s *Session) unmatched(m *jsonrpc.Message) []byte {
	key, ok := idKey(m.ID)
	if !ok {
		s.Dropped(DropUnmatched)
		return nil
	}
	hit := s.reqs.takeClientKeyed(key)
	if hit == nil {
		s.Dropped(DropUnmatched)
		return nil
	}
	s.Dropped(DropAmbiguous)
	return Reply(hit, DropAmbiguous, "mcpdrift proxy: the server answered with the id "+string(m.ID)+", not as this request's id was written; the answer was dropped")
}

// idKey is the value a lenient client takes an id for: a number's value,
// and a string's text, itself read as a number when it is one (JavaScript
// clients look responses up by Number(id)).
func idKey(raw []byte) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	text := string(raw)
	if raw[0] == '"' {
		if plain := plainString(raw); plain != "" {
			text = strings.TrimSpace(plain)
		} else {
			var str string
			if json.Unmarshal(raw, &str) != nil {
				return "", false
			}
			text = strings.TrimSpace(str)
		}
	}
	if f, err := strconv.ParseFloat(text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return "n:" + strconv.FormatFloat(f, 'g', -1, 64), true
	}
	return "s:" + text, true
}

// plainString returns the text of the JSON string raw when it is printable
// ASCII without an escape (an id's usual form: what json.Unmarshal would
// decode it to, without decoding it), "" otherwise.
func plainString(raw []byte) string {
	if len(raw) < 3 || raw[len(raw)-1] != '"' {
		return ""
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return ""
		}
	}
	return string(raw[1 : len(raw)-1])
}

// serverRequest decides on a request of the server's (sampling,
// elicitation, roots, ping): it reaches the client only while the server
// is open (servedWhole). Otherwise the server gets an error in the
// client's stead, and a ping the proxy's own answer: the server is kept
// alive, the agent hears nothing of it.
func (s *Session) serverRequest(ctx context.Context, m *jsonrpc.Message, mayWait bool) ([]byte, decision, error) {
	return s.whileOpen(ctx, m, mayWait, func() ([]byte, error) {
		answer := []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`)
		if m.Method != jsonrpc.MethodPing {
			answer = Reply(m.ID, DropServerClosed, "mcpdrift proxy: server "+strconv.Quote(s.cfg.Server)+" is closed; its requests do not reach the client")
		}
		if err := s.toServer(answer); err != nil {
			return nil, fmt.Errorf("answering the server's %s request in the client's stead: %w", m.Method, err)
		}
		return nil, nil
	})
}

// Unroutable answers, in the client's stead, a message of the server's
// that is one request sent where no client reads it (on the answer to a
// request of the proxy's own): a ping with the proxy's own empty result,
// any other request with an error (DropUnroutable), and counts it, so that
// a server that waits for the answer before it answers the proxy (roots
// while it lists its tools) is not left waiting. It reports whether raw
// was such a request; anything else is the caller's to pass to Server.
func (s *Session) Unroutable(raw []byte) (bool, error) {
	m, err := jsonrpc.Parse(raw, jsonrpc.Limits{})
	if err != nil || m.Kind != jsonrpc.KindRequest {
		return false, nil
	}
	s.Dropped(DropUnroutable)
	answer := []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`)
	if m.Method != jsonrpc.MethodPing {
		answer = Reply(m.ID, DropUnroutable, "mcpdrift proxy: this request was sent on the answer to a request of the proxy's own, which no client reads; send it on a stream of the client's")
	}
	if err := s.toServer(answer); err != nil {
		return true, fmt.Errorf("answering the server's %s request in the client's stead: %w", m.Method, err)
	}
	return true, nil
}

// whileOpen delivers a message the server sends of its own accord (a
// notification of any kind, a request) only while the server is open
// (servedWhole); otherwise it is dropped, counted (DropServerClosed), and
// closed runs: a closed server is silent on every channel. A decision due
// on first sight waits for the verdict when the message came alone.
func (s *Session) whileOpen(ctx context.Context, m *jsonrpc.Message, mayWait bool, closed func() ([]byte, error)) ([]byte, decision, error) {
	variant := s.currentVariant()
	decide := func(ctx context.Context, awaiting bool) ([]byte, error) {
		if open, _ := s.servedWhole(ctx, variant, awaiting); open {
			return m.Raw, nil
		}
		s.Dropped(DropServerClosed)
		return closed()
	}
	if !mayWait || !s.awaits(variant) {
		out, err := decide(ctx, false)
		return out, nil, err
	}
	if _, ok := s.view(ctx, variant, false); ok {
		out, err := decide(ctx, false)
		return out, nil, err
	}
	return nil, func(ctx context.Context) ([]byte, error) { return decide(ctx, true) }, nil
}

// servedWhole reports whether the server is open to its own messages
// (notifications, requests) in variant: verified and not drifted in this
// session, or under the alert posture. Under withhold_changed a server
// that differs from its baseline serves only its unchanged items, and
// what it sends of its own accord cannot be told to come from one of
// them: it stays closed. status is the server's status ("unknown" when
// the gate knows none).
func (s *Session) servedWhole(ctx context.Context, variant string, awaiting bool) (open bool, st string) {
	v, ok := s.view(ctx, variant, awaiting)
	if !ok {
		return false, "unknown"
	}
	return v.Serve && (v.Alert || v.Status == string(status.Verified) && !s.judge().tools.driftedFrom(v, ok)), v.Status
}

func (s *Session) ownResponse(p pendingReq, m *jsonrpc.Message) error {
	if p.got.kind != 0 {
		if m.Result == nil {
			s.readDone(p, nil, "the server answered the proxy's get with an error")
		} else {
			s.readDone(p, m.Result, "")
		}
		return nil
	}
	if p.kind == 0 {
		return nil
	}
	s.mu.Lock()
	superseded := p.gen != s.kinds[p.kind].gen
	s.mu.Unlock()
	if superseded {
		return nil // a newer listing of this kind started (list_changed): this one's pages would mix with it
	}
	if m.Result == nil {
		// The server refused its own listing: nothing of it can be trusted
		// until it lists again. Not published: an error is no surface.
		s.failListing(p.kind, refOf(p), errorAnswer, false)
		return nil
	}
	pg, last, err := s.addPage(p.kind, byProxy, m)
	if err == nil && !last {
		next := pg.cursor
		s.mu.Lock()
		ks := &s.kinds[p.kind]
		repeated := ks.cursors[next]
		if repeated {
			ks.listing[byProxy].failure = fmt.Sprintf("the server gave the cursor %q a second time: the listing would never end", next)
		} else {
			if ks.cursors == nil {
				ks.cursors = map[string]bool{}
			}
			ks.cursors[next] = true
		}
		s.mu.Unlock()
		if !repeated {
			return s.relist(p.kind, next)
		}
	}
	s.finishListing(p.kind, byProxy)
	return nil
}
