package policy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"unsafe"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
)

// The codes of decisions the engine makes itself (Decision.Code), beside
// CodeUnreadableArgs. A rule's own decision has no code.
const (
	CodeRiskBlock      = "policy_risk_block"      // the server's risk mode is block (or unknown: read as block)
	CodeRiskQuarantine = "policy_risk_quarantine" // the server's risk mode is quarantine: held for approval
)

// argLimits bound the arguments the engine reads: those of an MCP message
// the proxy already accepted, so generous. Numbers are read exactly as
// decimals, so a number a double cannot carry is no reason to refuse.
var argLimits = canonjson.Limits{MaxBytes: 16 << 20, MaxDepth: 128, LaxNumbers: true}

// rule is a rule compiled.
type rule struct {
	id                   string
	server, tool, agent  string
	serverGlob, toolGlob bool
	drifted              *bool
	clauses              []clause
	action               Action
	reason               string
	redact               []string
	shadow               bool
}

// toolIndex finds the rules of one server (or of every server) for a tool:
// rules naming the tool exactly by name, the others (a glob, or no tool) in
// a short list. Both hold indexes into Set.rules, ascending.
type toolIndex struct {
	exact map[string][]int32
	glob  []int32
}

func (ti *toolIndex) add(r *rule, i int32) {
	if r.tool != "" && !r.toolGlob {
		if ti.exact == nil {
			ti.exact = map[string][]int32{}
		}
		ti.exact[r.tool] = append(ti.exact[r.tool], i)
		return
	}
	ti.glob = append(ti.glob, i)
}

// Set is one tenant's policy compiled for evaluation: immutable, safe for
// concurrent use. A nil *Set allows every call and holds no settings.
type Set struct {
	tenant  string
	version int64
	hash    string
	rules   []rule                // in evaluation order
	servers map[string]*toolIndex // rules naming a server exactly
	any     toolIndex             // rules with a server glob or none

	tenantDrift DriftSetting
	drift       map[string]DriftSetting
	tenantRisk  map[Band]Mode
	risk        map[string]map[Band]Mode
}

// Compile validates d (Validate) and compiles the rules and settings of
// tenant in it; the others' are ignored. Rules are ordered by Priority,
// higher first, then as written.
func Compile(tenant string, d *Document) (*Set, error) {
	if err := Validate(d); err != nil {
		return nil, err
	}
	part := d.For(tenant)
	s := &Set{tenant: tenant, hash: Hash(&part), servers: map[string]*toolIndex{}}
	ordered := Ordered(part.Rules)
	s.rules = make([]rule, 0, len(ordered))
	for i := range ordered {
		r := &ordered[i]
		cr := rule{
			id: r.ID, server: r.Server, tool: r.Tool, agent: r.Agent,
			serverGlob: isGlob(r.Server), toolGlob: isGlob(r.Tool),
			drifted: r.Drifted, action: r.Action, reason: r.Reason,
			redact: slices.Clone(r.Redact), shadow: r.Shadow,
		}
		if cr.reason == "" {
			cr.reason = "rule " + r.ID
		}
		for j := range r.Args {
			c, err := compileClause(&r.Args[j], false)
			if err != nil {
				return nil, err // Validate saw it first
			}
			cr.clauses = append(cr.clauses, c)
		}
		s.rules = append(s.rules, cr)
	}
	for i := range s.rules {
		r := &s.rules[i]
		if r.server == "" || r.serverGlob {
			s.any.add(r, int32(i))
			continue
		}
		ti := s.servers[r.server]
		if ti == nil {
			ti = new(toolIndex)
			s.servers[r.server] = ti
		}
		ti.add(r, int32(i))
	}
	for _, ds := range part.Drift {
		if ds.Server == "" {
			s.tenantDrift = ds
			continue
		}
		if s.drift == nil {
			s.drift = map[string]DriftSetting{}
		}
		s.drift[ds.Server] = ds
	}
	for _, rs := range part.Risk {
		if rs.Server == "" {
			s.tenantRisk = rs.Modes
			continue
		}
		if s.risk == nil {
			s.risk = map[string]map[Band]Mode{}
		}
		s.risk[rs.Server] = rs.Modes
	}
	return s, nil
}

// Ordered returns rules in evaluation order: by Priority, higher first,
// then in the order written.
func Ordered(rules []Rule) []Rule {
	out := slices.Clone(rules)
	slices.SortStableFunc(out, func(a, b Rule) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}

// CompileStored compiles a tenant's stored record, keeping its version and
// hash for observations.
func CompileStored(st *Stored) (*Set, error) {
	s, err := Compile(st.Tenant, &st.Document)
	if err != nil {
		return nil, err
	}
	s.version, s.hash = st.Version, st.Hash
	return s, nil
}

// Tenant is the tenant the set was compiled for.
func (s *Set) Tenant() string {
	if s == nil {
		return ""
	}
	return s.tenant
}

// Version is the stored record's version (0 for a set from Compile).
func (s *Set) Version() int64 {
	if s == nil {
		return 0
	}
	return s.version
}

// Hash is the hash of the tenant's part of the document (Hash).
func (s *Set) Hash() string {
	if s == nil {
		return ""
	}
	return s.hash
}

// Len is the number of the tenant's rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// Drift resolves the drift setting of a server: the tenant's setting with
// the server's override laid over it, field by field (a field the override
// leaves out is the tenant's; one both leave out is empty: the drift
// service's default). Tenant and Server are set to the set's tenant and
// server.
func (s *Set) Drift(server string) DriftSetting {
	if s == nil {
		return DriftSetting{Server: server}
	}
	out := s.tenantDrift
	out.Tenant, out.Server = s.tenant, server
	o, ok := s.drift[server]
	if !ok {
		return out
	}
	if o.Posture != "" {
		out.Posture = o.Posture
	}
	if o.OnDrift != "" {
		out.OnDrift = o.OnDrift
	}
	if o.Guard != nil {
		out.Guard = o.Guard
	}
	if o.Hash != "" {
		out.Hash = o.Hash
	}
	if o.Annotations != nil {
		out.Annotations = o.Annotations
	}
	if o.Form != "" {
		out.Form = o.Form
	}
	return out
}

// RiskMode resolves the enforcement mode of a server whose surface is in
// band: the server's risk setting for the band, else the tenant's, else
// ModeAllow.
func (s *Set) RiskMode(server string, band Band) Mode {
	if s == nil {
		return ModeAllow
	}
	if m, ok := s.risk[server][band]; ok {
		return m
	}
	if m, ok := s.tenantRisk[band]; ok {
		return m
	}
	return ModeAllow
}

// Evaluate decides a call (docs/policy.md): the candidate rules of the
// call's server and tool in order; a rule matches when its server, tool and
// agent globs, its drift gate and every argument clause match; the first
// enforced match decides, and the first shadow match before it is
// reported, never enforced. No match allows. The server's risk mode is then
// laid over the decision, also when no rule or a shadow rule matched:
// block denies, quarantine turns anything short of deny into
// pending_approval; an unknown mode is read as block.
//
// Arguments are read at most once, and only when a candidate rule has
// clauses; arguments that cannot be read unambiguously (invalid JSON,
// duplicate names, invalid UTF-8, lone surrogates, not an object) make such
// a rule decide Deny with Code CodeUnreadableArgs (a shadow rule records
// that deny and evaluation goes on). Evaluate does not allocate when no
// rule matches.
func (s *Set) Evaluate(c *Call) Decision {
	d := Decision{Action: Allow}
	if s != nil {
		d = s.decide(c)
	}
	return applyRisk(d, c.Risk)
}

// argState is the lazily parsed arguments of one evaluation.
type argState struct {
	doc   *canonjson.Doc
	state uint8 // 0 not read, 1 read, 2 empty (no arguments), 3 unreadable
	code  canonjson.Code
	why   string
}

func (a *argState) read(raw []byte) {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0, string(t) == "null":
		a.state = 2
		return
	}
	a.doc = canonjson.Borrow()
	if err := a.doc.Parse(raw, argLimits); err != nil {
		a.state = 3
		if e, ok := err.(*canonjson.Error); ok {
			a.code = e.Code
		}
		a.why = unreadableReason(a.code)
		return
	}
	if a.doc.Kind(canonjson.Root) != canonjson.Object {
		a.state, a.why = 3, unreadableNotObject
		return
	}
	if foldTwins(a.doc, canonjson.Root) {
		a.state, a.why = 3, unreadableFoldTwins
		return
	}
	a.state = 1
}

const (
	unreadableNotObject = "the call's arguments are not a JSON object"
	unreadableFoldTwins = "the call's arguments name two members that differ only in case, which servers read in different ways (case_twin)"
)

// foldTwins reports an object, at any depth under n, with two member names
// equal under case folding ("query" and "Query", "querſ"). A server that
// reads names case-insensitively (Go's encoding/json into a struct) takes
// either for the field, the last one winning, where the engine would read
// one exactly: the arguments are ambiguous.
func foldTwins(doc *canonjson.Doc, n canonjson.NodeID) bool {
	switch doc.Kind(n) {
	case canonjson.Object:
		if _, _, ok := doc.FoldTwin(n); ok {
			return true
		}
		for i := range doc.Len(n) {
			if _, v := doc.Member(n, i); foldTwins(doc, v) {
				return true
			}
		}
	case canonjson.Array:
		e := doc.First(n)
		for i := range doc.Len(n) {
			if i > 0 {
				e = doc.Next(e)
			}
			if foldTwins(doc, e) {
				return true
			}
		}
	}
	return false
}

// unreadableReason is the reason of a Deny on unreadable arguments (static
// strings: no allocation).
func unreadableReason(c canonjson.Code) string {
	switch c {
	case canonjson.CodeDuplicateKey:
		return "the call's arguments name a member twice (duplicate_key)"
	case canonjson.CodeInvalidUTF8:
		return "the call's arguments hold invalid UTF-8 (invalid_utf8)"
	case canonjson.CodeLoneSurrogate:
		return "the call's arguments hold a lone surrogate (lone_surrogate)"
	case canonjson.CodeTooDeep:
		return "the call's arguments are nested too deep (too_deep)"
	case canonjson.CodeTooLarge:
		return "the call's arguments are too large (too_large)"
	case canonjson.CodeTrailingData:
		return "the call's arguments have data after the value (trailing_data)"
	default:
		return "the call's arguments are not valid JSON (invalid_json)"
	}
}

func (s *Set) decide(c *Call) Decision {
	var lists [4][]int32
	if ti := s.servers[c.Server]; ti != nil {
		lists[0], lists[1] = ti.exact[c.Tool], ti.glob
	}
	lists[2], lists[3] = s.any.exact[c.Tool], s.any.glob
	var pos [4]int
	var a argState
	d := Decision{Action: Allow}
	for {
		best, bi := -1, int32(0)
		for k := range lists {
			if pos[k] < len(lists[k]) {
				if v := lists[k][pos[k]]; best < 0 || v < bi {
					best, bi = k, v
				}
			}
		}
		if best < 0 {
			break
		}
		pos[best]++
		r := &s.rules[bi]
		if !r.matchNames(c) {
			continue
		}
		action, reason, code := r.action, r.reason, ""
		if len(r.clauses) > 0 {
			if a.state == 0 {
				a.read(c.Arguments)
			}
			if a.state == 3 {
				action, reason, code = Deny, a.why, CodeUnreadableArgs
			} else if !r.matchArgs(&a) {
				continue
			}
		}
		if r.shadow {
			if d.ShadowRule == "" {
				d.ShadowRule, d.ShadowAction = r.id, action
			}
			continue
		}
		d.Rule, d.Action, d.Reason, d.Code = r.id, action, reason, code
		if action == Sanitize {
			d.Redact = r.redact
		}
		break
	}
	if a.doc != nil {
		canonjson.Return(a.doc)
	}
	return d
}

func (r *rule) matchNames(c *Call) bool {
	if r.serverGlob && !globMatch(r.server, c.Server) {
		return false
	}
	if r.toolGlob && !globMatch(r.tool, c.Tool) {
		return false
	}
	if r.agent != "" && !globMatch(r.agent, c.Agent) {
		return false
	}
	return r.drifted == nil || *r.drifted == c.Drifted
}

func (r *rule) matchArgs(a *argState) bool {
	if a.state != 1 {
		return false // no arguments: no path selects anything
	}
	for i := range r.clauses {
		if !r.clauses[i].match(a.doc) {
			return false
		}
	}
	return true
}

// lookup follows a path from the root of doc.
func lookup(doc *canonjson.Doc, path []step) (canonjson.NodeID, bool) {
	n := canonjson.Root
	for _, st := range path {
		if st.index >= 0 {
			if doc.Kind(n) != canonjson.Array || st.index >= doc.Len(n) {
				return 0, false
			}
			e := doc.First(n)
			for range st.index {
				e = doc.Next(e)
			}
			n = e
			continue
		}
		if doc.Kind(n) != canonjson.Object {
			return 0, false
		}
		v, ok := member(doc, n, st.name)
		if !ok {
			return 0, false
		}
		n = v
	}
	return n, true
}

// member returns the value of the member of obj named name, or whose name
// equals it under case folding: a case-insensitive server reads "Query"
// for the field query, so a clause on $.query must read it too. With no
// two names of obj equal under folding (foldTwins), there is at most one.
func member(doc *canonjson.Doc, obj canonjson.NodeID, name string) (canonjson.NodeID, bool) {
	if v, ok := doc.Get(obj, name); ok {
		return v, true
	}
	for i := range doc.Len(obj) {
		if k, v := doc.Member(obj, i); doc.FoldsTo(k, name) {
			return v, true
		}
	}
	return 0, false
}

// match reports whether the clause holds on doc: a path that selects
// nothing never matches, negated or not.
func (c *clause) match(doc *canonjson.Doc) bool {
	n, ok := lookup(doc, c.path)
	if !ok {
		return false
	}
	return c.test(doc, n) != c.not
}

func (c *clause) test(doc *canonjson.Doc, n canonjson.NodeID) bool {
	k := doc.Kind(n)
	switch c.op {
	case OpEq:
		return equal(doc, n, &c.val)
	case OpContains:
		if k == canonjson.String && c.val.kind == canonjson.String {
			return bytes.Contains(doc.Decoded(n), c.val.str)
		}
		if k == canonjson.Array && doc.Len(n) > 0 {
			e := doc.First(n)
			for range doc.Len(n) {
				if equal(doc, e, &c.val) {
					return true
				}
				e = doc.Next(e)
			}
		}
		return false
	case OpIn:
		for i := range c.vals {
			if equal(doc, n, &c.vals[i]) {
				return true
			}
		}
		return false
	case OpRegex:
		return k == canonjson.String && c.re.Match(doc.Decoded(n))
	case OpCIDRMatch:
		if k != canonjson.String {
			return false
		}
		b := doc.Decoded(n)
		if len(b) == 0 {
			return false
		}
		addr, err := netip.ParseAddr(unsafe.String(&b[0], len(b))) // not kept: a zone is copied
		if err != nil || addr.Zone() != "" {
			return false
		}
		addr = addr.Unmap()
		for _, p := range c.prefixes {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	case OpGt, OpLt:
		var lit []byte
		switch k {
		case canonjson.Number:
			lit = doc.Raw(n)
		case canonjson.String:
			lit = bytes.TrimPrefix(bytes.TrimSpace(doc.Decoded(n)), []byte{'+'})
		default:
			return false
		}
		x, ok := parseDecimal(lit)
		if !ok {
			return false
		}
		if c.op == OpGt {
			return x.cmp(&c.num) > 0
		}
		return x.cmp(&c.num) < 0
	}
	return false
}

const (
	reasonBlock      = "the server's risk mode is block"
	reasonQuarantine = "the server's risk mode is quarantine: the call waits for an admin's approval"
)

// applyRisk lays the server's risk mode over a decision.
func applyRisk(d Decision, m Mode) Decision {
	switch m {
	case "", ModeAllow:
	case ModeQuarantine:
		if d.Action != Deny && d.Action != PendingApproval {
			d.Action, d.Mode, d.Reason, d.Code = PendingApproval, ModeQuarantine, reasonQuarantine, CodeRiskQuarantine
		}
	default: // block, and a mode this engine does not know: fail closed
		if d.Action != Deny {
			d.Action, d.Mode, d.Reason, d.Code = Deny, ModeBlock, reasonBlock, CodeRiskBlock
		}
	}
	return d
}

// For returns the part of d that names tenant: its rules and settings, in
// their order.
func (d *Document) For(tenant string) Document {
	var out Document
	for _, r := range d.Rules {
		if r.Tenant == tenant {
			out.Rules = append(out.Rules, r)
		}
	}
	for _, s := range d.Drift {
		if s.Tenant == tenant {
			out.Drift = append(out.Drift, s)
		}
	}
	for _, s := range d.Risk {
		if s.Tenant == tenant {
			out.Risk = append(out.Risk, s)
		}
	}
	return out
}

// Tenants returns the tenants d names, sorted.
func (d *Document) Tenants() []string {
	seen := map[string]bool{}
	for _, r := range d.Rules {
		seen[r.Tenant] = true
	}
	for _, s := range d.Drift {
		seen[s.Tenant] = true
	}
	for _, s := range d.Risk {
		seen[s.Tenant] = true
	}
	return sortedKeys(seen)
}

// Hash is "sha256:" and the hex SHA-256 of d's JSON encoding (encoding/json:
// struct fields in their order, map keys sorted), so one document always
// has one hash.
func Hash(d *Document) string {
	b, err := json.Marshal(d)
	if err != nil {
		// Only values Validate refuses fail to encode.
		b = fmt.Appendf(nil, "unencodable: %v", err)
	}
	sum := sha256.Sum256(b)
	return SHA256 + ":" + hex.EncodeToString(sum[:])
}

// DecodeStored reads a tenant's record as the policy bucket holds it
// (JSON), keeping clause numbers exact. What it returns may still be
// refused by CompileStored (a document this version does not know).
func DecodeStored(b []byte) (*Stored, error) {
	var st Stored
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decoding a stored policy: %w", err)
	}
	return &st, nil
}
