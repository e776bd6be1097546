package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestNotifyDeployment runs the notify command as it is deployed: NATS
// from deploy/nats/nats.conf, the bus set up by the admin, notify as its
// own NATS user with --bus-setup check. A verdict the drift user publishes
// and a held call the drift user stores reach a real HTTP receiver, signed;
// the notify user's rights suffice (no permission violation on the
// server), and a restart of notify delivers what was published while it
// was down.
func TestNotifyDeployment(t *testing.T) {
	d := startNATSSingle(t)
	admin := d.connect(t, "admin")
	if _, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{}); err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	var mu sync.Mutex
	got := map[string]http.Header{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ce struct{ SpecVersion, Type string }
		if json.Unmarshal(body, &ce) != nil {
			http.Error(w, "not json", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[r.Header.Get("Idempotency-Key")] = r.Header.Clone()
		mu.Unlock()
	}))
	defer recv.Close()
	bin := cmdtest.Path(t, "notify")
	start := func() (stop func()) {
		cmd := exec.Command(bin, "--webhook", recv.URL+"/ce", "--name", "siem", "--format", "cloudevents")
		cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+d.url("notify"), "MCPDRIFT_BUS_SETUP=check", "MCPDRIFT_LOG_LEVEL=info",
			"MCPDRIFT_NOTIFY_SECRET=deploy-secret")
		var logs strings.Builder
		var lmu sync.Mutex
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		scanned := make(chan struct{})
		go func() {
			defer close(scanned)
			b := make([]byte, 4096)
			for {
				n, err := stderr.Read(b)
				lmu.Lock()
				logs.Write(b[:n])
				lmu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		var once sync.Once
		stop = func() {
			once.Do(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				<-scanned
				if err := cmd.Wait(); err != nil {
					lmu.Lock()
					t.Errorf("notify exited: %v\n%s", err, logs.String())
					lmu.Unlock()
				}
			})
		}
		t.Cleanup(stop)
		// Started, and its consumers exist: they take what comes after them.
		poll.Eventually(t, 60*time.Second, func() error {
			lmu.Lock()
			text := logs.String()
			lmu.Unlock()
			if !strings.Contains(text, `"message":"notify service started"`) {
				return fmt.Errorf("notify not started; its log:\n%s", text)
			}
			for _, c := range []struct{ stream, name string }{{bus.StreamVerdicts, "notify-siem"}, {"KV_" + bus.BucketApprovals, "notify-siem-approvals"}} {
				if _, err := admin.js.Consumer(context.Background(), c.stream, c.name); err != nil {
					return fmt.Errorf("consumer %s: %v", c.name, err)
				}
			}
			return nil
		})
		return stop
	}
	drift := d.connect(t, "drift")
	publish := func(rev int) string {
		v := &mcpdriftv1.Verdict{EventId: fmt.Sprintf("verdict-default.files.v1-%d", rev), Tenant: "default", Server: "files", Variant: "v1",
			Status: mcpdriftv1.Status_STATUS_QUARANTINED, ReasonCode: "quarantined", Actor: "alice", AtUnixMs: time.Now().UnixMilli()}
		data, err := bus.MarshalJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(natsOpCtx(t, 10*time.Second), drift.js, bus.VerdictSubject("default", "files"), data, v.EventId); err != nil {
			t.Fatalf("drift publishes a verdict: %v", err)
		}
		return v.EventId
	}
	waitFor := func(keys ...string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				h, ok := got[k]
				if !ok {
					return fmt.Errorf("%s not delivered; have %d requests", k, len(got))
				}
				if !strings.HasPrefix(h.Get("X-Mcpdrift-Signature"), "sha256=") {
					return fmt.Errorf("%s not signed: %v", k, h)
				}
			}
			return nil
		})
	}

	stop := start()
	first := publish(1)
	kv, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketApprovals)
	if err != nil {
		t.Fatal(err)
	}
	id := approval.NewID()
	value, err := approval.Encode(&mcpdriftv1.Approval{Request: &mcpdriftv1.ApprovalRequest{Id: id, Tenant: "default", Server: "files",
		Proxy: "p1", Tool: "rm", RequestedAtUnixMs: time.Now().UnixMilli(), ExpiresAtUnixMs: time.Now().Add(time.Minute).UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(natsOpCtx(t, 10*time.Second), approval.Key("default", id), value); err != nil {
		t.Fatalf("drift stores a held call: %v", err)
	}
	waitFor(first, "call-held-default-"+id)
	stop()

	// Published while notify is down: delivered once it is back.
	second := publish(2)
	stop = start()
	waitFor(second)
	stop()
	d.noViolations(t)
}

// TestNotifyCrashRedelivers: notify is killed (SIGKILL) while its request
// for an event is in flight; the event was never acked, so the next
// instance delivers it (at least once): the receiver gets the same
// Idempotency-Key again.
func TestNotifyCrashRedelivers(t *testing.T) {
	b := natstest.StartBus(t)
	var mu sync.Mutex
	var keys []string
	hold := make(chan struct{})
	arrived := make(chan struct{}, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		first := len(keys) == 1
		mu.Unlock()
		arrived <- struct{}{}
		if first {
			select { // the first request hangs until its client is gone
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
	}))
	defer recv.Close()
	defer close(hold)
	bin := cmdtest.Path(t, "notify")
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--webhook", recv.URL, "--name", "crash", "--ack-wait", "3s", "--timeout", "2s", "--retry-delay", "10s")
		cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+b.ClientURL(), "MCPDRIFT_LOG_LEVEL=warn")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		poll.Eventually(t, 30*time.Second, func() error {
			_, err := b.JS.Consumer(context.Background(), bus.StreamVerdicts, "notify-crash")
			return err
		})
		return cmd
	}
	first := start()
	v := &mcpdriftv1.Verdict{EventId: "verdict-acme.files.v1-1", Tenant: "acme", Server: "files", Variant: "v1",
		Status: mcpdriftv1.Status_STATUS_CHANGED, AtUnixMs: time.Now().UnixMilli()}
	data, err := bus.MarshalJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(context.Background(), b.JS, bus.VerdictSubject("acme", "files"), data, v.EventId); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request never arrived")
	}
	if err := first.Process.Kill(); err != nil { // mid-request: nothing acked, nothing naked
		t.Fatal(err)
	}
	_ = first.Wait()
	start()
	poll.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(keys) < 2 || keys[1] != v.EventId || keys[0] != v.EventId {
			return fmt.Errorf("requests %q: want the event again after the crash", keys)
		}
		return nil
	})
}
