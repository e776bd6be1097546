package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/canonjson"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/jsonrpc"
)

// openMethods are requests that carry nothing of the server's advertised
// surface to the client, or whose answers the proxy judges item by item
// (the listings): they pass whatever the server's status. Every other
// request (prompts/get, resources/read, completion/complete, tasks, methods
// of later revisions) reaches only a server the proxy serves.
var openMethods = map[string]bool{
	jsonrpc.MethodInitialize: true, jsonrpc.MethodDiscover: true, jsonrpc.MethodPing: true, jsonrpc.MethodSetLevel: true,
	jsonrpc.MethodToolsList: true, jsonrpc.MethodPromptsList: true, jsonrpc.MethodResourcesList: true, jsonrpc.MethodResourceTemplatesList: true,
	jsonrpc.MethodResourcesUnsubscribe: true, jsonrpc.MethodSubscriptionsListen: true,
}

// Client decides on one message from the client (a batch element by
// element), as the transport split it (jsonrpc.Split: what cannot be split
// is the transport's to refuse, in its own way), and says what to send
// where: the one way a client's message reaches the server.
func (s *Session) Client(ctx context.Context, raw []byte, msgs []*jsonrpc.Message, batch bool) Decision {
	if batch {
		return s.clientBatch(ctx, raw, msgs)
	}
	m := msgs[0]
	v := s.clientMessage(ctx, m)
	switch {
	case v.refusal != nil:
		return Decision{ToClient: v.refusal}
	case v.drop:
		return Decision{}
	case v.held != nil:
		return Decision{later: v.held}
	case v.forward != nil:
		return Decision{ToServer: v.forward}
	}
	o := Decision{ToServer: raw, Opened: m.Kind == jsonrpc.KindNotification && m.Method == jsonrpc.MethodInitialized}
	if o.Opened {
		s.WillList()
	}
	return o
}

func (s *Session) clientBatch(ctx context.Context, raw []byte, msgs []*jsonrpc.Message) Decision {
	var refusals [][]byte
	var forward [][]byte
	opened, dropped, rewritten := false, false, false
	for _, m := range msgs {
		v := s.clientMessage(ctx, m)
		if v.held != nil {
			// The answers of a batch go back together: one element cannot
			// wait for an admin apart from the others.
			s.observe(Call{Tool: stringParam(m, "name"), Refused: true, RefusalCode: PolicyApprovalInBatch})
			v.refusal = ToolError(m.ID, PolicyApprovalInBatch, "policy deny: this call needs an admin's approval, which a call inside a JSON-RPC batch cannot wait for; send it on its own.")
		}
		switch {
		case v.refusal != nil:
			refusals = append(refusals, v.refusal)
		case v.drop:
			dropped = true
		case v.forward != nil:
			rewritten = true
			forward = append(forward, v.forward)
		default:
			forward = append(forward, m.Raw)
			opened = opened || (m.Kind == jsonrpc.KindNotification && m.Method == jsonrpc.MethodInitialized)
		}
	}
	if opened {
		s.WillList()
	}
	if len(refusals) == 0 && !dropped && !rewritten {
		return Decision{ToServer: raw, Opened: opened} // untouched
	}
	o := Decision{Opened: opened}
	if len(refusals) > 0 {
		o.ToClient = joinBatch(refusals)
	}
	if len(forward) > 0 {
		o.ToServer = joinBatch(forward)
	}
	return o
}

// clientMessage records what the proxy must answer for and returns a
// refusal to send instead of forwarding, drop when the message is
// neither forwarded nor answered (a request sent as a notification, which
// has no id to answer), other bytes to forward in its place (a call the
// policy sanitizes), or a call held for approval.
func (s *Session) clientMessage(ctx context.Context, m *jsonrpc.Message) verdict {
	switch m.Kind {
	case jsonrpc.KindNotification:
		// A request method without an id would reach the server unjudged
		// (a tools/call the proxy never decided on): only notifications
		// are notifications.
		return verdict{drop: !strings.HasPrefix(m.Method, jsonrpc.NotificationPrefix)}
	case jsonrpc.KindResponse:
		return verdict{} // the client's answers to the server's requests
	}
	var tool, digest, twin string
	var rawArgs, args []byte
	if m.Method == jsonrpc.MethodToolsCall {
		tool, digest, rawArgs, args, twin = callOf(m, s.cfg.FullArguments)
	} else {
		twin = foldTwin(m)
	}
	if s.reqs.inFlight(m.ID) {
		return s.reusedID(m, Call{Tool: tool, ArgsDigest: digest, Arguments: args})
	}
	if twin != "" {
		text := "mcpdrift withheld this request: its params have member names that differ only in case (" + twin + "), which servers read in different ways."
		if m.Method == jsonrpc.MethodToolsCall {
			s.observe(Call{Tool: tool, Refused: true, RefusalCode: RefuseAmbiguous, ArgsDigest: digest, Arguments: args})
			return verdict{refusal: ToolError(m.ID, RefuseAmbiguous, text)}
		}
		return verdict{refusal: Reply(m.ID, RefuseAmbiguous, text)}
	}
	if s.cfg.Follow != nil && m.Method != jsonrpc.MethodInitialize && m.Method != jsonrpc.MethodDiscover && metaNames(m.Params) {
		// A stateless request names its variant itself: what it is listed
		// is reported in that variant (reportFollowed).
		s.mu.Lock()
		s.variant = variantOf(m)
		s.mu.Unlock()
	}
	switch {
	case m.Method == jsonrpc.MethodInitialize || m.Method == jsonrpc.MethodDiscover:
		s.mu.Lock()
		s.variant = variantOf(m)
		s.mu.Unlock()
		if !s.reqs.addClient(m.ID, pendingReq{method: m.Method}) {
			return s.reusedID(m, Call{})
		}
	case listKinds[m.Method] != 0:
		if !s.reqs.addClient(m.ID, pendingReq{method: m.Method, kind: listKinds[m.Method]}) {
			return s.reusedID(m, Call{})
		}
		s.mu.Lock()
		if stringParam(m, "cursor") == "" {
			s.startListing(listKinds[m.Method], byClient)
		} else if a := &s.kinds[listKinds[m.Method]].listing[byClient]; a.builder == nil {
			// A later page without its first in this session (a retry, a
			// cursor kept from before): judged on its own, and no listing
			// of the server's (finishListing).
			s.startListing(listKinds[m.Method], byClient)
			a.headless = true
		}
		s.mu.Unlock()
	case m.Method == jsonrpc.MethodToolsCall:
		code, text, alert, risk, partial := s.decide(ctx, surface.KindTool, tool)
		code, text, alert, risk, partial = s.checkLinks(ctx, tool, code, text, alert, risk, partial)
		if code != "" {
			s.observe(Call{Tool: tool, Refused: true, RefusalCode: code, ArgsDigest: digest, Arguments: args})
			return verdict{refusal: ToolError(m.ID, code, text)}
		}
		p := pendingReq{method: m.Method, tool: tool, start: time.Now(), digest: digest, args: args, alert: alert, partial: partial}
		var v verdict
		if s.cfg.Policy != nil {
			p.rawArgs = rawArgs
			if v = s.enforce(ctx, m, rawArgs, risk, &p); v.refusal != nil || v.held != nil {
				return v
			}
			p.rawArgs = nil
		}
		if !s.reqs.addClient(m.ID, p) {
			return s.reusedID(m, Call{Tool: tool, ArgsDigest: digest, Arguments: args, Policy: p.policy})
		}
		return v
	default:
		if code, text := s.decideOther(ctx, m); code != "" {
			return verdict{refusal: Reply(m.ID, code, text)}
		}
		p := pendingReq{method: m.Method}
		switch m.Method {
		case jsonrpc.MethodResourcesRead:
			if uri := stringParam(m, "uri"); s.isUI(uri) {
				p.got = gotKey{surface.KindUIContent, uri} // its answer shows a UI: judged (uiAnswer)
			}
		case jsonrpc.MethodPromptsGet:
			if name := stringParam(m, "name"); s.isNoArgPrompt(name) || s.pinsMessages(ctx, name) {
				p.got = gotKey{surface.KindPromptMessages, name} // its messages are pinned: judged (uiAnswer)
			}
		}
		if !s.reqs.addClient(m.ID, p) {
			return s.reusedID(m, Call{})
		}
	}
	return verdict{}
}

// reusedID refuses request m, whose id is that of a request of the
// client's still in flight (request_ambiguous): the server's answer would
// be taken for either's, and judged as the wrong one's (a listing as a
// ping's answer, unfiltered). A tools/call is refused with a tool error,
// and observed as refused (c).
func (s *Session) reusedID(m *jsonrpc.Message, c Call) verdict {
	text := "mcpdrift withheld this request: its id is that of another request of this session still in flight, so the server's answer could be taken for either's. Give each request in flight an id of its own."
	if m.Method == jsonrpc.MethodToolsCall {
		c.Refused, c.RefusalCode = true, RefuseAmbiguous
		s.observe(c)
		return verdict{refusal: ToolError(m.ID, RefuseAmbiguous, text)}
	}
	return verdict{refusal: Reply(m.ID, RefuseAmbiguous, text)}
}

// decideOther decides on a request that is neither a listing nor a call:
// prompts/get and resources/read (and subscribe) name an item, judged like
// a tool; any other request that is not open reaches only a server that is
// served.
func (s *Session) decideOther(ctx context.Context, m *jsonrpc.Message) (code Code, text string) {
	if openMethods[m.Method] {
		return "", ""
	}
	switch m.Method {
	case jsonrpc.MethodPromptsGet:
		code, text, _, _, _ = s.decide(ctx, surface.KindPrompt, stringParam(m, "name"))
	case jsonrpc.MethodResourcesRead, jsonrpc.MethodResourcesSubscribe:
		code, text, _, _, _ = s.decide(ctx, surface.KindResource, stringParam(m, "uri"))
	default:
		code, text, _, _, _ = s.decide(ctx, 0, "")
	}
	return code, text
}

// decide returns a refusal code and text for a request naming item name of
// kind (a tools/call, prompts/get or resources/read; kind 0 for a request
// that names no item), or "" to forward; alert is the code a request
// forwarded under the alert posture would have been refused with under
// block ("" when the baseline approves it); risk is the server's risk mode
// (View.RiskMode) of a request it forwards; partial says that it forwards
// it under withhold_changed while the server differs from its baseline
// (the item is unchanged: decideWithheld).
func (s *Session) decide(ctx context.Context, kind surface.Kind, name string) (code Code, text string, alert Code, risk string, partial bool) {
	judge := s.judge()
	if !judge.waitRelisted(ctx, kind) {
		return RefuseListingPending, fmt.Sprintf("mcpdrift withheld this request: server %q announced a change of what it offers and the proxy's check of it has not completed. Retry shortly.", s.cfg.Server), "", "", false
	}
	judge.mu.Lock()
	variant := judge.variant
	live, seen := judge.live[ItemKey{kind, name}]
	awaiting := judge.published[variant] || judge.assembling
	judge.mu.Unlock()
	_, listErr := judge.tools.state()
	if listErr != "" && kind == surface.KindTool {
		// Whatever the verdict and the posture: the server's surface is not a surface.
		return RefuseListingInvalid, fmt.Sprintf("mcpdrift withheld this call: the tools listing of server %q could not be assembled (%s), so none of its tools can be trusted. The server must be fixed; the proxy lists it again when it announces a change.", s.cfg.Server, listErr), "", "", false
	}
	hashedWith := judge.hashOptions()
	v, ok := s.view(ctx, variant, awaiting)
	if judge.hashOptions() != hashedWith {
		// The view brought other hashing settings: the live items were
		// hashed again (adoptHashing).
		judge.mu.Lock()
		live, seen = judge.live[ItemKey{kind, name}]
		judge.mu.Unlock()
	}
	drifted := judge.tools.driftedFrom(v, ok)
	switch {
	case !ok:
		return RefuseServerUnknown, fmt.Sprintf("mcpdrift withheld this request: there is no verdict on server %q yet, so it is not trusted. Retry shortly (the proxy publishes what the server advertises once the session is initialized and lists it); if it persists an admin must check the drift service.", s.cfg.Server), "", "", false
	case !v.Serve:
		return RefuseServer(v.Status), fmt.Sprintf("mcpdrift withheld this request: server %q is %s. An admin must review it and approve its manifest (driftctl show, then driftctl approve --hash) before it can be used.", s.cfg.Server, v.Status), "", "", false
	case drifted && !v.Withhold:
		if v.Alert {
			return "", "", RefuseServerChanged, v.RiskMode, false
		}
		return RefuseServerChanged, fmt.Sprintf("mcpdrift withheld this request: server %q now advertises a manifest that differs from the approved one. An admin must review and approve it before its tools can be used.", s.cfg.Server), "", "", false
	}
	if v.Withhold && (drifted || v.Status != string(status.Verified)) {
		code, text, risk = s.decideWithheld(ctx, v, kind, name)
		return code, text, "", risk, code == ""
	}
	if kind == 0 {
		return "", "", "", v.RiskMode, false
	}
	approved, inBaseline := v.Items[ItemKey{kind, name}]
	var refused Code
	switch kind {
	case surface.KindTool:
		if !inBaseline || (seen && live != approved) {
			refused = RefuseToolNotApproved
		}
	case surface.KindPrompt:
		if !inBaseline || (seen && live != approved) {
			refused = RefusePromptNotApproved
		}
	case surface.KindResource:
		// A resource the server lists is served only as approved; one it
		// does not list (read through a template) is the server's data,
		// but for a UI (ui://), which a host renders: only one the
		// baseline lists is ever served.
		if seen && (!inBaseline || live != approved) || !inBaseline && s.isUI(name) {
			refused = RefuseResourceNotApproved
		}
	}
	switch {
	case refused == "":
		return "", "", "", v.RiskMode, false
	case v.Alert:
		return "", "", refused, v.RiskMode, false
	}
	return refused, notApprovedText(kind, name, s.cfg.Server), "", "", false
}

func notApprovedText(kind surface.Kind, name, server string) string {
	return fmt.Sprintf("mcpdrift withheld this request: %s %q of server %q is not in its approved manifest (new or changed). An admin must review and approve it first.", kindWord[kind], name, server)
}

// decideWithheld decides under the withhold_changed posture while the
// server differs from its baseline (its record is changed, or the
// session's listing differs): an item is served only when the server's
// last complete listing of its kind, and every page of it seen since,
// shows it with the baseline's hash, so that changed, added and removed
// items are all refused with their kind's not-approved code. A resource
// the server does not list (read through a template) is served only while
// every resource template is the baseline's. The whole server is withheld
// (server_changed) when the instructions the server gave the session are
// not the baseline's, and so is every request that names no item
// (completion, tasks, later methods): it cannot be told which item it
// serves.
func (s *Session) decideWithheld(ctx context.Context, v View, kind surface.Kind, name string) (code Code, text string, risk string) {
	if !s.instructionsKept(v) {
		return RefuseServerChanged, fmt.Sprintf("mcpdrift withheld this request: server %q now gives instructions that differ from the approved ones, which speak for every tool, so none of it can be used. An admin must review and approve its manifest first.", s.cfg.Server), ""
	}
	if kind == 0 {
		return RefuseServerChanged, fmt.Sprintf("mcpdrift withheld this request: server %q now advertises a manifest that differs from the approved one; only its unchanged tools, prompts and resources can be used until an admin approves it, and this request names none of them.", s.cfg.Server), ""
	}
	judge := s.judge()
	if kind == surface.KindTool {
		if last, listErr := judge.tools.state(); last == nil && listErr == "" {
			// No complete tools listing yet: the one under way says what
			// is live (ListAll lists every kind once the session opens).
			wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			judge.WaitToolsListed(wctx)
			cancel()
		}
	}
	key := ItemKey{kind, name}
	approved, inBaseline := v.Items[key]
	var last map[string]surface.Digest
	if kind == surface.KindTool {
		last, _ = judge.tools.state()
	}
	judge.mu.Lock()
	pageHash, onPage := judge.live[key]
	if kind != surface.KindTool {
		last = judge.kinds[kind].lastItems
	}
	listedHash, listed := last[name]
	judge.mu.Unlock()
	kept := inBaseline && listed && listedHash == approved && onPage && pageHash == approved
	var refused Code
	switch kind {
	case surface.KindTool:
		if !kept {
			refused = RefuseToolNotApproved
		}
	case surface.KindPrompt:
		if !kept {
			refused = RefusePromptNotApproved
		}
	case surface.KindResource:
		known := onPage || listed || inBaseline
		if known && !kept || !known && (!s.templatesKept(v) || s.isUI(name)) {
			refused = RefuseResourceNotApproved
		}
	default:
		refused = RefuseServerChanged
	}
	if refused != "" {
		return refused, notApprovedText(kind, name, s.cfg.Server), ""
	}
	return "", "", v.RiskMode
}

// instructionsKept reports whether the instructions the server gave the
// session that judges this one (its initialize result) are the
// baseline's in v: the same item hash, or none in either. An initialize
// result not seen, or not readable, keeps nothing.
func (s *Session) instructionsKept(v View) bool {
	init := s.judge().init.result()
	if init == nil {
		return false
	}
	b := surface.NewBuilder(v.Hashing)
	if b.AddInitialize(init) != nil {
		return false
	}
	items := b.LastPage()
	approved, ok := v.Items[ItemKey{surface.KindInstructions, ""}]
	switch len(items) {
	case 0:
		return !ok
	case 1:
		return ok && items[0].Hash == approved
	}
	return false
}

// templatesKept reports whether the last complete resource templates
// listing of the session that judges this one is the baseline's: the
// same templates, each with the baseline's hash.
func (s *Session) templatesKept(v View) bool {
	judge := s.judge()
	judge.mu.Lock()
	live := judge.kinds[surface.KindResourceTemplate].lastItems
	judge.mu.Unlock()
	if live == nil {
		return false
	}
	n := 0
	for k, h := range v.Items {
		if k.Kind != surface.KindResourceTemplate {
			continue
		}
		n++
		if lh, ok := live[k.Name]; !ok || lh != h {
			return false
		}
	}
	return n == len(live)
}

var kindWord = map[surface.Kind]string{surface.KindTool: "tool", surface.KindPrompt: "prompt", surface.KindResource: "resource"}

// foldTwin names two members of the params object that differ only in
// case, or returns "".
func foldTwin(m *jsonrpc.Message) string {
	d, p, ok := m.ParamsObject()
	if !ok {
		return ""
	}
	if a, b, ok := d.FoldTwin(p); ok {
		return fmt.Sprintf("%q and %q", a, b)
	}
	return ""
}

// stringParam returns the string member key of m's params (a name, a
// uri, a cursor), or "".
func stringParam(m *jsonrpc.Message, key string) string {
	d, p, ok := m.ParamsObject()
	if !ok {
		return ""
	}
	if v, ok := d.Get(p, key); ok && d.Kind(v) == canonjson.String {
		return d.Text(v)
	}
	return ""
}
