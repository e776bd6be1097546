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
	"fmt"
	"slices"
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

	// mu guards the session's variant, its listings and what its own
	// gets got; every other part of its state has a lock of its own, a
	// leaf (LOCKS.md).
	mu       lockorder.Mutex[lockorder.SessionMu]
	variant  string
	listings         // the listings as assembled (listing.go); mu guards them
	ui       uiState // MCP Apps UI contents, argument-less prompts' messages (apps.go); mu guards it

	reqs    requests    // the requests in flight whose answers the session judges (requests.go)
	init    initPin     // the initialize result, pinned (initpin.go)
	relists relists     // the proxy's own re-listings, by kind (flood.go)
	tools   toolsMemory // the server's tools against its baselines (tools.go)

	toolsListed     chan struct{} // closed once a tools listing was complete
	toolsListedOnce sync.Once

	// hashing is what the session hashes items with: the last View's
	// Hashing (adoptHashing); followers use their leader's.
	hashing atomic.Pointer[surface.Options]

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
		listings:    listings{live: map[ItemKey]surface.Digest{}},
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

func joinBatch(msgs [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(msgs, []byte{','})...), ']')
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
	s.ui.rehash(o)
}

// observe reports a call, as made by the session's agent.
func (s *Session) observe(c Call) {
	c.Agent = s.cfg.Agent
	s.obs.Call(c)
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
