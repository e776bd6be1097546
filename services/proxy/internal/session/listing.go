package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// Listing assembly: each page of a listing (the client's and the proxy's
// own of each kind, kept apart) is judged as it passes (listPage,
// judgePage: its items hashed from the message's one parse, the page
// spliced by their spans) and added to the listing in progress (addPage);
// a complete listing becomes the kind's last (finishListing), and once
// every kind the server declares is complete the session publishes its
// whole surface (publish.go). The proxy lists on its own account at the
// session's start (ListAll) and after a list_changed (relist, flood.go).

// listPage decides on the items of one page and returns the message to
// forward: the original bytes, or the page with unapproved items removed.
// A page whose verdict is due is judged in later when mayWait, so that a
// serial transport reads on meanwhile.
func (s *Session) listPage(ctx context.Context, k surface.Kind, m *jsonrpc.Message, mayWait bool) ([]byte, decision, error) {
	if m.Result == nil {
		// An error answer lists nothing, and the client learns so; what the
		// server lists is not trusted until a listing is judged, as when
		// the transport could not read its answer (Unanswered).
		s.failListing(k, listingRef{}, errorAnswer, false)
		return m.Raw, nil, nil
	}
	pg, last, err := s.addPage(k, byClient, m)
	if last {
		s.finishListing(k, byClient) // published before waiting for a verdict on it
	}
	variant := s.currentVariant()
	if !mayWait || !s.awaits(variant) {
		// With no verdict due, the gate answers at once; in a batch the
		// page cannot wait alone.
		out, jerr := s.judgePage(ctx, k, m, variant, false, pg, last, err)
		return out, nil, jerr
	}
	// The page's bytes may belong to the transport's reader: the decision
	// keeps a copy of them, and the parse, which reads the copy.
	m.Detach()
	return nil, func(ctx context.Context) ([]byte, error) {
		out, jerr := s.judgePage(ctx, k, m, variant, true, pg, last, err)
		if d, _, ok := m.Parsed(); ok {
			// The parse goes back to the pool judgeServer took it from;
			// the message reads its bytes alone from now on (a second
			// decision would find no spans, and withhold).
			m.Forget()
			canonjson.Return(d)
		}
		return out, jerr
	}, nil
}

// addPage feeds a page to the listing in progress; last reports that the
// listing is complete. A following session then tells the session it
// follows what the page showed (followPage), its own lock released: a
// session never holds its lock while it takes another's (LOCKS.md).
func (s *Session) addPage(k surface.Kind, by owner, m *jsonrpc.Message) (page, bool, error) {
	pg, last, shown, err := s.addPageLocked(k, by, m)
	if f := s.cfg.Follow; f != nil && shown.items != nil && (shown.variant == "" || shown.variant == f.currentVariant()) {
		f.followPage(k, shown.items, shown.src)
	}
	return pg, last, err
}

// addPageLocked is addPage under s.mu; shown is what the page showed, for
// the session this one follows (its items nil when there is nothing to
// tell).
func (s *Session) addPageLocked(k surface.Kind, by owner, m *jsonrpc.Message) (_ page, last bool, shown shownPage, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &s.kinds[k].listing[by]
	if a.builder == nil {
		s.startListing(k, by) // a page without its first: judge it on its own
	}
	result := m.Result
	a.pages = append(a.pages, bytes.Clone(result))
	pg, err := hashPage(a.builder, k, m)
	if err != nil {
		// Hostile or broken: nothing of it is served, and the pipeline hears of it.
		s.kinds[k].complete = a.pages
		a.builder, a.failure = nil, err.Error()
		return page{}, true, shownPage{}, err
	}
	items, cursor := pg.items, pg.cursor
	for _, it := range items {
		s.live[ItemKey{k, it.Name}] = it.Hash
	}
	// What the items' definitions say that later decisions need (the tools'
	// UI links, which prompts take no arguments), noted here and, like the
	// live items, in the session this one follows (addPage).
	src := result
	if d, _, ok := m.Parsed(); ok && pg.spans {
		src = d.Source()
	}
	if note := noteOf(k); note != nil {
		note(s, items, src)
	}
	if s.cfg.Follow != nil {
		// What the server shows a stateless agent is its live definition
		// for every request the leader judges.
		shown = shownPage{items: items, src: src, variant: s.variant}
	}
	if k == surface.KindTool && s.cfg.ToolsPage != nil {
		names := make([]string, len(items))
		for i, it := range items {
			names[i] = it.Name
		}
		s.cfg.ToolsPage(names, result)
	}
	if cursor != "" && len(a.pages) >= s.cfg.MaxPages {
		a.failure = fmt.Sprintf("the listing went on past the limit of %d pages", s.cfg.MaxPages)
		return pg, true, shown, nil
	}
	return pg, cursor == "", shown, nil
}

// hashPage has b read the page m answers, from m's parse when it kept one.
func hashPage(b *surface.Builder, k surface.Kind, m *jsonrpc.Message) (page, error) {
	var pg page
	var err error
	if d, n, ok := m.Parsed(); ok {
		pg.cursor, err = b.AddPageIn(k, d, n)
		pg.spans = true
	} else {
		pg.cursor, err = b.AddPage(k, m.Result)
	}
	if err != nil {
		return page{}, err
	}
	pg.items = b.LastPage()
	start, end := b.LastList()
	pg.list = jsonrpc.Span{Start: start, End: end}
	return pg, nil
}

// page is what the engine read of one page: its items in the order the
// server sent them, with their hashes and the spans of the bytes each was
// hashed from, and the span of the list array (spans false when the page
// was not read from its message's parse: then nothing of it can be
// spliced, and nothing of it is served).
type page struct {
	items  []surface.PageItem
	list   jsonrpc.Span
	spans  bool
	cursor string
}

// errNoSpans: a page read without its message's parse has no spans to
// splice by; it is withheld whole (never the case for a page that came
// through Server).
var errNoSpans = errors.New("no item spans for the page")

// shownPage is what a page showed of the server's live definitions, for
// the session a following one follows (followPage): its items, the bytes
// their spans are offsets in, and the follower's variant then.
type shownPage struct {
	items   []surface.PageItem
	src     []byte
	variant string
}

// followPage records what a follower's page of k showed (items, their
// spans offsets in src): the server's live definitions, for every request
// this session judges; the notes later decisions need (noteUILinks,
// notePrompts), as the follower took them for itself.
func (s *Session) followPage(k surface.Kind, items []surface.PageItem, src []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		s.live[ItemKey{k, it.Name}] = it.Hash
	}
	if note := noteOf(k); note != nil {
		note(s, items, src)
	}
}

// noteOf is what the items of a page of k say that later decisions need,
// noted on a session (s.mu held): the tools' UI links, which prompts take
// no arguments; nil for other kinds.
func noteOf(k surface.Kind) func(*Session, []surface.PageItem, []byte) {
	switch k {
	case surface.KindTool:
		return (*Session).noteUILinks
	case surface.KindPrompt:
		return (*Session).notePrompts
	}
	return nil
}

// judgePage asks the gate about a page's items (waiting for a verdict when
// awaiting) and returns the page to forward.
func (s *Session) judgePage(ctx context.Context, k surface.Kind, m *jsonrpc.Message, variant string, awaiting bool,
	pg page, last bool, err error) ([]byte, error) {
	items := pg.items
	if err != nil {
		// Not a listing the proxy can read as a client would: none of it
		// reaches the client, not even what the filter would leave.
		if s.cfg.Meter != nil {
			s.cfg.Meter.Withheld(k, len(items))
		}
		return Reply(m.ID, RefuseListingInvalid, "mcpdrift proxy: the server's "+k.ListKey()+" listing could not be judged ("+codeOf(err)+"); it is withheld"), nil
	}
	hashedWith := s.judge().hashOptions() // what the page's items were hashed with
	v, ok := s.view(ctx, variant, awaiting)
	serve := ok && v.Serve
	if serve && v.Withhold && (v.Status != string(status.Verified) || s.judge().tools.driftedFrom(v, ok)) && !s.instructionsKept(v) {
		// Under withhold_changed, instructions other than the baseline's
		// withhold the whole server (decideWithheld).
		serve = false
	}
	if ok && len(items) > 0 && hashedWith != v.Hashing {
		// Hashed before the session knew the server's settings: hash the
		// page again as the baseline was.
		if again, perr := hashPage(surface.NewBuilder(v.Hashing), k, m); perr == nil && again.spans == pg.spans {
			items, pg.list = again.items, again.list
		} else {
			serve = false // spans of another source than the page's: nothing to splice by
		}
	}
	keep := make([]bool, len(items))
	switch {
	case err != nil || !serve || hasDuplicates(items):
		// Nothing of the page is served.
	case v.Alert:
		// The alert posture serves the server whole, drift included,
		// unless its listing cannot be assembled.
		if s.assembles(k) {
			for i := range items {
				keep[i] = true
			}
		}
	default:
		for i, it := range items {
			if h, ok := v.Items[ItemKey{k, it.Name}]; ok && h == it.Hash {
				keep[i] = true
			}
		}
	}
	var relistErr error
	if f := s.cfg.Follow; f != nil && last && k == surface.KindTool && s.sameVariantAs(f) && s.tools.driftedFrom(v, ok) {
		// A client's listing shows what the leader's last did not: the
		// leader holds the server closed against this baseline whatever
		// its own listings show (a server may show the proxy one surface
		// and the agent another), and looks again, so the pipeline hears
		// of the change.
		if ok && v.BaselineHash != "" {
			f.tools.sawDrift(v.BaselineHash)
		}
		if rerr := f.relistSoon(surface.KindTool, false); rerr != nil {
			relistErr = fmt.Errorf("re-listing the server's tools: %w", rerr)
		}
	}
	// What is kept is the bytes each kept item was hashed from, by their
	// spans in the one parse (jsonrpc.Message.Splice): a filter that found
	// items again by name could keep bytes other than those judged.
	elems := make([]jsonrpc.Span, len(items))
	for i, it := range items {
		elems[i] = jsonrpc.Span{Start: it.Start, End: it.End}
	}
	var out []byte
	var withheld int
	ferr := errNoSpans
	if pg.spans {
		out, withheld, ferr = m.Splice(pg.list, elems, func(i int) bool { return keep[i] })
	}
	if withheld > 0 && s.cfg.Meter != nil {
		s.cfg.Meter.Withheld(k, withheld)
	}
	if ferr != nil {
		// Not a list result we can read: withhold it whole.
		return Reply(m.ID, RefuseListingInvalid, "mcpdrift proxy: the server's "+k.ListKey()+" listing could not be read; it is withheld"), relistErr
	}
	return out, relistErr
}

// awaits reports whether a verdict on variant is due for the session that
// judges this one: it published that variant's whole surface, or it is
// assembling it.
func (s *Session) awaits(variant string) bool {
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	return judge.published[variant] || judge.assembling
}

// assembles reports that the client's listing of k in progress can still
// be assembled and, for tools, that the last tools listing of the session
// that judges this one's calls could be (else its calls are refused with
// listing_invalid, and the alert posture serves none of its items).
func (s *Session) assembles(k surface.Kind) bool {
	s.mu.Lock()
	ok := s.kinds[k].listing[byClient].failure == ""
	s.mu.Unlock()
	if !ok || k != surface.KindTool {
		return ok
	}
	_, listErr := s.judge().tools.state()
	return listErr == ""
}

// hasDuplicates reports a page naming an item twice: which of the two a
// client would use is anyone's guess, so neither is served.
func hasDuplicates(items []surface.PageItem) bool {
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		if seen[it.Name] {
			return true
		}
		seen[it.Name] = true
	}
	return false
}

// codeOf is the stable code of a listing error (surface's, or canonjson's).
func codeOf(err error) string {
	var se *surface.Error
	if errors.As(err, &se) {
		return string(se.Code)
	}
	return "invalid"
}

// sameVariantAs reports whether this following session's requests are in
// the listing variant of the session f that judges them (a request that
// names no variant is taken to be).
func (s *Session) sameVariantAs(f *Session) bool {
	s.mu.Lock()
	v := s.variant
	s.mu.Unlock()
	return v == "" || v == f.currentVariant()
}

// finishListing publishes the complete listing; whether its tools drifted
// from the baseline is judged at the next decision (toolsMemory.driftedFrom), so that
// publishing never waits for a verdict, which on first sight waits for
// this very listing.
func (s *Session) finishListing(k surface.Kind, by owner) {
	s.mu.Lock()
	a := &s.kinds[k].listing[by]
	failure := a.failure
	if a.headless && failure == "" {
		// Not the server's listing but its last pages: publishing them
		// as its surface would read as the first pages' items removed,
		// and calls of those would be refused as drifted.
		a.builder, a.headless = nil, false
		s.mu.Unlock()
		return
	}
	var sf *surface.Surface
	if b := a.builder; b != nil {
		s.kinds[k].complete = a.pages
		s.kinds[k].itemsWith = b.Options()
		var err error
		if sf, err = b.Surface(); err != nil && failure == "" {
			failure = err.Error()
		}
	} else if failure == "" {
		failure = "no listing in progress"
	}
	var items map[string]surface.Digest
	if failure == "" {
		items = map[string]surface.Digest{}
		for _, it := range sf.Of(k) {
			items[it.Name] = it.Hash
		}
	}
	s.kinds[k].lastItems = items
	if k == surface.KindTool {
		if failure == "" {
			// Tools alone against the baseline's tools: the surface hash also
			// covers other kinds, so compare item sets.
			tools := map[string]surface.Digest{}
			for _, it := range sf.Of(surface.KindTool) {
				tools[it.Name] = it.Hash
			}
			s.tools.listed(tools)
		} else {
			s.tools.failed(failure)
		}
	}
	a.builder = nil
	if k == surface.KindTool {
		s.toolsListedOnce.Do(func() { close(s.toolsListed) })
	}
	if f := s.cfg.Follow; f != nil {
		pages, variant, with := a.pages, s.variant, s.kinds[k].itemsWith
		s.mu.Unlock()
		if k == surface.KindTool && s.sameVariantAs(f) {
			// What this agent was listed is the server's live listing in
			// the leader's variant too.
			f.adoptTools(items, failure)
		}
		f.reportFollowed(k, items, with, pages, variant)
		return
	}
	if by == byProxy {
		defer s.endRelist(k)
	}
	for _, d := range s.declared {
		if s.kinds[d].complete == nil {
			// Not the whole surface yet: publishing part of it would read
			// as drift. The listing of the missing kind publishes it all.
			s.mu.Unlock()
			return
		}
	}
	if reads := s.uiReadsDue(by == byProxy && (k == surface.KindResource || k == surface.KindPrompt)); len(reads) > 0 || s.ui.waiting > 0 {
		// The UI resources' contents and the argument-less prompts'
		// messages are part of the surface: the last of the proxy's gets
		// publishes it (apps.go).
		s.mu.Unlock()
		s.sendReads(reads)
		return
	}
	s.publishWholeLocked() // unlocks
}

// reportFollowed publishes what a following session (a stateless client's
// request) was listed when it differs from this session's last listing of
// k: the agent was shown it (filtered), so the fleet hears of it. The
// capture is this session's surface with the follower's pages of k in
// place of its own, in the variant the follower's request named (this
// session's when it named none); a listing that failed (items nil) always
// differs.
func (s *Session) reportFollowed(k surface.Kind, items map[string]surface.Digest, with surface.Options, pages [][]byte, variant string) {
	s.mu.Lock()
	if variant == "" {
		variant = s.variant
	}
	mine := s.kinds[k].lastItems
	same := items != nil && mine != nil && len(items) == len(mine)
	for name, h := range items {
		if !same {
			break
		}
		same = mine[name] == h
	}
	if same || !s.published[s.variant] || len(pages) == 0 {
		s.mu.Unlock()
		return // nothing new, or nothing of this session's to set it in yet
	}
	ks := &s.kinds[k]
	saved, savedItems, savedWith := ks.complete, ks.lastItems, ks.itemsWith
	ks.complete, ks.lastItems, ks.itemsWith = pages, items, with
	c, sum := s.captureLocked()
	ks.complete, ks.lastItems, ks.itemsWith = saved, savedItems, savedWith
	s.mu.Unlock()
	s.publish(variant, c, sum)
}

// listings is what a session holds of the server's listings: each kind's
// listings in progress and last complete one, the live definition of
// every item a page showed, the kinds the server declares, and what the
// session published. The session's lock guards it.
type listings struct {
	kinds      [surface.KindResourceTemplate + 1]kindState // by the kind of listing
	live       map[ItemKey]surface.Digest                  // each item's hash as the last page showing it had it
	declared   []surface.Kind                              // the listings the server's capabilities announce
	published  map[string]bool                             // variants whose whole surface this session published
	assembling bool                                        // ListAll ran and the whole surface is not published yet
}

// owner says whose listing of a kind a page belongs to.
type owner uint8

// The two listings of a kind a session assembles, apart, so that the two
// never mix their pages when they overlap.
const (
	byClient owner = iota // the client's own listing
	byProxy               // the proxy's listing on its own account
)

// assembly is one listing in progress: of one kind, by one owner.
type assembly struct {
	builder *surface.Builder // nil when none is in progress
	pages   [][]byte         // the raw result bytes of its pages
	failure string           // why it cannot be assembled ("" while it can)
	// headless: the client's pages from a cursor, without the listing's
	// first: each judged, together no listing of the server's.
	headless bool
}

// kindState is what a session holds of one kind of listing.
type kindState struct {
	listing   [byProxy + 1]assembly     // in progress, by owner
	cursors   map[string]bool           // cursors the proxy's own listing followed
	gen       int                       // the proxy's own listing under way: answers of an older one are dropped
	complete  [][]byte                  // the last complete listing's pages
	lastItems map[string]surface.Digest // the items of the last complete listing
	itemsWith surface.Options           // what lastItems were hashed with
}

// startListing starts k's listing by by afresh; s.mu held.
func (s *Session) startListing(k surface.Kind, by owner) {
	s.kinds[k].listing[by] = assembly{builder: surface.NewBuilder(s.judge().hashOptions())}
	if by == byProxy {
		s.kinds[k].cursors = nil
		s.kinds[k].gen++
	}
}

// itemsOf hashes the items of a listing's raw pages with o.
func itemsOf(o surface.Options, k surface.Kind, pages [][]byte) (map[string]surface.Digest, error) {
	b := surface.NewBuilder(o)
	for _, p := range pages {
		if _, err := b.AddPage(k, p); err != nil {
			return nil, err
		}
	}
	sf, err := b.Surface()
	if err != nil {
		return nil, err
	}
	out := map[string]surface.Digest{}
	for _, it := range sf.Of(k) {
		out[it.Name] = it.Hash
	}
	return out, nil
}

// WillList says that the session is about to list the server's whole
// surface (ListAll, or the first listing of a stateless server): until it
// has published it, decisions in its variant await the verdict on it.
func (s *Session) WillList() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.assembling = true
}

// ListAll lists every kind the server declared, on the proxy's own account,
// so that what it publishes is always the whole surface, whatever this
// client happens to list. It is due once the session is open.
func (s *Session) ListAll() error {
	s.mu.Lock()
	kinds := slices.Clone(s.declared)
	s.assembling = len(kinds) > 0
	s.mu.Unlock()
	for _, k := range kinds {
		// Whatever is in flight: ListAll comes at the session's start,
		// with new credentials, and on the monitor's rounds, never from
		// the server's word, and a listing in flight may be one the
		// transport could not deliver (a refused request).
		s.relists.start(k)
		if err := s.relist(k, ""); err != nil {
			return err
		}
	}
	return nil
}

// relist asks the server for a listing on the proxy's own account, so that
// a change is checked before any agent acts on it. Its ids carry a prefix
// no client can guess, so that no client request is taken for it.
func (s *Session) relist(k surface.Kind, cursor string) error {
	s.mu.Lock()
	method := ""
	for m, kk := range listKinds {
		if kk == k {
			method = m
		}
	}
	if cursor == "" {
		s.startListing(k, byProxy)
	}
	gen := s.kinds[k].gen
	id := s.reqs.addOwn(pendingReq{method: method, kind: k, gen: gen})
	meta := s.cfg.OwnMeta
	s.mu.Unlock()
	b := []byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{`)
	if meta != nil {
		b = append(strconv.AppendQuote(b, jsonrpc.MetaKey), ':')
		b = append(b, meta...)
	}
	if cursor != "" {
		if meta != nil {
			b = append(b, ',')
		}
		b = canonjson.AppendString(append(b, `"cursor":`...), cursor)
	}
	err := s.send(append(b, "}}"...))
	if err != nil {
		// Never sent: the listing is not trusted until the proxy has
		// listed it again (flood.go).
		s.reqs.takeOwn(id)
		why := "the proxy's re-listing could not be written to the server: " + err.Error()
		if errors.Is(err, ErrServerBacklog) {
			s.Dropped(DropServerBacklog)
			why, err = "the proxy's re-listing could not be queued for the server ("+string(DropServerBacklog)+")", nil
		}
		s.relistDropped(k, gen, why)
	}
	return err
}

// waitRelisted waits, at most Config.Timeout, for a re-listing of kind
// under way (kind 0: of any kind), and reports whether none is left (false
// too while a re-listing of it was dropped: relistDropped).
func (s *Session) waitRelisted(ctx context.Context, kind surface.Kind) bool {
	chans, distrusted := s.relists.waits(kind)
	if distrusted {
		return false // its re-listing never reached the server
	}
	if len(chans) == 0 {
		return true
	}
	t := time.NewTimer(s.cfg.Timeout)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// endRelist ends the proxy's own listing of k: the one owed is sent
// (relistSoon), or else the wait for a re-listing of k ends.
func (s *Session) endRelist(k surface.Kind) {
	if s.relists.end(k) {
		_ = s.relist(k, "") // a write that failed is returned by the next send, on the reader
	}
}

// failListing records that a listing could not be judged: it fails, and
// the tools of a failed tools listing are not trusted until one is judged
// (listing_invalid). With publish (the server sent what the proxy could not
// read) the listing is published as failing, so that the pipeline holds
// the server fleet-wide; a placeholder page without its list array stands
// for the unreadable bytes, which never enter a capture. Without it (the
// transport refused an answer, or the server answered with an HTTP error)
// the failure is this session's alone.
func (s *Session) failListing(k surface.Kind, ref listingRef, why string, publish bool) {
	s.mu.Lock()
	if ref.by == byProxy && ref.gen != s.kinds[k].gen {
		s.mu.Unlock()
		return // a newer listing of this kind started
	}
	a := &s.kinds[k].listing[ref.by]
	if !publish {
		a.failure, a.builder = why, nil
		follow := s.cfg.Follow
		if k == surface.KindTool && follow == nil {
			s.tools.failed(why)
		}
		s.mu.Unlock()
		if ref.by == byProxy {
			s.endRelist(k)
		}
		if follow != nil && k == surface.KindTool {
			follow.adoptTools(nil, why)
		}
		return
	}
	if a.builder == nil {
		s.startListing(k, ref.by)
	}
	a.pages = append(a.pages, []byte(`{"mcpdrift/unreadable":`+strconv.Quote(why)+`}`))
	s.kinds[k].complete = a.pages
	a.failure, a.builder = why, nil
	s.mu.Unlock()
	s.finishListing(k, ref.by)
}

// listingRef says which listing a page request belongs to: the client's,
// or the proxy's own of generation gen.
type listingRef struct {
	by  owner
	gen int
}

func refOf(p pendingReq) listingRef {
	if p.own {
		return listingRef{by: byProxy, gen: p.gen}
	}
	return listingRef{by: byClient}
}

// errorAnswer is why a listing answered with a JSON-RPC error failed.
const errorAnswer = "the server answered the listing with an error"

// poison makes the session that judges this one distrust the server's
// tools until it has judged a complete tools listing again, and asks for
// one: the server sent something the proxy could not tie to a request,
// which may have been a listing.
func (s *Session) poison(why string) {
	j := s.judge()
	j.tools.failed(why)
	j.mu.Lock()
	// One re-listing at a time: a server that answers it with what the
	// proxy cannot read again does not start another.
	relist := j.init.result() != nil && slices.Contains(j.declared, surface.KindTool) && !j.relists.inFlight(surface.KindTool)
	j.mu.Unlock()
	if relist {
		_ = j.relistSoon(surface.KindTool, true)
	}
}

// Oversized reports a message from the server that the transport dropped
// for its size, of which head is the start: unread, it may have been a
// listing, so it is handled like a message that could not be read and tied
// to a request (poison). A pending request whose id head names, read
// leniently (looseIDs), is answered with an error (DropFraming), returned
// to deliver in the message's place (nil when none is), so that the client
// does not wait for an answer that will not come.
func (s *Session) Oversized(head []byte) []byte {
	s.Dropped(DropFraming)
	why := "the server sent a message over the size limit"
	var answers [][]byte
	for _, id := range looseIDs(head) {
		if b, _ := s.unreadableAnswer(id, DropFraming, why); b != nil {
			answers = append(answers, b)
		}
	}
	s.poison(why)
	switch len(answers) {
	case 0:
		return nil
	case 1:
		return answers[0]
	}
	return joinBatch(answers)
}

// adoptTools makes a tools listing that a following session judged this
// session's last (items nil: it failed, why says how): the server showed it
// to an agent in this session's variant, so calls are decided on it.
func (s *Session) adoptTools(items map[string]surface.Digest, why string) {
	if items == nil {
		s.tools.failed(why)
		return
	}
	s.tools.listed(items)
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, h := range items {
		s.live[ItemKey{surface.KindTool, name}] = h
	}
}

// ToolListed reports whether the session that judges this one's calls
// has seen tool listed (by any listing of its variant: its own, its
// client's, a follower's). A transport that keeps something of the tools'
// definitions (Config.ToolsPage) asks this first, then reads what it kept:
// the pages that made the judge list the tool itself were handed to
// ToolsPage under the same lock, before this could be true.
func (s *Session) ToolListed(tool string) bool {
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	_, ok := judge.live[ItemKey{surface.KindTool, tool}]
	return ok
}

// WaitToolsListed waits until the session that judges this one's calls has
// seen a complete tools listing, or ctx ends, and reports whether it has.
func (s *Session) WaitToolsListed(ctx context.Context) bool {
	judge := s.judge()
	select {
	case <-judge.toolsListed:
		return true
	case <-ctx.Done():
		return false
	}
}
