package session

import (
	"context"
	"errors"
	"regexp"
	"slices"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
)

// An initialize (or server/discover) result carries two things the host
// shows the model or a person besides the listings: the instructions, text
// in the model's context, and serverInfo (its name, title, description,
// website and icons, which hosts show in their server lists and consent
// prompts). Both are pinned: pinInit passes each on only when the verdict
// approves it, and what it passes is exactly what was hashed.
//
//   - The instructions pass when they are the approved ones (or the server
//     is served whole under the alert posture); otherwise they are removed.
//   - serverInfo passes with the members canonical form v2 covers (name,
//     title, description, websiteUrl, icons) when its server item is the
//     approved one; otherwise with its name only. Members the form does
//     not cover (vendor keys, _meta) never pass: nothing reaches the agent
//     that was not hashed. The name stays because clients require it; a
//     changed name is a change of the server item, which the drift service
//     judges like any other (under the block posture nothing of that server
//     is served meanwhile).
//   - serverInfo.version is left out of the hash (it changes with every
//     release, docs/adr/0015), so it passes only when it reads as a
//     version (safeVersion); any other value is replaced by "withheld".
//
// A result whose serverInfo holds only a name and a version, and that has
// no instructions, passes byte for byte without waiting for anything.
//
// pinInit never waits for a verdict that has not arrived: at initialize
// this session has published nothing yet (it lists the server once the
// client says it is initialized), so on first sight no verdict on this
// variant can come but from another proxy, and waiting would hold the
// client's handshake for the whole first-sight wait. A server never seen
// therefore has its instructions and its server description withheld for
// this session, which fails closed; the verdict, once there, serves them
// to the sessions that follow.
// initPin is what a session holds of the server's initialize result: the
// raw result, and its items (the instructions, and in form v2 the server
// item) hashed as pinInit last hashed them, or again when the session
// adopted other hashing settings. Its lock is its own, a leaf, taken under
// the session's or alone.
type initPin struct {
	mu    lockorder.Mutex[lockorder.InitPinMu]
	res   []byte             // the raw initialize result; nil before it came
	items []surface.PageItem // its items, hashed with with
	with  surface.Options
	known bool // items are res's
}

// set keeps the initialize result res (the session's, cloned).
func (p *initPin) set(res []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res = res
}

// result is the initialize result kept, nil before it came.
func (p *initPin) result() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// hashed records the items pinInit hashed of the result with with; known
// false when the result could not be read.
func (p *initPin) hashed(items []surface.PageItem, with surface.Options, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.items, p.with, p.known = items, with, known
}

// rehash hashes the result's items again with o (adoptHashing).
func (p *initPin) rehash(o surface.Options) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.res == nil {
		return
	}
	var err error
	p.items, err = initItemsOf(o, p.res)
	p.known, p.with = err == nil, o
}

// captured returns what a capture takes of the pin: the result (nil
// before it came), its items, what they were hashed with, and whether they
// are the result's.
func (p *initPin) captured() (res []byte, items []surface.PageItem, with surface.Options, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res, p.items, p.with, p.known
}

func (s *Session) pinInit(ctx context.Context, variant string, m *jsonrpc.Message) []byte {
	hashedWith := s.judge().hashOptions()
	b := surface.NewBuilder(hashedWith)
	var err error
	if d, n, ok := m.Parsed(); ok {
		err = b.AddInitializeIn(d, n)
	} else {
		err = b.AddInitializeResult(m.Result)
	}
	items := b.LastPage() // the instructions, and in form v2 the server item
	s.init.hashed(items, hashedWith, err == nil)
	var se *surface.Error
	if errors.As(err, &se) && (se.Code == surface.CodeAmbiguousEnvelope || se.Code == surface.CodeAmbiguousMember) {
		// A result that reads two ways: removing "instructions" would
		// leave what a case-insensitive reader takes for them.
		s.Dropped(DropAmbiguous)
		return Reply(m.ID, DropAmbiguous, "mcpdrift proxy: the server's initialize result reads two ways ("+string(se.Code)+"); it is withheld")
	}
	info, ierr := readServerInfo(m)
	if ierr != nil {
		s.Dropped(DropUnreadable)
		return Reply(m.ID, DropUnreadable, "mcpdrift proxy: the server's initialize result could not be read ("+ierr.Error()+"); it is withheld")
	}
	ins, hasIns := itemOf(items, surface.KindInstructions)
	if err == nil && !hasIns && !info.describes() {
		return m.Raw // nothing to pin
	}
	insOK, srvOK := false, false
	if err == nil {
		v, ok := s.view(ctx, variant, false)
		if ok && v.Hashing != hashedWith {
			b = surface.NewBuilder(v.Hashing)
			if b.AddInitializeResult(m.Result) == nil {
				items = b.LastPage()
				ins, hasIns = itemOf(items, surface.KindInstructions)
			} else {
				ok = false
			}
		}
		srv, hasSrv := itemOf(items, surface.KindServer)
		insOK = ok && v.Serve && (v.Alert || v.Items[ItemKey{surface.KindInstructions, ""}] == ins.Hash)
		srvOK = ok && v.Serve && (v.Alert || hasSrv && v.Items[ItemKey{surface.KindServer, ""}] == srv.Hash)
	}
	edits := map[string][]byte{}
	if hasIns && !insOK || err != nil && resultHas(m, "instructions") {
		edits["instructions"] = nil
		if s.cfg.Meter != nil {
			s.cfg.Meter.Withheld(surface.KindInstructions, 1)
		}
	}
	if value, cut := info.pinned(srvOK); value != nil {
		edits["serverInfo"] = value
		if cut && s.cfg.Meter != nil {
			s.cfg.Meter.Withheld(surface.KindServer, 1)
		}
	}
	if len(edits) == 0 {
		return m.Raw
	}
	out, rerr := jsonrpc.EditResult(m, edits)
	if rerr != nil {
		return Reply(m.ID, DropUnreadable, "mcpdrift proxy: the server's initialize result could not be read; it is withheld")
	}
	return out
}

// serverInfo is what an initialize result's serverInfo holds, read from
// the result's parse: its members in the server's order.
type serverInfo struct {
	d       *canonjson.Doc
	members [][2]canonjson.NodeID // name and value nodes; nil when there is no serverInfo
	present bool
}

// readServerInfo reads m's serverInfo. It is an error for serverInfo to
// be anything but an object (or absent, or null), or for its name or
// version to be anything but a string: no client reads such a result.
func readServerInfo(m *jsonrpc.Message) (serverInfo, error) {
	d, r, ok := m.ResultObject()
	if !ok {
		return serverInfo{}, errors.New("the result is not an object")
	}
	n, ok := d.Get(r, "serverInfo")
	if !ok || d.Kind(n) == canonjson.Null {
		return serverInfo{}, nil
	}
	if d.Kind(n) != canonjson.Object {
		return serverInfo{}, errors.New("serverInfo is not an object")
	}
	info := serverInfo{d: d, present: true}
	for i := range d.Len(n) {
		k, v := d.Member(n, i)
		if (d.StringIs(k, "name") || d.StringIs(k, "version")) && d.Kind(v) != canonjson.String {
			return serverInfo{}, errors.New("serverInfo." + d.Text(k) + " is not a string")
		}
		info.members = append(info.members, [2]canonjson.NodeID{k, v})
	}
	// The parse keeps members sorted by name; keep the server's order.
	sortByOffset(d, info.members)
	return info, nil
}

// describes tells whether info holds more than a name and a version that
// reads as one: something pinInit must judge.
func (info serverInfo) describes() bool {
	for _, kv := range info.members {
		k, v := kv[0], kv[1]
		switch {
		case info.d.StringIs(k, "name"):
		case info.d.StringIs(k, "version"):
			if !safeVersion.Match(info.d.Decoded(v)) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// pinned returns serverInfo as it may pass (nil when it passes as it is):
// with the members canonical form v2 covers when approved, else with its
// name only, and in both cases its version when it reads as one. cut says
// whether a member was withheld for want of approval.
func (info serverInfo) pinned(approved bool) (value []byte, cut bool) {
	if !info.present {
		return nil, false
	}
	d := info.d
	b := []byte{'{'}
	changed := false
	for _, kv := range info.members {
		k, v := kv[0], kv[1]
		raw := d.Raw(v)
		switch {
		case d.StringIs(k, "name"):
		case d.StringIs(k, "version"):
			if !safeVersion.Match(d.Decoded(v)) {
				raw, changed = []byte(`"withheld"`), true
			}
		case approved && coveredServerMember(d, k):
		default:
			changed = true
			cut = cut || !approved && coveredServerMember(d, k)
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, d.Raw(k)...)
		b = append(b, ':')
		b = append(b, raw...)
	}
	if !changed {
		return nil, false
	}
	return append(b, '}'), cut
}

// coveredServerMember tells whether k names a member of serverInfo that
// canonical form v2 hashes into the server item (the version aside).
func coveredServerMember(d *canonjson.Doc, k canonjson.NodeID) bool {
	for _, name := range [...]string{"title", "description", "websiteUrl", "icons"} {
		if d.StringIs(k, name) {
			return true
		}
	}
	return false
}

// safeVersion is what a serverInfo.version must read as to pass unhashed:
// a version (1.2.3, 2026.1.26, 0.6.2-beta.1+build, v1): letters, digits
// and . + - _ ~, at most 64 bytes. Free text (a sentence, an instruction to
// the model) is not a version.
var safeVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+_~-]{0,63}$`)

// resultHas tells whether m's result has the member key.
func resultHas(m *jsonrpc.Message, key string) bool {
	d, r, ok := m.ResultObject()
	if !ok {
		return false
	}
	_, has := d.Get(r, key)
	return has
}

// itemOf picks the item of kind k out of an initialize result's items.
func itemOf(items []surface.PageItem, k surface.Kind) (surface.PageItem, bool) {
	for _, it := range items {
		if it.Kind == k {
			return it, true
		}
	}
	return surface.PageItem{}, false
}

// initItemsOf hashes the items of an initialize result with o: the
// instructions, and in form v2 the server item.
func initItemsOf(o surface.Options, result []byte) ([]surface.PageItem, error) {
	b := surface.NewBuilder(o)
	if err := b.AddInitializeResult(result); err != nil {
		return nil, err
	}
	return b.LastPage(), nil
}

// sortByOffset puts members in the order they appear in the bytes.
func sortByOffset(d *canonjson.Doc, members [][2]canonjson.NodeID) {
	slices.SortFunc(members, func(a, b [2]canonjson.NodeID) int { return d.Offset(a[0]) - d.Offset(b[0]) })
}
