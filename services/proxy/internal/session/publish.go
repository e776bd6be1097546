package session

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// Publication: what a session saw of the server (its initialize result,
// the last complete listing of each kind, the contents its own gets got)
// is written as a capture document and reported to the observer, whole
// when the pipeline must decide on it, compact when it already has
// (publish). The surface hash is made of the item hashes the session took
// as the pages passed when they were all made with the settings it is
// hashed with, else from the document.

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

// summary is what a capture's surface hash is made of, when the session
// hashed all of it with one setting as it passed (ok).
type summary struct {
	ok     bool
	with   surface.Options
	listed []surface.Kind
	items  []surface.Item
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

// publication is the surface a session last published whole in a variant.
type publication struct {
	hash string
	at   time.Time
}

// gateNow asks the gate, without waiting, what it holds of variant.
func (s *Session) gateNow(variant string) (View, bool) {
	now, cancel := context.WithCancel(context.Background())
	cancel() // answer from what the gate holds
	return s.gate.View(now, variant, false, 0)
}
