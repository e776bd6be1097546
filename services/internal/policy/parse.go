package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// Limits of a document, past which it is refused (CodeTooLarge).
const (
	MaxBytes      = 4 << 20 // the document's source
	MaxRules      = 10000   // rules in a document
	MaxClauses    = 64      // argument clauses of a rule
	MaxValues     = 10000   // values of an in or cidr_match clause
	MaxPattern    = 4096    // bytes of a glob or regex
	MaxReason     = 1024    // bytes of a reason
	maxGlobLength = 256
)

// Parse reads a policy document, YAML or JSON (JSON is read as the YAML it
// also is), strictly: unknown fields, duplicate keys, values of the wrong
// type and more than one document are refused. It then validates the
// whole document (Validate) and returns every error found, joined, each a
// *Error with a code, the rule and the field (Errors lists them). A
// document refused is refused whole.
func Parse(data []byte) (*Document, error) {
	if len(data) > MaxBytes {
		return nil, &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("the document is %d bytes, over the limit of %d", len(data), MaxBytes)}
	}
	if !utf8.Valid(data) {
		return nil, &Error{Code: CodeSyntax, Msg: "the document is not valid UTF-8"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &Document{}, nil
		}
		return nil, syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, syntaxError(err)
		}
		return nil, &Error{Code: CodeSyntax, Line: extra.Line, Msg: "a policy file holds one document (found a second after ---)"}
	}
	var l errs
	info := shapeInfo{missing: map[[2]int]bool{}}
	body := &root
	if body.Kind == yaml.DocumentNode && len(body.Content) == 1 {
		body = body.Content[0]
	}
	if body.Kind == yaml.ScalarNode && body.Tag == "!!null" {
		return &Document{}, nil
	}
	if body.Kind != yaml.MappingNode {
		return nil, &Error{Code: CodeBadType, Line: body.Line, Msg: "a policy document is a mapping with rules, drift and risk"}
	}
	info.shape(&l, body)
	var d Document
	if err := body.Decode(&d); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, syntaxError(err)
		}
		for _, m := range te.Errors {
			line, msg := splitLine(m)
			code := CodeBadType
			if strings.Contains(msg, "already defined") {
				code = CodeSyntax
			}
			l.list = append(l.list, &Error{Code: code, Line: line, Msg: msg})
		}
	}
	for _, e := range Errors(validate(&d, &info)) {
		l.list = append(l.list, e)
	}
	if err := l.err(); err != nil {
		return nil, err
	}
	return &d, nil
}

func syntaxError(err error) *Error {
	line, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
	return &Error{Code: CodeSyntax, Line: line, Msg: msg}
}

// splitLine takes yaml's "line N: " off a message.
func splitLine(m string) (int, string) {
	rest, ok := strings.CutPrefix(m, "line ")
	if !ok {
		return 0, m
	}
	num, msg, ok := strings.Cut(rest, ": ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, m
	}
	return n, msg
}

// shapeInfo is what Parse learns from the YAML tree that the decoded
// Document does not say: lines, and clauses written without a value.
type shapeInfo struct {
	ruleLines, driftLines, riskLines []int
	missing                          map[[2]int]bool // rule, clause: no value written
}

var (
	documentFields = yamlFields(Document{})
	ruleFields     = yamlFields(Rule{})
	clauseFields   = yamlFields(Clause{})
	driftFields    = yamlFields(DriftSetting{})
	riskFields     = yamlFields(RiskSetting{})
)

func yamlFields(v any) map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		out[name] = true
	}
	return out
}

// shape checks the fields of every mapping of the document, naming the rule
// and the field of each unknown one.
func (s *shapeInfo) shape(l *errs, body *yaml.Node) {
	s.fields(l, body, documentFields, "", "")
	for i := 0; i+1 < len(body.Content); i += 2 {
		key, val := body.Content[i].Value, body.Content[i+1]
		if val.Kind != yaml.SequenceNode {
			continue // Decode reports the type
		}
		for j, item := range val.Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			switch key {
			case "rules":
				ref := fmt.Sprintf("rules[%d]", j)
				if id := scalarAt(item, "id"); bus.ValidID("rule", id) == nil {
					ref = id
				}
				s.ruleLines = append(s.ruleLines, item.Line)
				s.fields(l, item, ruleFields, ref, "")
				args := nodeAt(item, "args")
				if args == nil || args.Kind != yaml.SequenceNode {
					continue
				}
				for k, c := range args.Content {
					if c.Kind != yaml.MappingNode {
						continue
					}
					field := fmt.Sprintf("args[%d]", k)
					s.fields(l, c, clauseFields, ref, field+".")
					if nodeAt(c, "value") == nil {
						s.missing[[2]int{j, k}] = true
						l.list = append(l.list, &Error{Code: CodeBadValue, Rule: ref, Field: field + ".value", Line: c.Line, Msg: "a clause needs a value"})
					}
				}
			case "drift":
				s.driftLines = append(s.driftLines, item.Line)
				s.fields(l, item, driftFields, fmt.Sprintf("drift[%d]", j), "")
			case "risk":
				s.riskLines = append(s.riskLines, item.Line)
				s.fields(l, item, riskFields, fmt.Sprintf("risk[%d]", j), "")
			}
		}
	}
}

func (s *shapeInfo) fields(l *errs, m *yaml.Node, known map[string]bool, ref, prefix string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !known[k.Value] {
			l.list = append(l.list, &Error{Code: CodeUnknownField, Rule: ref, Field: prefix + k.Value, Line: k.Line,
				Msg: fmt.Sprintf("unknown field %q (known: %s)", k.Value, strings.Join(sortedKeys(known), ", "))})
		}
	}
}

func nodeAt(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalarAt(m *yaml.Node, key string) string {
	if n := nodeAt(m, key); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

// Validate checks a whole document and returns every error, joined (see
// Parse). Tenants, setting servers and rule ids follow the bus's name rules
// (bus.ValidID); rule ids are unique within a tenant.
func Validate(d *Document) error { return validate(d, nil) }

func validate(d *Document, info *shapeInfo) error {
	var l errs
	line := func(lines []int, i int) int {
		if info != nil && i < len(lines) {
			return lines[i]
		}
		return 0
	}
	at := func(n int, lineNo int) {
		for _, e := range l.list[n:] {
			if pe, ok := e.(*Error); ok && pe.Line == 0 {
				pe.Line = lineNo
			}
		}
	}
	if len(d.Rules) > MaxRules {
		l.add(CodeTooLarge, "", "rules", "%d rules, over the limit of %d", len(d.Rules), MaxRules)
	}
	ids := map[[2]string]bool{}
	for i := range d.Rules {
		n := len(l.list)
		r := &d.Rules[i]
		ref := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.ID == "":
			l.add(CodeMissingID, ref, "id", "a rule needs an id")
		case bus.ValidID("rule", r.ID) != nil:
			l.add(CodeBadID, ref, "id", "rule id %q must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", clip(r.ID))
		default:
			ref = r.ID
			if ids[[2]string{r.Tenant, r.ID}] {
				l.add(CodeDuplicateID, ref, "id", "tenant %q has two rules with the id %q", r.Tenant, r.ID)
			}
			ids[[2]string{r.Tenant, r.ID}] = true
		}
		validTenant(&l, ref, r.Tenant)
		validGlob(&l, ref, "server", r.Server, true)
		validGlob(&l, ref, "tool", r.Tool, false)
		validGlob(&l, ref, "agent", r.Agent, false)
		switch r.Action {
		case Allow, Audit, Sanitize, PendingApproval, Deny:
		case "":
			l.add(CodeBadAction, ref, "action", "a rule needs an action (%s)", actionList)
		default:
			l.add(CodeBadAction, ref, "action", "unknown action %q (want %s)", clip(string(r.Action)), actionList)
		}
		if len(r.Reason) > MaxReason {
			l.add(CodeTooLarge, ref, "reason", "the reason is %d bytes, over the limit of %d", len(r.Reason), MaxReason)
		} else if strings.ContainsFunc(r.Reason, unicode.IsControl) {
			l.add(CodeBadValue, ref, "reason", "the reason holds control characters")
		}
		switch {
		case r.Action == Sanitize && len(r.Redact) == 0:
			l.add(CodeBadRedact, ref, "redact", "a sanitize rule names the argument paths it redacts")
		case r.Action != Sanitize && len(r.Redact) > 0:
			l.add(CodeBadRedact, ref, "redact", "redact is for sanitize rules (this one is %q)", r.Action)
		}
		for j, p := range r.Redact {
			steps, msg := parsePath(p)
			if msg == "" && len(steps) == 0 {
				msg = "the whole arguments object cannot be redacted; name a member"
			}
			if msg != "" {
				l.add(CodeBadPath, ref, fmt.Sprintf("redact[%d]", j), "%q: %s", clip(p), msg)
			}
		}
		if len(r.Args) > MaxClauses {
			l.add(CodeTooLarge, ref, "args", "%d clauses, over the limit of %d", len(r.Args), MaxClauses)
		}
		for j := range r.Args {
			skipValue := info != nil && info.missing[[2]int{i, j}]
			if _, err := compileClause(&r.Args[j], skipValue); err != nil {
				e := err.(*Error)
				e.Rule, e.Field = ref, fmt.Sprintf("args[%d].%s", j, e.Field)
				l.list = append(l.list, e)
			}
		}
		if info != nil {
			at(n, line(info.ruleLines, i))
		}
	}
	seen := map[[2]string]bool{}
	for i := range d.Drift {
		n := len(l.list)
		s := &d.Drift[i]
		ref := fmt.Sprintf("drift[%d]", i)
		validSetting(&l, ref, "drift", s.Tenant, s.Server, seen)
		if s.Posture != "" && s.Posture != status.Discovery && s.Posture != status.Strict {
			l.add(CodeBadSetting, ref, "posture", "unknown posture %q (want %s or %s)", clip(s.Posture), status.Discovery, status.Strict)
		}
		if s.OnDrift != "" && !status.OnDriftValid(s.OnDrift) {
			l.add(CodeBadSetting, ref, "on_drift", "unknown on_drift %q (want %s, %s or %s)", clip(s.OnDrift), status.Block, status.Alert, status.WithholdChanged)
		}
		if s.Hash != "" && s.Hash != SHA256 && s.Hash != SHA512 {
			l.add(CodeBadSetting, ref, "hash", "unknown hash %q (want %s or %s)", clip(s.Hash), SHA256, SHA512)
		}
		if s.Form != "" && s.Form != FormV1 && s.Form != FormV2 {
			l.add(CodeBadSetting, ref, "form", "unknown canonical form %q (want %s or %s)", clip(s.Form), FormV1, FormV2)
		}
		if info != nil {
			at(n, line(info.driftLines, i))
		}
	}
	clear(seen)
	for i := range d.Risk {
		n := len(l.list)
		s := &d.Risk[i]
		ref := fmt.Sprintf("risk[%d]", i)
		validSetting(&l, ref, "risk", s.Tenant, s.Server, seen)
		if len(s.Modes) == 0 {
			l.add(CodeBadSetting, ref, "modes", "a risk setting maps bands (%s) to modes (%s)", bandList, modeList)
		}
		for _, b := range sortedKeys(s.Modes) {
			if !ValidBand(Band(b)) {
				l.add(CodeBadBand, ref, "modes."+clip(b), "unknown risk band %q (want %s)", clip(b), bandList)
			}
			if m := s.Modes[Band(b)]; !ValidMode(m) {
				l.add(CodeBadMode, ref, "modes."+clip(b), "unknown risk mode %q (want %s)", clip(string(m)), modeList)
			}
		}
		if info != nil {
			at(n, line(info.riskLines, i))
		}
	}
	return l.err()
}

const (
	actionList = "allow, audit, sanitize, pending_approval or deny"
	bandList   = "low, medium, high or critical"
	modeList   = "allow, quarantine or block"
)

// ValidBand reports whether b is one of the four bands.
func ValidBand(b Band) bool {
	return b == BandLow || b == BandMedium || b == BandHigh || b == BandCritical
}

// ValidMode reports whether m is one of the three modes.
func ValidMode(m Mode) bool { return m == ModeAllow || m == ModeQuarantine || m == ModeBlock }

func validTenant(l *errs, ref, tenant string) {
	if tenant == "" {
		l.add(CodeMissingTenant, ref, "tenant", "a tenant is required")
	} else if bus.ValidID("tenant", tenant) != nil {
		l.add(CodeBadTenant, ref, "tenant", "tenant %q must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", clip(tenant))
	}
}

// validSetting checks a drift or risk setting's tenant and server, and that
// no other setting of its kind (seen) is for the same ones.
func validSetting(l *errs, ref, kind, tenant, server string, seen map[[2]string]bool) {
	validTenant(l, ref, tenant)
	validServer(l, ref, server)
	if seen[[2]string{tenant, server}] {
		l.add(CodeDuplicateSetting, ref, "", "a second %s setting for tenant %q and server %q", kind, tenant, server)
	}
	seen[[2]string{tenant, server}] = true
}

func validServer(l *errs, ref, server string) {
	if server != "" && bus.ValidID("server", server) != nil {
		l.add(CodeBadServer, ref, "server", "server %q must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", clip(server))
	}
}

// validGlob checks a server glob (the name rules plus * and ?) or a tool or
// agent glob (any printable characters).
func validGlob(l *errs, ref, field, g string, server bool) {
	if g == "" {
		return
	}
	if len(g) > maxGlobLength {
		l.add(CodeBadGlob, ref, field, "the %s glob is %d bytes, over the limit of %d", field, len(g), maxGlobLength)
		return
	}
	for _, r := range g {
		if r == '*' || r == '?' {
			continue
		}
		if server && !(r == '_' || r == '-' || r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			l.add(CodeBadGlob, ref, field, "server glob %q: a server name is A-Z, a-z, 0-9, _ and -, with * and ? as wildcards", clip(g))
			return
		}
		if !unicode.IsPrint(r) {
			l.add(CodeBadGlob, ref, field, "%s glob %q holds a character that is not printable", field, clip(g))
			return
		}
	}
}

func clip(s string) string {
	if len(s) > 70 {
		return s[:70] + "..."
	}
	return s
}

// clause is a compiled argument clause.
type clause struct {
	path     []step
	op       Op
	not      bool
	val      value          // eq, contains
	vals     []value        // in
	re       *regexp.Regexp // regex
	prefixes []netip.Prefix // cidr_match
	num      decimal        // gt, lt
}

// compileClause checks and compiles c; its errors are *Error with Field
// relative to the clause (path, op, value).
func compileClause(c *Clause, skipValue bool) (clause, error) {
	out := clause{op: c.Op, not: c.Not}
	steps, msg := parsePath(c.Path)
	if c.Path == "" {
		msg = "a clause needs a path, such as $.query"
	}
	var first error
	bad := func(code, field, format string, args ...any) {
		if first == nil {
			first = &Error{Code: code, Field: field, Msg: fmt.Sprintf(format, args...)}
		}
	}
	if msg != "" {
		bad(CodeBadPath, "path", "%q: %s", clip(c.Path), msg)
	}
	out.path = steps
	if skipValue {
		return out, first
	}
	switch c.Op {
	case OpEq, OpContains:
		v, err := compileValue(c.Value)
		if err != nil {
			bad(CodeBadValue, "value", "%v", err)
		}
		out.val = v
	case OpIn:
		list, ok := c.Value.([]any)
		if !ok || len(list) == 0 {
			bad(CodeBadValue, "value", "in takes a non-empty list of values")
			break
		}
		if len(list) > MaxValues {
			bad(CodeTooLarge, "value", "%d values, over the limit of %d", len(list), MaxValues)
			break
		}
		for _, e := range list {
			v, err := compileValue(e)
			if err != nil {
				bad(CodeBadValue, "value", "%v", err)
				break
			}
			out.vals = append(out.vals, v)
		}
	case OpRegex:
		s, ok := c.Value.(string)
		if !ok {
			bad(CodeBadValue, "value", "regex takes a string (an RE2 expression)")
			break
		}
		if len(s) > MaxPattern {
			bad(CodeTooLarge, "value", "the regex is %d bytes, over the limit of %d", len(s), MaxPattern)
			break
		}
		re, err := regexp.Compile(s)
		if err != nil {
			bad(CodeBadRegex, "value", "%v", err)
			break
		}
		out.re = re
	case OpCIDRMatch:
		var list []any
		switch x := c.Value.(type) {
		case string:
			list = []any{x}
		case []any:
			list = x
		}
		if len(list) == 0 {
			bad(CodeBadValue, "value", "cidr_match takes a CIDR, or a list of CIDRs, such as 10.0.0.0/8")
			break
		}
		if len(list) > MaxValues {
			bad(CodeTooLarge, "value", "%d values, over the limit of %d", len(list), MaxValues)
			break
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				bad(CodeBadCIDR, "value", "cidr_match takes CIDRs as strings, not %T", e)
				break
			}
			p, err := parsePrefix(s)
			if err != nil {
				bad(CodeBadCIDR, "value", "%q is no CIDR (such as 10.0.0.0/8 or fd00::/8) or address", clip(s))
				break
			}
			out.prefixes = append(out.prefixes, p)
		}
	case OpGt, OpLt:
		v, err := compileValue(c.Value)
		if err != nil || v.kind != canonjson.Number {
			bad(CodeBadValue, "value", "%s takes a number", c.Op)
			break
		}
		out.num = v.num
	case "":
		bad(CodeBadOp, "op", "a clause needs an op (eq, contains, regex, in, cidr_match, gt, lt)")
	default:
		bad(CodeBadOp, "op", "unknown op %q (want eq, contains, regex, in, cidr_match, gt or lt)", clip(string(c.Op)))
	}
	return out, first
}

// parsePrefix reads a CIDR, or an address as the prefix of that one
// address; IPv4-mapped IPv6 is read as IPv4.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("bad address %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
