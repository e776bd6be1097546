// Package session is the MCP proxy's view of one client connection to one
// upstream server, independent of the transport: it sees every message in
// both directions as raw bytes, forwards them unchanged unless it must
// withhold something, assembles every listing the server sends, and decides
// item by item against the approved baseline (docs/adr/0003).
package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// ItemKey names an advertised item.
type ItemKey struct {
	Kind surface.Kind
	Name string
}

// View is what the proxy knows of a server's approved surface.
type View struct {
	Status string // verified, changed, pending, quarantined, unknown
	Serve  bool
	// Alert says that the record's drift policy is alert (on_drift:
	// alert): a served server is then served whole, its drift and the
	// items outside its baseline included, and every call forwarded only
	// because of it is reported (Call.AlertCode). It serves nothing that
	// Serve does not.
	Alert bool
	// Withhold says that the record's drift policy is withhold_changed:
	// while the server differs from its baseline (the record is changed,
	// or this session's listing differs), only the items whose hash equals
	// the baseline's are served, and requests that name no item are
	// withheld (decide). It serves nothing that Serve does not.
	Withhold     bool
	BaselineHash string
	// LiveHash is the surface hash the pipeline last fingerprinted for the
	// variant (the record's live manifest), "" when the record names none
	// that a re-listing may be reported against in the compact form (an
	// unfingerprintable one, or the record still needs a whole manifest:
	// status.Record.Confirms). A listing with this hash is one the
	// pipeline has hashed itself from a whole manifest: the session
	// reports it compact (publish).
	LiveHash string
	Items    map[ItemKey]surface.Digest // the baseline's items
	// Hashing is how the baseline's items were hashed: the server's drift
	// settings as its record says (hash algorithm, annotations). The
	// session hashes live items the same way (zero: SHA-256 with
	// annotations, the default).
	Hashing surface.Options
	// RiskMode is the server's risk enforcement mode (policy.Mode: allow,
	// quarantine, block; "" when never rated), from its server record.
	RiskMode string
}

// Gate answers for the server's approved surface per listing variant. When
// nothing is known of the variant yet, View may wait, at most wait (the
// session's first-sight bound), but only while something can arrive
// soon: the gate's own load of what exists and, when awaiting is set, the
// verdict on a surface this session has published or is assembling. ok
// false means nothing is known, and the proxy fails closed.
type Gate interface {
	View(ctx context.Context, variant string, awaiting bool, wait time.Duration) (View, bool)
}

// Observer receives what the proxy saw. It must not block: publishing is
// asynchronous.
type Observer interface {
	// Listing is a whole surface in the capture format, listed in
	// l.Variant by the session of l.Agent (Config.Agent; "" for the
	// proxy's own listings of stateless upstreams and when agents are not
	// authenticated).
	Listing(l Listed, capture []byte)
	// Seen is a complete listing whose surface the pipeline already
	// confirmed for the variant, or that this session already published
	// whole (see publish): the compact form, no manifest. Every listing
	// the session observes is reported once, by Listing or by Seen.
	Seen(l Listed)
	Call(c Call)
}

// Listed says which listing a session reports (Observer).
type Listed struct {
	Variant string
	Agent   string // Config.Agent
	Session string // the session's id (Session.ID)
	// Hash is the surface hash, made with the hashing of the variant's
	// status record as the gate knows it (View.Hashing; the default
	// hashing when it knows none); "" for a capture that is not a
	// surface (a listing that failed).
	Hash string
}

// Meter counts what a session withholds, for the proxy's metrics. It must
// not block.
type Meter interface {
	// Withheld counts n items of kind taken out of what the client got (a
	// listing's items, or an initialize result's instructions).
	Withheld(kind surface.Kind, n int)
	// Dropped counts one message from upstream that the proxy did not
	// deliver because it could not judge it, by one of DropCodes.
	Dropped(code Code)
}

// Call is one tools/call as the proxy handled it.
type Call struct {
	Tool        string
	Refused     bool
	RefusalCode Code
	Error       bool // forwarded, and the server answered with an error
	Latency     time.Duration
	ArgsDigest  string
	// AlertCode is the code the call would have been refused with under
	// the block posture (server_changed, tool_not_approved), set only on a
	// call forwarded because the server's drift policy is alert.
	AlertCode Code
	// Arguments are the call's arguments as the client wrote them, only
	// when Config.FullArguments is set (nil otherwise, and when the call
	// has none).
	Arguments []byte
	// Policy is what the per-call policy decided on the call (empty
	// without a policy, or when the call was refused before it).
	Policy Decided
	// Agent is the session's authenticated agent (Config.Agent).
	Agent string
}

// Config identifies the server behind the session.
type Config struct {
	Server   string        // the server id, for messages to people
	MaxPages int           // pages of one listing the proxy follows itself
	Timeout  time.Duration // how long a decision may wait for the gate
	// Follow, when set, is the session whose listings this one is judged
	// by: a request of a client without a session of its own (stateless
	// HTTP) is decided against the listing the proxy made itself, in that
	// session's variant, and what this one sees is not published.
	Follow *Session
	// OwnMeta, when set, is the _meta object of the proxy's own requests
	// (a 2026-07-28 request names its protocol version there).
	OwnMeta []byte
	// ToolsPage, when set, sees every page of tools this session judges
	// (its own listings and its client's): the names of the tools on it
	// and the result's bytes, for a transport that keeps what it needs of
	// their definitions (streamhttp: the x-mcp-header bindings a
	// 2026-07-28 client mirrors into Mcp-Param-* headers). It is called
	// with the session's lock held, in the order the pages are judged: it
	// must not block, keep page, or call the session. A session following
	// another (Follow) leaves it unset: calls are judged by the leader's.
	ToolsPage func(names []string, page []byte)
	// FullArguments makes every Call carry the call's arguments, not only
	// their digest (they can hold secrets: off by default).
	FullArguments bool
	// Meter, when set, counts what the session withholds.
	Meter Meter
	// Policy, when set, is evaluated for every tools/call the server's
	// status lets through; Approvals holds the calls it puts under
	// pending_approval (nil: they are refused, policy_approval_unavailable).
	Policy    Policy
	Approvals Approvals
	// Agent is the authenticated agent whose session this is: an edge
	// token's name or a client certificate's identity on HTTP, the parent
	// process on stdio (docs/agent-auth.md); "" when the proxy does not
	// authenticate agents. Every Call and Listing the session reports
	// carries it.
	Agent string
}

// Session is one client connection. Its methods are safe for concurrent use
// by the two directions' readers.
type Session struct {
	cfg      Config
	id       string // ID
	gate     Gate
	obs      Observer
	toServer func([]byte) error // sendOwn
	send     func([]byte) error // the transport's (New)

	mu       lockorder.Mutex[lockorder.SessionMu]
	variant  string
	reqs     requests                                    // the requests in flight whose answers the session judges (requests.go)
	kinds    [surface.KindResourceTemplate + 1]kindState // by the kind of listing
	init     initPin                                     // the initialize result, pinned (initpin.go)
	live     map[ItemKey]surface.Digest
	declared []surface.Kind // the listings the server's capabilities announce
	tools    toolsMemory    // the server's tools against its baselines (tools.go)

	toolsListed     chan struct{} // closed once a tools listing was complete
	toolsListedOnce sync.Once
	published       map[string]bool // variants whose whole surface this session published
	assembling      bool            // ListAll ran and the whole surface is not published yet

	// hashing is what the session hashes items with: the last View's
	// Hashing (adoptHashing); followers use their leader's.
	hashing atomic.Pointer[surface.Options]

	ui uiState // MCP Apps: the UI resources' contents, the tools' UI links (apps.go)

	pubMu   lockorder.Mutex[lockorder.SessionPubMu]
	lastPub map[string]publication // by variant: what this session published last (publish)
}

var listKinds = map[string]surface.Kind{
	jsonrpc.MethodToolsList:             surface.KindTool,
	jsonrpc.MethodPromptsList:           surface.KindPrompt,
	jsonrpc.MethodResourcesList:         surface.KindResource,
	jsonrpc.MethodResourceTemplatesList: surface.KindResourceTemplate,
}

// listChanged maps each list_changed notification to the listings to redo.
var listChanged = map[string][]surface.Kind{
	jsonrpc.MethodToolsListChanged:     {surface.KindTool},
	jsonrpc.MethodPromptsListChanged:   {surface.KindPrompt},
	jsonrpc.MethodResourcesListChanged: {surface.KindResource, surface.KindResourceTemplate},
}

// New returns a session; toServer writes one message of the proxy's own to
// the server (a listing, an error in the client's stead). The session
// calls it on the goroutine that reads the server too (Server), so it must
// not block on the server: a transport queues, and returns
// ErrServerBacklog for what its queue cannot take (flood.go). What reaches
// the client is what the transport delivers of Client and Server.
func New(cfg Config, gate Gate, obs Observer, toServer func([]byte) error) *Session {
	if cfg.MaxPages <= 0 {
		cfg.MaxPages = 1000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	s := &Session{cfg: cfg, id: hex.EncodeToString(nonce[:]), gate: gate, obs: obs, send: toServer,
		live:        map[ItemKey]surface.Digest{},
		toolsListed: make(chan struct{})}
	s.toServer = s.sendOwn
	return s
}

// ID is the session's id for the audit trail (Listed.Session): random,
// made by the proxy, and never the upstream's Mcp-Session-Id, which can
// be a credential.
func (s *Session) ID() string { return s.id }

// Dropped counts a message from upstream that the transport did not
// deliver (code is one of DropCodes).
func (s *Session) Dropped(code Code) {
	if s.cfg.Meter != nil {
		s.cfg.Meter.Dropped(code)
	}
}

// Abandon forgets the client's pending request id: the transport answered
// it itself (with an error, its answer being unreadable), and an answer
// that comes later must not reach the client.
func (s *Session) Abandon(id []byte) {
	s.Unanswered([][]byte{id})
}

// Unanswered returns those of ids (requests the transport forwarded) that
// the client still waits for, and forgets them: the upstream's answer
// ended without one, so the transport answers each with an error and a
// late answer must not follow it. A listing left unanswered so fails: what
// the server listed could not be judged, so its tools are not trusted
// until a listing is (listing_invalid).
func (s *Session) Unanswered(ids [][]byte) [][]byte {
	out, lists := s.reqs.unanswered(ids)
	for _, k := range lists {
		s.failListing(k, listingRef{}, "the server's answer to the listing could not be judged", false)
	}
	return out
}

// SetOwnMeta replaces Config.OwnMeta (nil: the proxy's own requests carry
// no _meta), for a session that falls back to an older protocol version.
func (s *Session) SetOwnMeta(meta []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.OwnMeta = meta
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
		s.mu.Lock()
		ks := &s.kinds[k]
		if ks.dropped && ks.relisting == nil {
			ks.relisting = make(chan struct{}) // distrusted until listed (relistDropped)
		}
		ks.inFlight, ks.dirty, ks.dropped, ks.since = true, false, false, time.Now()
		s.mu.Unlock()
		if err := s.relist(k, ""); err != nil {
			return err
		}
	}
	return nil
}

func joinBatch(msgs [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(msgs, []byte{','})...), ']')
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
}

// kindState is what a session holds of one kind of listing.
type kindState struct {
	listing   [byProxy + 1]assembly     // in progress, by owner
	cursors   map[string]bool           // cursors the proxy's own listing followed
	gen       int                       // the proxy's own listing under way: answers of an older one are dropped
	complete  [][]byte                  // the last complete listing's pages
	lastItems map[string]surface.Digest // the items of the last complete listing
	itemsWith surface.Options           // what lastItems were hashed with
	relisting chan struct{}             // closed when the re-listing list_changed asked for is done
	// The proxy's own listing of the kind (flood.go): one in flight since
	// since, and dirty when another is owed after it; dropped when its
	// request did not reach the server, and the kind is distrusted until
	// it is listed again; held counts the list_changed held until it is
	// done (holdChange).
	inFlight, dirty, dropped bool
	since                    time.Time
	held                     int
}

// startListing starts k's listing by by afresh; s.mu held.
func (s *Session) startListing(k surface.Kind, by owner) {
	s.kinds[k].listing[by] = assembly{builder: surface.NewBuilder(s.judge().hashOptions())}
	if by == byProxy {
		s.kinds[k].cursors = nil
		s.kinds[k].gen++
	}
}

// judge is the session whose listings this one's decisions are made by:
// Config.Follow when set, else this one.
func (s *Session) judge() *Session {
	if s.cfg.Follow != nil {
		return s.cfg.Follow
	}
	return s
}

// currentVariant is the listing variant decisions are made in.
func (s *Session) currentVariant() string {
	if s.cfg.Follow != nil {
		return s.cfg.Follow.currentVariant()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.variant
}

// view asks the gate, waiting at most Config.Timeout; awaiting says that a
// verdict on this variant is due (see Gate). A session that has not named
// its variant (no initialize yet) knows nothing: there is no default. The
// session adopts the view's hashing (adoptHashing). The caller must not
// hold s.mu.
func (s *Session) view(ctx context.Context, variant string, awaiting bool) (View, bool) {
	if variant == "" {
		return View{}, false
	}
	v, ok := s.gate.View(ctx, variant, awaiting, s.cfg.Timeout)
	if ok {
		s.judge().adoptHashing(v.Hashing)
		v = s.narrowPosture(v)
	}
	return v, ok
}

// narrowPosture narrows the drift posture of v to what the tenant's live
// policy says for the server (DriftPolicy), the moment the proxy learns
// the policy rather than when the record is rewritten: block withdraws the
// alert and withhold_changed postures, withhold_changed withdraws alert
// (the record's serve rule for it, which weighs the instructions, is not
// known until the drift service rewrites the record). A changed variant so
// narrowed is withheld whole meanwhile. Nothing is ever widened.
func (s *Session) narrowPosture(v View) View {
	if !v.Alert && !v.Withhold {
		return v
	}
	dp, ok := s.cfg.Policy.(DriftPolicy)
	if !ok {
		return v
	}
	switch dp.OnDrift(s.cfg.Server) {
	case status.Block:
		v.Alert, v.Withhold = false, false
	case status.WithholdChanged:
		if !v.Alert {
			return v
		}
		v.Alert, v.Withhold = false, true
	default:
		return v
	}
	if v.Status != string(status.Verified) {
		v.Serve = false
	}
	return v
}

// hashOptions is what the session hashes items with.
func (s *Session) hashOptions() surface.Options {
	if o := s.hashing.Load(); o != nil {
		return *o
	}
	return defaultHashing
}

// defaultHashing is what a session hashes with before it knows the
// server's record: the hashing a server first seen gets
// (status.DefaultHashing: the newest canonical form), so that what it
// hashes then matches what the pipeline makes of the same listing.
var defaultHashing = surface.Options{Form: surface.FormLatest}

// adoptHashing makes o the session's hashing when it differs: every item
// hash the session holds (its live items, its last listings) is made again
// from the raw pages it kept, so that what it compares with the baseline is
// hashed as the baseline was. Until then a digest of another algorithm
// never equals the baseline's, which withholds (fail closed). The caller
// must not hold s.mu.
func (s *Session) adoptHashing(o surface.Options) {
	if s.hashOptions() == o {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hashOptions() == o {
		return
	}
	s.hashing.Store(&o)
	clear(s.live)
	s.init.rehash(o)
	for k := surface.KindTool; k <= surface.KindResourceTemplate; k++ {
		ks := &s.kinds[k]
		if ks.lastItems == nil {
			continue
		}
		items, err := itemsOf(o, k, ks.complete)
		if err != nil {
			items = nil // judged as a listing that failed: drift
		}
		ks.lastItems, ks.itemsWith = items, o
		for name, h := range items {
			s.live[ItemKey{k, name}] = h
		}
		if k == surface.KindTool {
			s.tools.rehashed(items)
		}
	}
	if ui := &s.ui; len(ui.results) > 0 {
		ui.with = o
		clear(ui.hashes)
		for u, r := range ui.results {
			if h, ok, err := hashGot(o, u, r); err == nil && ok {
				ui.hashes[u] = h
			}
		}
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

// awaits reports whether a verdict on variant is due for the session that
// judges this one: it published that variant's whole surface, or it is
// assembling it.
func (s *Session) awaits(variant string) bool {
	judge := s.judge()
	judge.mu.Lock()
	defer judge.mu.Unlock()
	return judge.published[variant] || judge.assembling
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

// sameVariantAs reports whether this following session's requests are in
// the listing variant of the session f that judges them (a request that
// names no variant is taken to be).
func (s *Session) sameVariantAs(f *Session) bool {
	s.mu.Lock()
	v := s.variant
	s.mu.Unlock()
	return v == "" || v == f.currentVariant()
}

// codeOf is the stable code of a listing error (surface's, or canonjson's).
func codeOf(err error) string {
	var se *surface.Error
	if errors.As(err, &se) {
		return string(se.Code)
	}
	return "invalid"
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

// addPage feeds a page to the listing in progress; last reports that the
// listing is complete. A following session then tells the session it
// follows what the page showed (followPage), its own lock released: a
// session never holds its lock while it takes another's (LOCKS.md).
func (s *Session) addPage(k surface.Kind, by owner, m *jsonrpc.Message) (page, bool, error) {
	pg, last, err, shown := s.addPageLocked(k, by, m)
	if f := s.cfg.Follow; f != nil && shown.items != nil && (shown.variant == "" || shown.variant == f.currentVariant()) {
		f.followPage(k, shown.items, shown.src)
	}
	return pg, last, err
}

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

// addPageLocked is addPage under s.mu; shown is what the page showed, for
// the session this one follows (its items nil when there is nothing to
// tell).
func (s *Session) addPageLocked(k surface.Kind, by owner, m *jsonrpc.Message) (_ page, last bool, _ error, shown shownPage) {
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
		return page{}, true, err, shownPage{}
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
		return pg, true, nil, shown
	}
	return pg, cursor == "", nil, shown
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

// finishListing publishes the complete listing; whether its tools drifted
// from the baseline is judged at the next decision (toolsMemory.driftedFrom), so that
// publishing never waits for a verdict, which on first sight waits for
// this very listing.
func (s *Session) finishListing(k surface.Kind, by owner) {
	s.mu.Lock()
	a := &s.kinds[k].listing[by]
	failure := a.failure
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

// publication is the surface a session last published whole in a variant.
type publication struct {
	hash string
	at   time.Time
}

// publish reports a complete listing to the observer, once, whole or in
// the compact form (docs/bus.md, "Compact re-listings"):
//
//   - a capture that is not a surface (a listing that failed) goes whole;
//   - a surface whose hash, made with the variant's record's hashing, is
//     the hash the record confirms (View.LiveHash: the pipeline hashed it
//     itself from a whole manifest) goes compact: re-deciding on it would
//     change nothing;
//   - a surface whose hash equals the one this session last published
//     whole in variant (the client's listing after the proxy's own, a
//     re-listing that found nothing new) goes compact too, since the
//     pipeline's verdict on it is known or on its way, unless the verdict
//     needs asking for again: the gate knows none for variant although the
//     first-sight bound has passed since that publication;
//   - anything else goes whole, and the pipeline decides on it.
//
// The compact form feeds only the audit trail: the fingerprint and drift
// services never see it, so reporting a hash compact can never make the
// pipeline adopt it. Judging is not affected: every listing is judged
// where it passes.
func (s *Session) publish(variant string, c capture, sum summary) {
	v, known := s.gateNow(variant)
	opts := defaultHashing
	if known {
		opts = v.Hashing
	}
	l := Listed{Variant: variant, Agent: s.cfg.Agent, Session: s.id}
	var hash surface.Digest
	var err error
	var doc []byte // the capture document, written once when needed
	if sum.ok && sum.with == opts {
		// The items were hashed as their pages passed, with the settings
		// the surface is hashed with: the surface hash is made of them.
		hash, err = surface.HashItemsForm(opts.Hash, opts.Form, sum.items, sum.listed)
	} else {
		var sf *surface.Surface
		doc = c.bytes()
		if sf, err = surface.Parse(doc, opts); err == nil {
			hash = sf.Hash
		}
	}
	if err == nil {
		l.Hash = hash.String()
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock() // one publication at a time: the last one recorded is the last one published
	last, ok := s.lastPub[variant]
	switch {
	case err != nil:
		delete(s.lastPub, variant)
	case known && v.LiveHash != "" && v.LiveHash == l.Hash,
		ok && last.hash == l.Hash && (known || time.Since(last.at) < s.cfg.Timeout):
		s.obs.Seen(l)
		return
	default:
		if s.lastPub == nil {
			s.lastPub = map[string]publication{}
		}
		s.lastPub[variant] = publication{hash: l.Hash, at: time.Now()}
	}
	if doc == nil {
		doc = c.bytes()
	}
	s.obs.Listing(l, doc)
}

// observe reports a call, as made by the session's agent.
func (s *Session) observe(c Call) {
	c.Agent = s.cfg.Agent
	s.obs.Call(c)
}

// gateNow asks the gate, without waiting, what it holds of variant.
func (s *Session) gateNow(variant string) (View, bool) {
	now, cancel := context.WithCancel(context.Background())
	cancel() // answer from what the gate holds
	return s.gate.View(now, variant, false, 0)
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

// summary is what a capture's surface hash is made of, when the session
// hashed all of it with one setting as it passed (ok).
type summary struct {
	ok     bool
	with   surface.Options
	listed []surface.Kind
	items  []surface.Item
}

// captureLocked takes what the capture document of what the session has
// seen is written from, and sums up the items it hashed of it.
func (s *Session) captureLocked() (capture, summary) {
	sum := summary{ok: true}
	first := true
	use := func(with surface.Options) {
		if first {
			sum.with, first = with, false
		} else if with != sum.with {
			sum.ok = false
		}
	}
	init, initItems, initWith, initKnown := s.init.captured()
	if init != nil {
		if !initKnown {
			sum.ok = false
		}
		use(initWith)
		for _, it := range initItems {
			sum.items = append(sum.items, surface.Item{Kind: it.Kind, Name: it.Name, Hash: it.Hash})
		}
	}
	c := capture{init: init}
	size := len(c.init) + 64
	for k := surface.KindTool; k <= surface.KindResourceTemplate; k++ {
		ks := &s.kinds[k]
		if len(ks.complete) == 0 {
			continue
		}
		c.pages[k] = ks.complete // pages are never changed once kept; the slice may be replaced
		for _, p := range c.pages[k] {
			size += len(p) + 1
		}
		if ks.lastItems == nil {
			sum.ok = false // a listing that failed: no surface
		}
		use(ks.itemsWith)
		sum.listed = append(sum.listed, k)
		for name, h := range ks.lastItems {
			sum.items = append(sum.items, surface.Item{Kind: k, Name: name, Hash: h})
		}
	}
	size += s.uiCapture(&c, &sum)
	if !slices.Contains(sum.listed, surface.KindTool) {
		sum.ok = false // a capture without tools is no surface (missing_tools): let the parse say
	}
	if size+256 > surface.DefaultLimits.MaxBytes {
		sum.ok = false // near the size a parse of the capture refuses: let the parse say
	}
	return c, sum
}

// capture is what a capture document is written from: the pages and the
// initialize result a session kept, written only when the listing is
// published whole.
type capture struct {
	init  []byte
	pages [surface.KindResourceTemplate + 1][][]byte
	got   map[gotKey][]byte // the UI resources' read results and the prompts' get results (form v2)
}

// bytes writes the capture document.
func (c capture) bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	member := func(key string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(strconv.Quote(key))
		b.WriteByte(':')
	}
	if c.init != nil {
		member(jsonrpc.MethodInitialize)
		b.Write(c.init)
	}
	for _, k := range []surface.Kind{surface.KindTool, surface.KindPrompt, surface.KindResource, surface.KindResourceTemplate} {
		if len(c.pages[k]) == 0 {
			continue
		}
		member(k.ListKey())
		b.WriteString(`{"pages":[`)
		b.Write(bytes.Join(c.pages[k], []byte{','}))
		b.WriteString(`]}`)
	}
	for _, kind := range []surface.Kind{surface.KindUIContent, surface.KindPromptMessages} {
		var names []string
		for k := range c.got {
			if k.kind == kind {
				names = append(names, k.name)
			}
		}
		if len(names) == 0 {
			continue
		}
		member(kind.ListKey())
		b.WriteByte('{')
		slices.Sort(names)
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(canonjson.AppendString(nil, n))
			b.WriteByte(':')
			b.Write(c.got[gotKey{kind, n}])
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes()
}

// object parses raw (params or a result, passed on and never canonicalized,
// so numbers are read laxly) and returns it when it is a JSON object.
func object(raw []byte) *canonjson.Doc {
	d := new(canonjson.Doc)
	if len(raw) == 0 || d.Parse(raw, canonjson.Limits{LaxNumbers: true}) != nil || d.Kind(canonjson.Root) != canonjson.Object {
		return nil
	}
	return d
}

// declaredKinds reads the listings an initialize result's capabilities
// announce: tools, prompts, and resources (with their templates).
func declaredKinds(m *jsonrpc.Message) []surface.Kind {
	d, r, ok := m.ResultObject()
	if !ok {
		return nil
	}
	c, ok := d.Get(r, "capabilities")
	if !ok || d.Kind(c) != canonjson.Object {
		return nil
	}
	var out []surface.Kind
	for _, e := range []struct {
		key   string
		kinds []surface.Kind
	}{
		{"tools", []surface.Kind{surface.KindTool}},
		{"prompts", []surface.Kind{surface.KindPrompt}},
		{"resources", []surface.Kind{surface.KindResource, surface.KindResourceTemplate}},
	} {
		if v, ok := d.Get(c, e.key); ok && d.Kind(v) != canonjson.Null {
			out = append(out, e.kinds...)
		}
	}
	return out
}

// variantOf derives the listing variant from initialize params, or from the
// _meta of a 2026-07-28 request: the protocol version and the names of the
// capabilities the client declared, which are what servers list
// differently for.
func variantOf(m *jsonrpc.Message) string {
	// Params that cannot be read declare nothing: the variant of a client
	// that names no version and no capabilities (never a made-up default).
	version := ""
	var caps []string
	if d, root, ok := m.ParamsObject(); ok {
		at, versionKey, capsKey := root, "protocolVersion", "capabilities"
		if meta, ok := d.Get(root, jsonrpc.MetaKey); ok && d.Kind(meta) == canonjson.Object {
			if _, ok := d.Get(meta, jsonrpc.MetaProtocolVersion); ok {
				at, versionKey, capsKey = meta, jsonrpc.MetaProtocolVersion, jsonrpc.MetaClientCapabilities
			}
		}
		if v, ok := d.Get(at, versionKey); ok && d.Kind(v) == canonjson.String {
			version = d.Text(v)
		}
		if c, ok := d.Get(at, capsKey); ok && d.Kind(c) == canonjson.Object {
			for i := range d.Len(c) {
				k, _ := d.Member(c, i)
				caps = append(caps, d.Text(k))
			}
		}
	}
	slices.Sort(caps)
	sum := sha256.Sum256([]byte(version + "|" + strings.Join(caps, ",")))
	return "v" + hex.EncodeToString(sum[:6])
}

// callOf returns the tool name of tools/call params, a digest of the
// arguments as the client wrote them (audit keeps the digest, not the
// arguments, which can hold secrets), when full is set a copy of the
// arguments themselves, raw, the arguments' bytes (a slice of params, nil
// when there are none), and twin, two member names of params that differ
// only in case ("" when none: see foldTwin), from one parse.
func callOf(m *jsonrpc.Message, full bool) (name, digest string, raw, args []byte, twin string) {
	d, p, ok := m.ParamsObject() // what it returns is copied, or a slice of the message
	if !ok {
		sum := sha256.Sum256(m.Params)
		return "", "sha256:" + hex.EncodeToString(sum[:]), nil, nil, ""
	}
	if a, b, ok := d.FoldTwin(p); ok {
		twin = fmt.Sprintf("%q and %q", a, b)
	}
	if n, ok := d.Get(p, "name"); ok && d.Kind(n) == canonjson.String {
		name = d.Text(n)
	}
	hashed := []byte("null")
	if a, ok := d.Get(p, "arguments"); ok {
		raw = d.Raw(a)
		hashed = raw
		if full {
			args = bytes.Clone(raw) // raw is the transport's buffer
		}
	}
	sum := sha256.Sum256(hashed)
	return name, "sha256:" + hex.EncodeToString(sum[:]), raw, args, twin
}

// isToolError reports a tools/call result with "isError": true. Most
// results have no isError member, and a result can be large (a file's
// contents): one without the key "isError" in its bytes, and without a \u
// escape (the key could be written with one), is not parsed at all.
func isToolError(result []byte) bool {
	if !bytes.Contains(result, []byte(`"isError"`)) && !bytes.Contains(result, []byte(`\u`)) {
		return false
	}
	d := object(result)
	if d == nil {
		return false
	}
	v, ok := d.Get(canonjson.Root, "isError")
	return ok && d.Kind(v) == canonjson.True
}
