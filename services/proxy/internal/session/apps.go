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
// items of the surface (surface.KindUIContent, form v2).
//
//   - When the session has the whole surface to publish and it lists ui://
//     resources, it reads each of them on its own account first (at most
//     MaxUIReads, of at most MaxUIReadBytes in all; past that a read's
//     place in the capture holds a placeholder the engine refuses, so the
//     surface fails closed: DropUIReadLimit) and publishes the contents
//     with the listings (the capture's uiContents). A re-listing of the
//     resources by the proxy reads them all again; any other listing
//     publishes the contents last read.
//   - An agent's read of a ui:// resource is passed on only when the
//     contents the server returned hash to the approved item's, and the
//     server is served (RefuseUIContentNotApproved otherwise; the alert
//     posture forwards and reports them). Contents that differ from the
//     ones the session published are kept and the surface is published
//     again, so that the drift service sees the change.
//   - A tools/call of a tool whose UI link names a resource the baseline
//     does not approve, or the server's last listing does not list as
//     approved, is refused (RefuseUILinkNotApproved).

// The bounds of the proxy's own reads of UI resources, per publication.
const (
	MaxUIReads     = 32
	MaxUIReadBytes = 16 << 20
)

// uiState is what a session holds of the UI resources; s.mu guards it.
type uiState struct {
	round   int  // the proxy's own reads under way belong to this round
	waiting int  // own reads of the round not answered yet
	due     bool // the whole surface is to be published once the round is done
	// results are the read results the capture carries, by uri: of the
	// last round, or an agent's read since that returned other contents.
	results map[string][]byte
	hashes  map[string]surface.Digest // their item hashes, made with with (absent: a placeholder)
	with    surface.Options
	links   map[string][]string // the UI links of each tool's live definition
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

// isUI is isUILocked on the session that judges this one's requests.
func (s *Session) isUI(uri string) bool {
	if uri == "" {
		return false
	}
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	return judge.isUILocked(uri)
}

// uiReadsDue reports whether the whole surface waits for the proxy's own
// reads of its UI resources before it is published, and starts them
// (their requests are returned, to be sent once s.mu is released): always
// after the proxy's own resources listing, and whenever a listed UI
// resource has not been read. s.mu held; fresh says the resources were
// just listed by the proxy.
func (s *Session) uiReadsDue(fresh bool) [][]byte {
	ui := &s.ui
	if ui.waiting > 0 {
		ui.due = true
		return nil // a round under way publishes when it is done
	}
	if s.hashOptions().Form < surface.FormV2 {
		return nil // form v1 pins no contents
	}
	uris := s.uiURIs()
	missing := false
	for _, u := range uris {
		if _, ok := ui.results[u]; !ok {
			missing = true
		}
	}
	if len(uris) == 0 || !fresh && !missing {
		return nil
	}
	ui.round++
	ui.due = true
	ui.results, ui.hashes, ui.with = map[string][]byte{}, map[string]surface.Digest{}, s.hashOptions()
	var reqs [][]byte
	for i, u := range uris {
		if i >= MaxUIReads {
			s.Dropped(DropUIReadLimit)
			ui.results[u] = placeholder(fmt.Sprintf("%s: the server lists more than %d UI resources; the proxy reads at most that many", DropUIReadLimit, MaxUIReads))
			continue
		}
		reqs = append(reqs, s.ownReadLocked(u))
		ui.waiting++
	}
	s.assembling = true
	return reqs
}

// placeholder stands in a capture for a read result the proxy could not
// judge: the engine refuses it (it has no contents array), so the
// capture is no surface and the server is held (as for a listing that
// failed).
func placeholder(why string) []byte {
	return []byte(`{"mcpdrift/unreadable":` + strconv.Quote(why) + `}`)
}

// ownReadLocked registers the proxy's own resources/read of uri in the
// current round and returns the request; s.mu held.
func (s *Session) ownReadLocked(uri string) []byte {
	id := s.ownIDLocked()
	s.own[id] = pendingReq{method: jsonrpc.MethodResourcesRead, own: true, read: uri, gen: s.ui.round}
	b := []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + jsonrpc.MethodResourcesRead + `","params":{`)
	if meta := s.cfg.OwnMeta; meta != nil {
		b = append(strconv.AppendQuote(b, jsonrpc.MetaKey), ':')
		b = append(append(b, meta...), ',')
	}
	b = canonjson.AppendString(append(b, `"uri":`...), uri)
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
	s.mu.Lock()
	round := s.own[ownID(reqs[0])].gen // the round the reads were made for, not one started since
	s.mu.Unlock()
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
	s.mu.Lock()
	var ids []string
	for id, p := range s.own {
		if p.read != "" && p.gen == round {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.ownReadFailed(id, "the server did not answer the proxy's read in time")
	}
}

// ownReadFailed gives the proxy's own read id, when still unanswered, a
// placeholder saying why.
func (s *Session) ownReadFailed(id, why string) {
	s.mu.Lock()
	p, ok := s.own[id]
	delete(s.own, id)
	s.mu.Unlock()
	if ok {
		s.readDone(p, nil, why)
	}
}

// readDone records the answer to the proxy's own read p: result, or a
// placeholder saying why when result is nil. The last answer of a round
// publishes the surface.
func (s *Session) readDone(p pendingReq, result []byte, why string) {
	s.mu.Lock()
	ui := &s.ui
	if p.read == "" || p.gen != ui.round || ui.waiting == 0 {
		s.mu.Unlock()
		return // of a round superseded
	}
	total := 0
	for _, r := range ui.results {
		total += len(r)
	}
	switch {
	case result == nil:
		ui.results[p.read] = placeholder(why)
	case total+len(result) > MaxUIReadBytes:
		s.Dropped(DropUIReadLimit)
		ui.results[p.read] = placeholder(fmt.Sprintf("%s: the UI resources' contents add up to more than %d bytes", DropUIReadLimit, MaxUIReadBytes))
	default:
		ui.results[p.read] = bytes.Clone(result)
		if h, ok, err := surface.HashReadResult(ui.with, p.read, result); err == nil && ok {
			ui.hashes[p.read] = h
		}
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

// publishWholeLocked publishes the session's whole surface when every
// declared listing is complete; it releases s.mu.
func (s *Session) publishWholeLocked() {
	for _, d := range s.declared {
		if s.kinds[d].complete == nil {
			s.mu.Unlock()
			return
		}
	}
	c, sum := s.captureLocked()
	variant := s.variant
	if s.published == nil {
		s.published = map[string]bool{}
	}
	s.published[variant] = true
	s.assembling = false
	s.mu.Unlock()
	s.publish(variant, c, sum)
}

// uiCapture adds the UI contents to a capture being written: those of the
// resources the last complete listing lists; s.mu held.
func (s *Session) uiCapture(c *capture, sum *summary) int {
	if s.hashOptions().Form < surface.FormV2 || len(s.ui.results) == 0 {
		return 0
	}
	size := 0
	for _, u := range s.uiURIs() {
		r, ok := s.ui.results[u]
		if !ok {
			continue
		}
		if c.ui == nil {
			c.ui = map[string][]byte{}
		}
		c.ui[u] = r
		size += len(u) + len(r) + 4
		h, hashed := s.ui.hashes[u]
		if !hashed || s.ui.with != sum.with {
			sum.ok = false // a placeholder, or hashed otherwise: let the parse say
			continue
		}
		sum.items = append(sum.items, surface.Item{Kind: surface.KindUIContent, Name: u, Hash: h})
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

// uiAnswer decides on the server's answer to an agent's read of the UI
// resource p.read: passed on only when its contents hash to the approved
// item's and the server is served (the alert posture passes them and
// reports); otherwise the agent gets RefuseUIContentNotApproved. Contents
// other than those the session published are published.
func (s *Session) uiAnswer(ctx context.Context, p pendingReq, m *jsonrpc.Message) []byte {
	if m.Result == nil {
		return m.Raw // an error shows no UI
	}
	uri := p.read
	v, ok := s.view(ctx, s.currentVariant(), false)
	if ok && v.Hashing.Form < surface.FormV2 {
		return m.Raw // form v1 pins no contents
	}
	opts := defaultHashing
	if ok {
		opts = v.Hashing
	}
	h, hashed, err := surface.HashReadResult(opts, uri, m.Result)
	if err != nil || !hashed {
		s.Withheld(surface.KindUIContent)
		return Reply(m.ID, RefuseUIContentNotApproved, fmt.Sprintf("mcpdrift withheld this read: the contents server %q returned for %q could not be judged (%s).", s.cfg.Server, uri, codeOf(err)))
	}
	s.judge().keepRead(uri, m.Result, h, opts)
	approved, inBaseline := v.Items[ItemKey{surface.KindUIContent, uri}]
	switch {
	case ok && v.Serve && inBaseline && approved == h:
		return m.Raw
	case ok && v.Serve && v.Alert:
		return m.Raw // served whole; the drift service hears of the contents (keepRead)
	}
	s.Withheld(surface.KindUIContent)
	return Reply(m.ID, RefuseUIContentNotApproved, fmt.Sprintf("mcpdrift withheld this read: the UI that server %q returned for %q is not the approved one (new or changed). An admin must review and approve it first.", s.cfg.Server, uri))
}

// Withheld counts one item of kind withheld from the client.
func (s *Session) Withheld(kind surface.Kind) {
	if s.cfg.Meter != nil {
		s.cfg.Meter.Withheld(kind, 1)
	}
}

// keepRead records an agent's read of uri whose contents hash to h (made
// with o): when they differ from the contents the session published, they
// become the session's, and the whole surface is published again, so that
// the drift service judges them.
func (s *Session) keepRead(uri string, result []byte, h surface.Digest, o surface.Options) {
	s.mu.Lock()
	ui := &s.ui
	if old, ok := ui.hashes[uri]; (ok && old == h && ui.with == o) || !slices.Contains(s.uiURIs(), uri) || !s.published[s.variant] {
		s.mu.Unlock()
		return // the same, or not a listed UI resource, or nothing published to set it in
	}
	if ui.with != o {
		// Hashed otherwise than the session's: hash them all again.
		ui.with = o
		for u, r := range ui.results {
			if hh, ok, err := surface.HashReadResult(o, u, r); err == nil && ok {
				ui.hashes[u] = hh
			} else {
				delete(ui.hashes, u)
			}
		}
		if ui.hashes[uri] == h {
			s.mu.Unlock()
			return
		}
	}
	if ui.results == nil {
		ui.results, ui.hashes = map[string][]byte{}, map[string]surface.Digest{}
	}
	total := len(result)
	for u, r := range ui.results {
		if u != uri {
			total += len(r)
		}
	}
	if total > MaxUIReadBytes {
		s.Dropped(DropUIReadLimit)
		ui.results[uri] = placeholder(fmt.Sprintf("%s: the UI resources' contents add up to more than %d bytes", DropUIReadLimit, MaxUIReadBytes))
		delete(ui.hashes, uri)
	} else {
		ui.results[uri], ui.hashes[uri] = bytes.Clone(result), h
	}
	if ui.waiting > 0 {
		ui.due = true
		s.mu.Unlock()
		return // the round under way publishes it
	}
	s.publishWholeLocked() // unlocks
}
