package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// TestWithholdChanged runs the drift service with MCPDRIFT_ON_DRIFT=
// withhold_changed behind the real proxy command, with the TypeScript SDK
// agent, on stdio and Streamable HTTP:
//
//   - a rug pull that changes one tool (read) and adds another (exfil):
//     the status record and its verdict say changed (served, under
//     withhold_changed), the agent keeps listing and calling
//     the unchanged tool (rug), and the changed and added ones are not
//     listed and their calls are refused with tool_not_approved;
//   - a rug pull that changes only the instructions: the whole server is
//     withheld, the unchanged tools included, for the agent that was
//     connected before and for one that connects after.
//
// The upstream is never armed here (calls of unchanged tools after the
// change are legitimate); what must not reach it is checked by phase.
func TestWithholdChanged(t *testing.T) {
	var cases []advCase
	for _, transport := range []string{advStdio, advHTTP} {
		cases = append(cases,
			advCase{name: "withhold_changed_tools_" + transport, transport: transport, client: "ts", class: "withhold_changed",
				run: func(x *advRun) { x.withholdChangedTools() }},
			advCase{name: "withhold_changed_instructions_" + transport, transport: transport, client: "ts", class: "withhold_changed",
				setup: func(u *upstream) { u.hook = benignListings },
				run:   func(x *advRun) { x.withholdChangedInstructions() }},
		)
	}
	runAdversarial(t, cases, "MCPDRIFT_ON_DRIFT="+status.WithholdChanged)
}

// benignListings answers every listing with the approved surface whatever
// the phase: only the instructions (initialize) change.
func benignListings(u *upstream, m upMsg) *reply {
	switch m.Method {
	case "tools/list":
		return &reply{msgs: [][]byte{rpcResult(m.ID, benignTools)}}
	case "prompts/list":
		return &reply{msgs: [][]byte{rpcResult(m.ID, `{"prompts":[`+promptGreet+`]}`)}}
	case "resources/list":
		return &reply{msgs: [][]byte{rpcResult(m.ID, `{"resources":[`+resourceOK+`]}`)}}
	}
	return nil
}

// changeSurface switches the upstream to its rug-pulled surface without
// arming it and has the agent call the unchanged rug tool, whose answer
// announces the change (tools/list_changed): the proxy lists the tools
// again and the pipeline judges them.
func (x *advRun) changeSurface() {
	x.u.phase.Store(1)
	text, isErr, err := x.a.call("rug")
	if err != nil || isErr || text != "released" {
		x.Fatalf("the call that announces the change: %q isError=%v err=%v", text, isErr, err)
	}
}

// upstreamCalls counts the tools/call messages of tool the upstream got
// after the change (phase 1).
func (x *advRun) upstreamCalls(tool string) int {
	n := 0
	for _, m := range x.u.messages() {
		if m.Method == "tools/call" && m.Tool == tool && m.Phase == 1 {
			n++
		}
	}
	return n
}

// callCode calls tool through the TypeScript agent and returns the
// result's text, whether it is an error, and the proxy's refusal code
// (its _meta), "" when it carries none.
func (x *advRun) callCode(tool string) (text string, isErr bool, code string) {
	ts, ok := x.a.(*tsAgent)
	if !ok {
		x.Fatalf("the case needs the TypeScript agent")
	}
	out := ts.do(map[string]any{"op": "call", "name": tool, "args": map[string]any{}})
	if err := tsErr(out); err != nil {
		x.Fatalf("calling %s: %v", tool, err)
	}
	text, isErr = callText(out["result"])
	var r struct {
		Meta map[string]string `json:"_meta"`
	}
	_ = json.Unmarshal(out["result"], &r)
	return text, isErr, r.Meta["mcpdrift/code"]
}

// record reads the status record of the case server's one variant.
func (x *advRun) record() status.Record {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := x.env.js.KeyValue(ctx, bus.BucketStatus)
	if err != nil {
		x.Fatalf("status bucket: %v", err)
	}
	lister, err := kv.ListKeysFiltered(ctx, bus.StatusKey("default", x.serverID, "*"))
	if err != nil {
		x.Fatalf("listing status keys: %v", err)
	}
	var recs []status.Record
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			x.Fatalf("reading %s: %v", key, err)
		}
		r, err := status.DecodeRecord(e.Value())
		if err != nil {
			x.Fatalf("decoding %s: %v", key, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 1 {
		x.Fatalf("%d status records of %s, want 1", len(recs), x.serverID)
	}
	return recs[0]
}

// lastVerdict is the last verdict on the case's server.
func (x *advRun) lastVerdict() *mcpdriftv1.Verdict {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := x.env.js.Stream(ctx, bus.StreamVerdicts)
	if err != nil {
		x.Fatalf("verdict stream: %v", err)
	}
	m, err := st.GetLastMsgForSubject(ctx, bus.VerdictSubject("default", x.serverID))
	if err != nil {
		x.Fatalf("the last verdict on %s: %v", x.serverID, err)
	}
	v := new(mcpdriftv1.Verdict)
	if err := bus.UnmarshalJSON(m.Data, v); err != nil {
		x.Fatalf("decoding the verdict: %v", err)
	}
	return v
}

// eventually polls cond until it holds or 20s pass; what it last saw says
// why it did not.
func (x *advRun) eventually(what string, cond func() (bool, string)) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			x.Fatalf("%s never happened; last seen: %s", what, seen)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func (x *advRun) withholdChangedTools() {
	x.changeSurface()
	// The pipeline judges the new listing: changed, as under block, and
	// served (its unchanged items), the instructions found unchanged.
	x.eventually("the record turning changed and served under withhold_changed", func() (bool, string) {
		r := x.record()
		return r.Status == status.Changed && r.Policy.OnDrift == status.WithholdChanged && r.Serve(), fmt.Sprintf("%+v", r)
	})
	if r := x.record(); r.Instructions == nil || r.Instructions.Changed || r.LiveHash == r.BaselineHash {
		x.Fatalf("the record's instructions finding: %+v (live %s, baseline %s)", r.Instructions, r.LiveHash, r.BaselineHash)
	}
	// The verdict says so too: changed, served, under withhold_changed.
	if v := x.lastVerdict(); v.GetStatus() != mcpdriftv1.Status_STATUS_CHANGED || !v.GetServe() || v.GetOnDrift() != status.WithholdChanged {
		x.Fatalf("the verdict on the drift: status %s serve %v on_drift %q", v.GetStatus(), v.GetServe(), v.GetOnDrift())
	}
	// The agent keeps listing the unchanged tool, and only it.
	x.eventually("the listing keeping only the unchanged tool", func() (bool, string) {
		tools, err := x.a.listTools()
		_, rug := tools["rug"]
		return err == nil && rug && len(tools) == 1, fmt.Sprintf("%v %v", tools, err)
	})
	before := x.upstreamCalls("rug")
	if text, isErr, code := x.callCode("rug"); isErr || text != "released" || code != "" {
		x.Fatalf("the unchanged tool's call: %q isError=%v code %q", text, isErr, code)
	}
	if n := x.upstreamCalls("rug"); n != before+1 {
		x.Fatalf("the unchanged tool's call reached the upstream %d times, want once", n-before)
	}
	for _, tool := range []string{"read", "exfil"} {
		if text, isErr, code := x.callCode(tool); !isErr || code != "tool_not_approved" {
			x.Errorf("%s: %q isError=%v code %q; want refused with tool_not_approved", tool, text, isErr, code)
		}
		if n := x.upstreamCalls(tool); n != 0 {
			x.Errorf("%s reached the upstream %d times after the change", tool, n)
		}
	}
	if out, err := x.driftctl("status", "default", x.serverID); err != nil || !strings.Contains(out, "withhold_changed") || !strings.Contains(out, "changed") {
		x.Errorf("driftctl status: %v\n%s", err, out)
	}
}

func (x *advRun) withholdChangedInstructions() {
	x.u.phase.Store(1) // the next initialize gives other instructions
	// A second agent connects: the server gives it the new instructions,
	// which the proxy removes (not approved) and publishes with the rest.
	b := x.agent("ts")
	if ins := x.connect(b); ins != "" {
		x.Errorf("the second agent was given instructions: %q", ins)
	}
	if _, err := b.listTools(); err != nil {
		x.Fatalf("the second agent's listing: %v", err)
	}
	x.eventually("the record turning changed with its instructions changed", func() (bool, string) {
		r := x.record()
		return r.Status == status.Changed && r.Instructions != nil && r.Instructions.Changed && !r.Serve(), fmt.Sprintf("%+v", r)
	})
	// Every tool of the server is withheld, for both agents.
	for i, a := range []advAgent{x.a, b} {
		x.eventually(fmt.Sprintf("agent %d's listing withholding every tool", i), func() (bool, string) {
			tools, err := a.listTools()
			return err == nil && len(tools) == 0, fmt.Sprintf("%v %v", tools, err)
		})
	}
	if text, isErr, code := x.callCode("rug"); !isErr || code != "server_changed" {
		x.Errorf("the unchanged tool's call: %q isError=%v code %q; want refused with server_changed", text, isErr, code)
	}
	if text, isErr, err := b.call("rug"); err != nil || !isErr {
		x.Errorf("the second agent's call of the unchanged tool: %q isError=%v err=%v; want refused", text, isErr, err)
	}
	if n := x.upstreamCalls("rug"); n != 0 {
		x.Errorf("the unchanged tool's call reached the upstream %d times while the instructions changed", n)
	}
}
