package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestAlertPostureRugPull: the drift service runs with --on-drift alert. A
// rug pull behind the proxy is drift all the same (the status record turns
// changed), but the proxy keeps serving the changed tool, and the call
// observation it publishes carries the code the block posture would have
// refused the call with.
func TestAlertPostureRugPull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	b := natstest.StartBus(t)
	url := b.Server.ClientURL()
	env := []string{"MCPDRIFT_NATS_URL=" + url, "MCPDRIFT_LOG_LEVEL=info"}
	runService(t, "fingerprint", env...)
	runService(t, "drift", append(env, "MCPDRIFT_ON_DRIFT=alert", "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=e2e:read:e2e-token-0123456789abcdef")...)

	var mu sync.Mutex
	var calls []*mcpdriftv1.CallObservation
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cons, err := b.JS.OrderedConsumer(ctx, "MCPDRIFT_OBS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"mcpdrift.obs.calls.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var b mcpdriftv1.CallObservations
		if err := proto.Unmarshal(m.Data(), &b); err != nil {
			t.Errorf("call observations unreadable: %v", err)
			return
		}
		mu.Lock()
		calls = append(calls, b.Calls...)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)

	a := startProxy(t, url, "node-1")
	a.init()
	poll.Eventually(t, wait, func() error {
		got := a.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`) && strings.Contains(got, `"name":"rug"`), "the proxy serves the approved tools", got)
	})

	// The rug pull: the server rewrites "read" and announces it.
	if got := a.call("tools/call", `{"name":"rug","arguments":{}}`); strings.Contains(got, `"isError":true`) {
		t.Fatalf("the rug call was refused: %s", got)
	}
	poll.Eventually(t, wait, func() error {
		keys, err := b.Handles.Status.ListKeys(ctx)
		if err != nil {
			return awaiting(false, "the pipeline holds the server changed", err.Error())
		}
		last := ""
		for k := range keys.Keys() {
			e, err := b.Handles.Status.Get(ctx, k)
			if err != nil || !strings.HasPrefix(k, "default.files.") {
				continue
			}
			var rec struct {
				Status string `json:"status"`
				Policy struct {
					OnDrift string `json:"on_drift"`
				} `json:"policy"`
			}
			_ = json.Unmarshal(e.Value(), &rec)
			last = string(e.Value())
			if rec.Status == "changed" && rec.Policy.OnDrift == "alert" {
				return nil
			}
		}
		return awaiting(false, "the pipeline holds the server changed", last)
	})

	// Served, changed description included, and callable.
	if got := a.call("tools/list", "{}"); !strings.Contains(got, "IMPORTANT") {
		t.Fatalf("under alert the changed tool is not listed as it is now: %s", got)
	}
	if got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x"}}`); strings.Contains(got, `"isError":true`) {
		t.Fatalf("under alert the changed tool was refused: %s", got)
	}
	poll.Eventually(t, wait, func() error {
		mu.Lock()
		defer mu.Unlock()
		var seen []string
		for _, o := range calls {
			seen = append(seen, o.GetTool()+":"+o.GetOutcome().String()+":"+o.GetAlertCode())
			if o.GetTool() == "read" && o.GetOutcome() == mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED && o.GetAlertCode() == "server_changed" {
				return nil
			}
		}
		return awaiting(false, "the call observation carries the alert code", strings.Join(seen, " "))
	})
	mu.Lock()
	defer mu.Unlock()
	for _, o := range calls {
		if o.GetTool() == "rug" && o.GetAlertCode() != "" {
			t.Errorf("the call before the drift carries alert code %q", o.GetAlertCode())
		}
	}
}
