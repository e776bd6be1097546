package e2e

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Both tools of the approve-items server, changed (the rug pull), with
// nothing in them that the adversarial suite counts as hostile: once
// approved, an agent may read them.
const (
	toolReadV2 = `{"name":"read","description":"Read a file, as UTF-8 text.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}}`
	toolRugV2  = `{"name":"rug","description":"Ship the next release, signed.","inputSchema":{"type":"object"}}`
)

// TestApproveItemsE2E: a per-item approve through the real commands (NATS,
// fingerprint, drift with its admin API, the proxy on stdio, driftctl) with
// the TypeScript SDK as the agent, on the adversarial suite's harness.
//
// The upstream's two tools, read and rug, both change at once (the rug
// pull). Under the default posture (on_drift: block) a changed server is
// withheld whole, so the test asserts, in order:
//
//  1. driftctl approve --item tool:read of the live hash makes baseline v2
//     (read's new definition, rug's old one): the server stays changed, with
//     reason approved_items, and the agent is still refused read
//     (server_changed) and listed neither new definition: the remaining
//     difference, rug, keeps the whole server closed.
//  2. Naming read again is refused (item_unchanged): it is no longer a
//     difference.
//  3. driftctl approve --item tool:rug makes baseline v3, which is the live
//     manifest: verified, and the agent is served exactly the approved
//     definitions (read's and rug's new descriptions) and its call of read
//     reaches the upstream.
//
// What an agent is served while only some items are approved under
// on_drift: withhold_changed is that posture's test, not this one's.
func TestApproveItemsE2E(t *testing.T) {
	var pulled atomic.Bool
	runAdversarial(t, []advCase{{
		name: "approve_items_rug_pull_stdio", transport: advStdio, client: "ts", class: "per-item approve",
		setup: func(u *upstream) {
			u.hook = func(u *upstream, m upMsg) *reply {
				if m.Method == "tools/list" && pulled.Load() {
					return &reply{msgs: [][]byte{rpcResult(m.ID, `{"tools":[`+toolReadV2+`,`+toolRugV2+`]}`)}}
				}
				return nil
			}
		},
		run: func(x *advRun) {
			// The rug pull: both tools change, and the server announces it
			// (tools/list_changed), which makes the proxy list again.
			pulled.Store(true)
			x.u.push(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			x.waitStatus("changed")
			live := x.show().Variants[0].Record.LiveHash
			x.Logf("live hash after the rug pull: %s", live)

			out, err := x.driftctl("approve", "--hash", live, "--item", "tool:read", "default", x.serverID)
			if err != nil {
				x.Fatalf("driftctl approve --item tool:read: %v %.600s", err, out)
			}
			if rec := x.show().Variants[0].Record; rec.Status != "changed" || rec.BaselineVersion != 2 || rec.Reason != "approved_items" || rec.LiveHash != live {
				x.Fatalf("after approving read alone: %+v; want changed at baseline v2 (approved_items), live %s", rec, live)
			}
			out, err = x.driftctl("approve", "--hash", live, "--item", "tool:read", "default", x.serverID)
			if err == nil || !strings.Contains(out, "driftctl: item_unchanged:") {
				x.Fatalf("naming read again: %v %.600s; want item_unchanged", err, out)
			}
			// Still withheld whole: the proxy refuses read, and lists
			// neither new definition. The server is changed from the rug
			// pull until rug is approved too, so this holds whether or not
			// the proxy has the first approve's verdict yet.
			res := x.a.(*tsAgent).do(map[string]any{"op": "call", "name": "read", "args": map[string]any{}})
			var refused struct {
				IsError bool `json:"isError"`
				Meta    struct {
					Code string `json:"mcpdrift/code"`
				} `json:"_meta"`
			}
			if err := tsErr(res); err != nil || json.Unmarshal(res["result"], &refused) != nil || !refused.IsError || refused.Meta.Code != "server_changed" {
				x.Fatalf("read while rug is unapproved: %s %v; want a tool error with code server_changed", res["result"], err)
			}
			tools, err := x.a.listTools()
			if err != nil || tools["read"] == "Read a file, as UTF-8 text." || tools["rug"] == "Ship the next release, signed." {
				x.Fatalf("listed while rug is unapproved: %v %v; want neither new definition", tools, err)
			}

			out, err = x.driftctl("approve", "--hash", live, "--item", "tool:rug", "default", x.serverID)
			if err != nil {
				x.Fatalf("driftctl approve --item tool:rug: %v %.600s", err, out)
			}
			if rec := x.show().Variants[0].Record; rec.Status != "verified" || rec.BaselineVersion != 3 || rec.BaselineHash != live {
				x.Fatalf("after approving rug too: %+v; want verified at baseline v3 = %s", rec, live)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				tools, err = x.a.listTools()
				if err == nil && len(tools) == 2 && tools["read"] == "Read a file, as UTF-8 text." && tools["rug"] == "Ship the next release, signed." {
					break
				}
				if time.Now().After(deadline) {
					x.Fatalf("the approved definitions were never served: %v %v", tools, err)
				}
				time.Sleep(150 * time.Millisecond)
			}
			text, isErr, err := x.a.call("read")
			if err != nil || isErr || text != "ok read" {
				x.Fatalf("read after the approve: %q %v %v; want the upstream's answer", text, isErr, err)
			}
		},
	}})
}

// shown is what the case reads of driftctl show.
type shown struct {
	Variants []struct {
		Record struct {
			Status          string `json:"status"`
			Reason          string `json:"reason"`
			BaselineVersion int64  `json:"baseline_version"`
			BaselineHash    string `json:"baseline_hash"`
			LiveHash        string `json:"live_hash"`
		} `json:"record"`
	} `json:"variants"`
}

// show reads the case's server with driftctl show.
func (x *advRun) show() shown {
	out, err := x.driftctl("show", "default", x.serverID)
	var s shown
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || len(s.Variants) != 1 {
		x.Fatalf("driftctl show default %s: %v %.600s", x.serverID, err, out)
	}
	return s
}

// TestApproveItemsWithholdChanged: the same rug pull and per-item approve
// with the drift service under on_drift: withhold_changed. After approve
// --item tool:read, the server is still changed but serves its items equal
// to the new baseline: the agent is listed read's approved new definition
// and its call reaches the upstream, while rug (changed, not approved) is
// neither listed nor callable (tool_not_approved). After rug is approved
// too, both are served.
func TestApproveItemsWithholdChanged(t *testing.T) {
	var pulled atomic.Bool
	runAdversarial(t, []advCase{{
		name: "approve_items_withhold_changed_stdio", transport: advStdio, client: "ts", class: "per-item approve",
		setup: func(u *upstream) {
			u.hook = func(u *upstream, m upMsg) *reply {
				if m.Method == "tools/list" && pulled.Load() {
					return &reply{msgs: [][]byte{rpcResult(m.ID, `{"tools":[`+toolReadV2+`,`+toolRugV2+`]}`)}}
				}
				return nil
			}
		},
		run: func(x *advRun) {
			pulled.Store(true)
			x.u.push(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			x.waitStatus("changed")
			live := x.show().Variants[0].Record.LiveHash
			if out, err := x.driftctl("approve", "--hash", live, "--item", "tool:read", "default", x.serverID); err != nil {
				x.Fatalf("driftctl approve --item tool:read: %v %.600s", err, out)
			}
			if rec := x.show().Variants[0].Record; rec.Status != "changed" || rec.BaselineVersion != 2 || rec.Reason != "approved_items" {
				x.Fatalf("after approving read alone: %+v; want changed at baseline v2 (approved_items)", rec)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				tools, err := x.a.listTools()
				if err == nil && tools["read"] == "Read a file, as UTF-8 text." {
					if _, ok := tools["rug"]; ok {
						x.Fatalf("rug's unapproved definition is listed: %v", tools)
					}
					break
				}
				if time.Now().After(deadline) {
					x.Fatalf("read's approved definition was never served while rug waits: %v %v", tools, err)
				}
				time.Sleep(150 * time.Millisecond)
			}
			if text, isErr, err := x.a.call("read"); err != nil || isErr || text != "ok read" {
				x.Fatalf("read after its approve: %q %v %v; want the upstream's answer", text, isErr, err)
			}
			res := x.a.(*tsAgent).do(map[string]any{"op": "call", "name": "rug", "args": map[string]any{}})
			var refused struct {
				IsError bool `json:"isError"`
				Meta    struct {
					Code string `json:"mcpdrift/code"`
				} `json:"_meta"`
			}
			if err := tsErr(res); err != nil || json.Unmarshal(res["result"], &refused) != nil || !refused.IsError || refused.Meta.Code != "tool_not_approved" {
				x.Fatalf("rug while unapproved: %s %v; want a tool error with code tool_not_approved", res["result"], err)
			}

			if out, err := x.driftctl("approve", "--hash", live, "--item", "tool:rug", "default", x.serverID); err != nil {
				x.Fatalf("driftctl approve --item tool:rug: %v %.600s", err, out)
			}
			deadline = time.Now().Add(20 * time.Second)
			for {
				tools, err := x.a.listTools()
				if err == nil && len(tools) == 2 && tools["read"] == "Read a file, as UTF-8 text." && tools["rug"] == "Ship the next release, signed." {
					break
				}
				if time.Now().After(deadline) {
					x.Fatalf("the approved definitions were never both served: %v %v", tools, err)
				}
				time.Sleep(150 * time.Millisecond)
			}
		},
	}}, "MCPDRIFT_ON_DRIFT=withhold_changed")
}
