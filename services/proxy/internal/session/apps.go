package session

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// MCP Apps (docs/adr/0016): the HTML a host renders for a tool is what a
// resources/read of its ui:// resource returns, so those contents are
// items of the surface (surface.KindUIContent, form v2). Prompts
// (docs/adr/0017): the messages a prompts/get of a prompt that declares
// no arguments returns are a function of nothing the client sends, so
// they are items too (surface.KindPromptMessages, form v2), got by the
// same machinery: the proxy's own gets per round, their bounds, their
// placeholders, and the agent's answers judged against the approved item.
//
//   - When the session has the whole surface to publish and it lists ui://
//     resources, it reads each of them on its own account first (at most
//     MaxUIReads, of at most MaxUIReadBytes in all; past that a read's
//     place in the capture holds a placeholder the engine refuses, so the
//     surface fails closed: DropUIReadLimit) and publishes the contents
//     with the listings (the capture's uiContents). Likewise it gets each
//     listed prompt that declares no arguments (at most MaxPromptGets; the
//     bytes count against the same MaxUIReadBytes: DropPromptGetLimit) and
//     publishes the messages (the capture's promptMessages). A re-listing
//     of the resources or the prompts by the proxy gets them all again;
//     any other listing publishes what was last got.
//   - An agent's read of a ui:// resource is passed on only when the
//     contents the server returned hash to the approved item's, and the
//     server is served (RefuseUIContentNotApproved otherwise; the alert
//     posture forwards and reports them). Contents that differ from the
//     ones the session published are kept and the surface is published
//     again, so that the drift service sees the change.
//   - An agent's prompts/get of a prompt whose live definition declares no
//     arguments is judged the same way (RefusePromptMessagesNotApproved),
//     whatever arguments the agent passes: the answer is hashed, not the
//     request.
//   - A tools/call of a tool whose UI link names a resource the baseline
//     does not approve, or the server's last listing does not list as
//     approved, is refused (RefuseUILinkNotApproved).

// The bounds of the proxy's own gets, per publication: reads of UI
// resources, gets of argument-less prompts, and the bytes of both
// together (one bound shared by the two kinds).
const (
	MaxUIReads     = 32
	MaxPromptGets  = 32
	MaxUIReadBytes = 16 << 20
)

// gotKey names what one of the proxy's own gets (or an agent's judged one)
// gets: the read contents of a UI resource (surface.KindUIContent, by
// uri) or the messages of an argument-less prompt
// (surface.KindPromptMessages, by name). The zero key gets nothing.
type gotKey struct {
	kind surface.Kind
	name string
}

// hashGot hashes the result raw of the get k as its item, made with o.
func hashGot(o surface.Options, k gotKey, raw []byte) (surface.Digest, bool, error) {
	if k.kind == surface.KindPromptMessages {
		return surface.HashGetResult(o, k.name, raw)
	}
	return surface.HashReadResult(o, k.name, raw)
}

// uiState is what a session holds of what its own gets got (the UI
// resources' contents, the argument-less prompts' messages), of the tools'
// UI links and of the prompts' arguments; s.mu guards it.
type uiState struct {
	round   int  // the proxy's own gets under way belong to this round
	waiting int  // own gets of the round not answered yet
	due     bool // the whole surface is to be published once the round is done
	ended   bool // the session ended (End): no round publishes any more
	// results are the results the capture carries, by key: of the last
	// round, or an agent's get since that returned others.
	results map[gotKey][]byte
	hashes  map[gotKey]surface.Digest // their item hashes, made with with (absent: a placeholder)
	with    surface.Options
	links   map[string][]string // the UI links of each tool's live definition
	noArgs  map[string]bool     // whether each prompt's live definition declares no arguments
}

// rehash hashes every result kept again with o (a placeholder has no
// hash); s.mu held.
func (ui *uiState) rehash(o surface.Options) {
	ui.with = o
	if ui.hashes == nil {
		ui.hashes = map[gotKey]surface.Digest{}
	}
	clear(ui.hashes)
	for u, r := range ui.results {
		if h, ok, err := hashGot(o, u, r); err == nil && ok {
			ui.hashes[u] = h
		}
	}
}

// uiURIs are the UI resources of the last complete resources listing,
// sorted: those whose scheme is ui (surface.IsUIResource), and any other
// a tool's UI link names (an OpenAI Apps SDK template may have another
// scheme, and a host renders it all the same); s.mu held.
func (s *Session) uiURIs() []string {
	var out []string
	for uri := range s.kinds[surface.KindResource].lastItems {
		if s.isUILocked(uri) {
			out = append(out, uri)
		}
	}
	slices.Sort(out)
	return out
}

// isUILocked reports whether uri is a UI resource: its scheme is ui, or a
// tool's UI link names it; s.mu held.
func (s *Session) isUILocked(uri string) bool {
	if surface.IsUIResource(uri) {
		return true
	}
	for _, links := range s.ui.links {
		if slices.Contains(links, uri) {
			return true
		}
	}
	return false
}

// gotTargets are what the proxy gets on its own account, sorted: the UI
// resources (uiURIs), then the prompts of the last complete prompts
// listing whose live definition declares no arguments; s.mu held.
func (s *Session) gotTargets() []gotKey {
	var out []gotKey
	for _, u := range s.uiURIs() {
		out = append(out, gotKey{surface.KindUIContent, u})
	}
	var names []string
	for name := range s.kinds[surface.KindPrompt].lastItems {
		if s.ui.noArgs[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		out = append(out, gotKey{surface.KindPromptMessages, n})
	}
	return out
}

// isNoArgPrompt reports whether the prompt name's live definition, as the
// session that judges this one's requests last saw it, declares no
// arguments: its messages are pinned.
func (s *Session) isNoArgPrompt(name string) bool {
	if name == "" {
		return false
	}
	return s.askJudge(func(j *Session) bool { return j.ui.noArgs[name] })
}

// askJudge runs ask on the session that judges this one's requests, with
// its lock held.
func (s *Session) askJudge(ask func(j *Session) bool) bool {
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	return ask(judge)
}

// pinsMessages reports whether the baseline of the session's variant pins
// the messages of the prompt name: a get of it is judged even when the
// session has not seen the prompt's definition (fail closed).
func (s *Session) pinsMessages(ctx context.Context, name string) bool {
	if name == "" {
		return false
	}
	v, ok := s.view(ctx, s.currentVariant(), false)
	if !ok {
		return false
	}
	_, pinned := v.Items[ItemKey{surface.KindPromptMessages, name}]
	return pinned
}

// notePrompts records whether each prompt of a page declares no
// arguments (src: the bytes its items' spans are offsets in); s.mu held.
func (s *Session) notePrompts(items []surface.PageItem, src []byte) {
	for _, it := range items {
		if it.Start < 0 || it.End > len(src) || it.Start > it.End {
			continue
		}
		if s.ui.noArgs == nil {
			s.ui.noArgs = map[string]bool{}
		}
		s.ui.noArgs[it.Name] = surface.PromptTakesNoArguments(src[it.Start:it.End])
	}
}

// isUI is isUILocked on the session that judges this one's requests.
func (s *Session) isUI(uri string) bool {
	if uri == "" {
		return false
	}
	return s.askJudge(func(j *Session) bool { return j.isUILocked(uri) })
}

// uiReadsDue reports whether the whole surface waits for the proxy's own
// gets (reads of its UI resources, gets of its argument-less prompts)
// before it is published, and starts them (their requests are returned,
// to be sent once s.mu is released): always after the proxy's own
// resources or prompts listing, and whenever a listed target has not been
// got. s.mu held; fresh says the resources or prompts were just listed by
// the proxy.
func (s *Session) uiReadsDue(fresh bool) [][]byte {
	ui := &s.ui
	if ui.waiting > 0 {
		ui.due = true
		return nil // a round under way publishes when it is done
	}
	if s.hashOptions().Form < surface.FormV2 {
		return nil // form v1 pins no contents
	}
	keys := s.gotTargets()
	missing := false
	for _, k := range keys {
		if _, ok := ui.results[k]; !ok {
			missing = true
		}
	}
	if len(keys) == 0 || !fresh && !missing {
		return nil
	}
	ui.round++
	ui.due = true
	ui.results, ui.hashes, ui.with = map[gotKey][]byte{}, map[gotKey]surface.Digest{}, s.hashOptions()
	var reqs [][]byte
	count := map[surface.Kind]int{}
	for _, k := range keys {
		count[k.kind]++
		if bound, code, what := limitOf(k.kind); count[k.kind] > bound {
			s.Dropped(code)
			ui.results[k] = placeholder(fmt.Sprintf("%s: the server lists more than %d %s; the proxy gets at most that many", code, bound, what))
			continue
		}
		reqs = append(reqs, s.ownReadLocked(k, false))
		ui.waiting++
	}
	s.assembling = true
	return reqs
}

// limitOf returns the bound of the proxy's own gets of kind per round, the
// drop code past it, and what they are.
func limitOf(kind surface.Kind) (int, Code, string) {
	if kind == surface.KindPromptMessages {
		return MaxPromptGets, DropPromptGetLimit, "prompts that take no arguments"
	}
	return MaxUIReads, DropUIReadLimit, "UI resources"
}

// placeholder stands in a capture for a read result the proxy could not
// judge: the engine refuses it (it has no contents array), so the
// capture is no surface and the server is held (as for a listing that
// failed).
func placeholder(why string) []byte {
	return []byte(`{"mcpdrift/unreadable":` + strconv.Quote(why) + `}`)
}

// ownReadLocked registers the proxy's own get k (a resources/read of a UI
// resource's uri, a prompts/get of a prompt's name, no arguments) in the
// current round and returns the request; again says it is made a second
// time (OwnFailed). s.mu held.
func (s *Session) ownReadLocked(k gotKey, again bool) []byte {
	method, param := jsonrpc.MethodResourcesRead, `"uri":`
	if k.kind == surface.KindPromptMessages {
		method, param = jsonrpc.MethodPromptsGet, `"name":`
	}
	id := s.reqs.addOwn(pendingReq{method: method, got: k, gen: s.ui.round, again: again})
	b := []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{`)
	if meta := s.cfg.OwnMeta; meta != nil {
		b = append(strconv.AppendQuote(b, jsonrpc.MetaKey), ':')
		b = append(append(b, meta...), ',')
	}
	b = canonjson.AppendString(append(b, param...), k.name)
	return append(b, "}}"...)
}

// sendReads sends the proxy's own reads; the caller must not hold s.mu. A
// read that cannot be sent is answered by a placeholder at once. After
// the bound a read not answered is given one too (a server that never
// answers does not hold the publication for ever).
func (s *Session) sendReads(reqs [][]byte) {
	if len(reqs) == 0 {
		return
	}
	first, _ := s.reqs.ownOf(ownID(reqs[0]))
	round := first.gen // the round the reads were made for, not one started since
	for _, b := range reqs {
		if err := s.sendOwn(b); err != nil {
			s.ownReadFailed(ownID(b), "the proxy's read could not be written to the server: "+err.Error())
		}
	}
	time.AfterFunc(4*s.cfg.Timeout, func() { s.expireReads(round) })
}

// ownID reads the id back out of one of the proxy's own requests.
func ownID(req []byte) string {
	const pre = `{"jsonrpc":"2.0","id":`
	rest := req[len(pre):]
	end := bytes.IndexByte(rest[1:], '"') + 2
	return string(rest[:end])
}

// expireReads gives the reads of round still unanswered a placeholder.
func (s *Session) expireReads(round int) {
	for _, id := range s.reqs.ownGets(round) {
		s.ownReadFailed(id, "the server did not answer the proxy's read in time")
	}
}

// ownReadFailed gives the proxy's own read id, when still unanswered, a
// placeholder saying why.
func (s *Session) ownReadFailed(id, why string) {
	if p, ok := s.reqs.takeOwn(id); ok {
		s.readDone(p, nil, why)
	}
}

// OwnFailed tells the session that the transport could not carry its own
// request req to the server or the answer back (the HTTP request failed,
// the server refused it, the answer's stream broke, the answer held no
// response to it), err saying why; it does nothing once req is answered. A
// get of a UI resource or a prompt so lost is made once more, after
// ownRetryWait (an upstream's passing failure, a load balancer's 502,
// does not hold the server); lost again, it gets its placeholder at once,
// as one the server answered with an error does, rather than at the
// read's bound: what the proxy could not get it cannot judge, so the
// server is held (fail closed), whatever made the request fail. (A server
// could otherwise refuse the proxy's own gets alone and so keep every
// session from publishing its surface.) A session that ended publishes
// nothing (End): the transport says so before a failure the end brings
// (the client's DELETE, the upstream's 404) can reach this. The proxy's
// own listings keep their bound (Config.Timeout).
func (s *Session) OwnFailed(req []byte, err error) {
	m, perr := jsonrpc.Parse(req, jsonrpc.Limits{})
	if perr != nil || m.ID == nil {
		return
	}
	id := string(m.ID)
	p, _ := s.reqs.ownOf(id)
	if p.got.kind == 0 {
		return
	}
	why := "the proxy's get did not reach the server or its answer was lost: " + err.Error()
	if p.again {
		s.ownReadFailed(id, why+" (the second time)")
		return
	}
	time.AfterFunc(ownRetryWait, func() { s.getAgain(id, why) })
}

// ownRetryWait is how long a get of the proxy's own that the transport
// lost waits before it is made again (OwnFailed).
const ownRetryWait = 250 * time.Millisecond

// getAgain makes the proxy's own get id, lost on the way (why), a second
// time, in its round, unless it was answered, given up or superseded
// meanwhile.
func (s *Session) getAgain(id, why string) {
	s.mu.Lock()
	p, ok := s.reqs.takeOwn(id)
	if !ok {
		s.mu.Unlock()
		return // answered late after all, or past the read's bound
	}
	if p.gen != s.ui.round || s.ui.ended {
		s.mu.Unlock()
		s.readDone(p, nil, why) // of a round superseded, or a session that ended: nothing
		return
	}
	b := s.ownReadLocked(p.got, true)
	s.mu.Unlock()
	if err := s.sendOwn(b); err != nil {
		s.ownReadFailed(ownID(b), why+"; made again, it could not be written to the server: "+err.Error())
	}
}

// End tells the session that its client's session ended (the client's
// DELETE, before it is forwarded; the upstream's 404; eviction; the end of
// an HTTP+SSE stream): a round of the proxy's own gets under way publishes
// nothing (the server may answer them no more, and a placeholder for each
// would hold the server fleet-wide for a session that is gone).
func (s *Session) End() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ui.ended = true
	if s.ui.waiting > 0 {
		s.assembling = false
	}
}

// Continue tells the session that the end End was told of did not happen
// (the upstream refused the client's DELETE, or it did not reach it): the
// session goes on, and publishes again. A round of the proxy's own gets
// under way, whose answers the end let go, is made again, so that it
// publishes; else the server, having refused a DELETE, could keep every
// later change of the session from being published (each listing waits
// for a round that never ends).
func (s *Session) Continue() {
	s.mu.Lock()
	ui := &s.ui
	if !ui.ended {
		s.mu.Unlock()
		return
	}
	ui.ended = false
	if ui.waiting == 0 {
		s.mu.Unlock()
		return
	}
	ui.waiting, ui.due = 0, false // the answers of the round under way are let go (readDone: another round)
	if reads := s.uiReadsDue(true); len(reads) > 0 {
		s.mu.Unlock()
		s.sendReads(reads)
		return
	}
	s.publishWholeLocked() // unlocks
}

// readDone records the answer to the proxy's own read p: result, or a
// placeholder saying why when result is nil. The last answer of a round
// publishes the surface; in a session that ended, nothing is recorded or
// published (End).
func (s *Session) readDone(p pendingReq, result []byte, why string) {
	s.mu.Lock()
	ui := &s.ui
	if p.got.kind == 0 || p.gen != ui.round || ui.waiting == 0 || ui.ended {
		s.mu.Unlock()
		return // of a round superseded
	}
	if result == nil {
		ui.results[p.got] = placeholder(why)
	} else {
		h, ok, err := hashGot(ui.with, p.got, result)
		s.holdGot(p.got, result, h, ok && err == nil)
	}
	ui.waiting--
	if ui.waiting > 0 || !ui.due {
		s.mu.Unlock()
		return
	}
	ui.due = false
	if reads := s.uiReadsDue(false); len(reads) > 0 {
		// A listing since the round started lists a UI resource it did
		// not read: one more round.
		s.mu.Unlock()
		s.sendReads(reads)
		return
	}
	s.publishWholeLocked() // unlocks
}

// uiCapture adds what the proxy's gets got to a capture being written:
// the contents of the UI resources and the messages of the argument-less
// prompts the last complete listings list; s.mu held.
func (s *Session) uiCapture(c *capture, sum *summary) int {
	if s.hashOptions().Form < surface.FormV2 || len(s.ui.results) == 0 {
		return 0
	}
	size := 0
	for _, k := range s.gotTargets() {
		r, ok := s.ui.results[k]
		if !ok {
			continue
		}
		if c.got == nil {
			c.got = map[gotKey][]byte{}
		}
		c.got[k] = r
		size += len(k.name) + len(r) + 4
		h, hashed := s.ui.hashes[k]
		if !hashed || s.ui.with != sum.with {
			sum.ok = false // a placeholder, or hashed otherwise: let the parse say
			continue
		}
		sum.items = append(sum.items, surface.Item{Kind: k.kind, Name: k.name, Hash: h})
	}
	return size
}

// noteUILinks records the UI links of the tools of a page (src: the
// bytes its items' spans are offsets in); s.mu held.
func (s *Session) noteUILinks(items []surface.PageItem, src []byte) {
	for _, it := range items {
		if it.Start < 0 || it.End > len(src) || it.Start > it.End {
			continue
		}
		links := surface.UILinksOfTool(src[it.Start:it.End])
		if len(links) == 0 {
			delete(s.ui.links, it.Name)
			continue
		}
		if s.ui.links == nil {
			s.ui.links = map[string][]string{}
		}
		s.ui.links[it.Name] = links
	}
}

// unapprovedLink returns a UI link of tool (in the live definition the
// session that judges this one last saw) to a resource that v's baseline
// does not approve or the last complete resources listing does not list
// with the approved hash, or "".
func (s *Session) unapprovedLink(v View, tool string) string {
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	for _, u := range judge.ui.links[tool] {
		approved, ok := v.Items[ItemKey{surface.KindResource, u}]
		live, listed := judge.kinds[surface.KindResource].lastItems[u]
		if !ok || !listed || live != approved {
			return u
		}
	}
	return ""
}

// checkLinks refuses a tools/call decided as forwarded when the tool's UI
// links a resource not listed and approved (unapprovedLink): under the
// alert posture it is forwarded and reported (alert).
func (s *Session) checkLinks(ctx context.Context, tool string, code Code, text string, alert Code, risk string, partial bool) (Code, string, Code, string, bool) {
	if code != "" {
		return code, text, alert, risk, partial
	}
	judge := s.judge()
	judge.mu.Lock()
	links := len(judge.ui.links[tool])
	judge.mu.Unlock()
	if links == 0 {
		return code, text, alert, risk, partial
	}
	v, ok := s.view(ctx, s.currentVariant(), false)
	if !ok {
		return RefuseServerUnknown, fmt.Sprintf("mcpdrift withheld this request: there is no verdict on server %q.", s.cfg.Server), "", "", false
	}
	u := s.unapprovedLink(v, tool)
	switch {
	case u == "":
		return code, text, alert, risk, partial
	case v.Alert:
		if alert == "" {
			alert = RefuseUILinkNotApproved
		}
		return code, text, alert, risk, partial
	}
	return RefuseUILinkNotApproved, fmt.Sprintf("mcpdrift withheld this call: tool %q of server %q links the UI %q, which the server does not list as an approved resource: a host would render a UI nobody reviewed. An admin must review and approve it first.", tool, s.cfg.Server, u), "", "", false
}

// uiAnswer decides on the server's answer to an agent's get p.got (a read
// of a UI resource, a prompts/get of an argument-less prompt): passed on
// only when the result hashes to the approved item's and the server is
// served (the alert posture passes it and reports); otherwise the agent
// gets RefuseUIContentNotApproved (RefusePromptMessagesNotApproved).
// Results other than those the session published are published.
func (s *Session) uiAnswer(ctx context.Context, p pendingReq, m *jsonrpc.Message) []byte {
	if m.Result == nil {
		return m.Raw // an error shows no UI, puts no message in the context
	}
	k := p.got
	v, ok := s.view(ctx, s.currentVariant(), false)
	if ok && v.Hashing.Form < surface.FormV2 {
		return m.Raw // form v1 pins no contents
	}
	opts := defaultHashing
	if ok {
		opts = v.Hashing
	}
	code, what, act := RefuseUIContentNotApproved, "the UI", "read"
	if k.kind == surface.KindPromptMessages {
		code, what, act = RefusePromptMessagesNotApproved, "the prompt messages", "prompt"
	}
	h, hashed, err := hashGot(opts, k, m.Result)
	if err != nil || !hashed {
		s.Withheld(k.kind)
		return Reply(m.ID, code, fmt.Sprintf("mcpdrift withheld this %s: %s server %q returned for %q could not be judged (%s).", act, what, s.cfg.Server, k.name, codeOf(err)))
	}
	s.judge().keepRead(k, m.Result, h, opts)
	approved, inBaseline := v.Items[ItemKey{k.kind, k.name}]
	switch {
	case ok && v.Serve && inBaseline && approved == h:
		return m.Raw
	case ok && v.Serve && v.Alert:
		return m.Raw // served whole; the drift service hears of the result (keepRead)
	}
	s.Withheld(k.kind)
	return Reply(m.ID, code, fmt.Sprintf("mcpdrift withheld this %s: %s that server %q returned for %q is not the approved one (new or changed). An admin must review and approve it first.", act, what, s.cfg.Server, k.name))
}

// holdGot keeps result as what the get k got, with its hash h when
// hashed, unless the results kept would then add up to more than
// MaxUIReadBytes: then a placeholder stands for it, and the excess is
// counted; s.mu held.
func (s *Session) holdGot(k gotKey, result []byte, h surface.Digest, hashed bool) {
	ui := &s.ui
	total := len(result)
	for u, r := range ui.results {
		if u != k {
			total += len(r)
		}
	}
	delete(ui.hashes, k)
	if total > MaxUIReadBytes {
		_, code, _ := limitOf(k.kind)
		s.Dropped(code)
		ui.results[k] = placeholder(fmt.Sprintf("%s: the UI resources' contents and the prompts' messages add up to more than %d bytes", code, MaxUIReadBytes))
		return
	}
	ui.results[k] = bytes.Clone(result)
	if hashed {
		ui.hashes[k] = h
	}
}

// Withheld counts one item of kind withheld from the client.
func (s *Session) Withheld(kind surface.Kind) {
	if s.cfg.Meter != nil {
		s.cfg.Meter.Withheld(kind, 1)
	}
}

// keepRead records an agent's get uri whose result hashes to h (made with
// o): when it differs from the result the session published, it becomes
// the session's, and the whole surface is published again, so that the
// drift service judges it.
func (s *Session) keepRead(uri gotKey, result []byte, h surface.Digest, o surface.Options) {
	s.mu.Lock()
	ui := &s.ui
	if old, ok := ui.hashes[uri]; (ok && old == h && ui.with == o) || !slices.Contains(s.gotTargets(), uri) || !s.published[s.variant] {
		s.mu.Unlock()
		return // the same, or not a listed UI resource, or nothing published to set it in
	}
	if ui.with != o {
		// Hashed otherwise than the session's: hash them all again.
		ui.rehash(o)
		if ui.hashes[uri] == h {
			s.mu.Unlock()
			return
		}
	}
	if ui.results == nil {
		ui.results, ui.hashes = map[gotKey][]byte{}, map[gotKey]surface.Digest{}
	}
	s.holdGot(uri, result, h, true)
	if ui.waiting > 0 {
		ui.due = true
		s.mu.Unlock()
		return // the round under way publishes it
	}
	s.publishWholeLocked() // unlocks
}
