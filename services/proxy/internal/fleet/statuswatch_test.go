package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// statusConsumers is the number of consumers of the status bucket's stream.
func statusConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	s, err := js.Stream(context.Background(), "KV_"+bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// TestStatusWatchOneConsumer: a proxy fronting many servers holds one
// consumer of the status bucket, each gate gets its own server's records
// and no other's, a hold of one server leaves the others served, and
// fronting more servers adds no consumer.
func TestStatusWatchOneConsumer(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := b.Handles.Status.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	for _, srv := range []string{"s0", "s1", "s2", "s3", "s4", "other"} {
		put(bus.StatusKey(tenant, srv, "default"), recordJSON("verified", "block", sf))
	}
	put(bus.StatusKey("beta", "s0", "default"), recordJSON("quarantined", "block", sf))
	put(bus.ServerKey(tenant, "s1"), serverJSON(true)) // held before the watch starts

	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("servers=%d", n), func(t *testing.T) {
			before := statusConsumers(t, b.JS)
			w, err := NewStatusWatch(b.JS, tenant, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			gates := map[string]*Gate{}
			for i := range n {
				srv := fmt.Sprintf("s%d", i)
				if gates[srv], err = w.Gate(srv, testLog(t)); err != nil {
					t.Fatal(err)
				}
			}
			stop := runInBackground(t, w.Run)
			poll.Eventually(t, 10*time.Second, func() error {
				for srv, g := range gates {
					if !g.Watching() {
						return fmt.Errorf("gate %s not watching", srv)
					}
				}
				return nil
			})
			if got := statusConsumers(t, b.JS) - before; got != 1 {
				t.Errorf("%d gates: %d status consumers, want 1", n, got)
			}
			for srv, g := range gates {
				v, ok := g.View(ctx, "default", false, time.Second)
				wantServe := srv != "s1"
				if !ok || v.Serve != wantServe {
					t.Errorf("%s: %v; want serve %v", srv, seen("", v, ok), wantServe)
				}
			}
			if _, err := w.Gate("late", testLog(t)); err == nil {
				t.Error("a gate made after Run started: nil error")
			}
			stop()
			// The watch's consumer goes with it; the server deletes it
			// after the watch stopped, so wait for that before the next
			// subtest counts again.
			poll.Eventually(t, 30*time.Second, func() error {
				if got := statusConsumers(t, b.JS); got != before {
					return fmt.Errorf("%d status consumers after the watch stopped, want %d", got, before)
				}
				return nil
			})
		})
	}

	// Live updates reach the gate of their server only.
	w, err := NewStatusWatch(b.JS, tenant, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	g0, _ := w.Gate("s0", testLog(t))
	g2, _ := w.Gate("s2", testLog(t))
	runInBackground(t, w.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if !g0.Watching() || !g2.Watching() {
			return errors.New("the gates are not watching")
		}
		return nil
	})
	put(bus.ServerKey(tenant, "s2"), serverJSON(true))
	put(bus.StatusKey(tenant, "other", "default"), recordJSON("changed", "block", sf))
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g2, "default", time.Second)
		if ok && v.Status == "quarantined" && !v.Serve {
			return nil
		}
		return seen("s2 held", v, ok)
	})
	if v, ok := view(g0, "default", time.Second); !ok || !v.Serve {
		t.Errorf("s0 after s2 was held: %v; want served", seen("", v, ok))
	}
	put(bus.StatusKey(tenant, "s0", "default"), recordJSON("changed", "block", sf))
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g0, "default", time.Second)
		if ok && v.Status == "changed" && !v.Serve {
			return nil
		}
		return seen("s0 changed", v, ok)
	})
	if w.Watches() != 1 {
		t.Errorf("%d watches started, want 1", w.Watches())
	}
}

// TestStatusWatchPermissionDenied: a proxy whose NATS user may not watch
// its tenant's status keys stops with a coded error instead of retrying
// for ever; the user auth.conf describes watches.
func TestStatusWatchPermissionDenied(t *testing.T) {
	dir := t.TempDir()
	grant := func(createFilter string) string {
		return fmt.Sprintf(`{ publish = { allow = ["$JS.API.STREAM.INFO.KV_mcpdrift_status", %q, "$JS.API.CONSUMER.DELETE.KV_mcpdrift_status.*", "$JS.FC.KV_mcpdrift_status.>"] }, subscribe = { allow = ["_INBOX_proxy_acme.>"] } }`,
			"$JS.API.CONSUMER.CREATE.KV_mcpdrift_status.*.$KV.mcpdrift_status."+createFilter)
	}
	conf := fmt.Sprintf(`listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
no_auth_user: admin
accounts {
  A {
    jetstream: enabled
    users = [
      { user: admin, password: a }
      { user: proxy, password: p, permissions: %s }
      { user: stranger, password: s, permissions: %s }
    ]
  }
}
`, filepath.Join(dir, "js"), grant(tenant+".>"), grant("beta.>"))
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs, opts.Port = true, true, -1
	srv := natstest.StartWith(t, opts)
	_, adminJS := srv.Connect(t)
	if _, err := bus.Setup(context.Background(), adminJS, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	connect := func(user, pass string) jetstream.JetStream {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pass), nats.CustomInboxPrefix("_INBOX_proxy_acme"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}

	t.Run("granted", func(t *testing.T) {
		g, w := watchedGate(t, connect("proxy", "p"), tenant, "fs")
		runInBackground(t, w.Run)
		poll.Eventually(t, 20*time.Second, func() error {
			if !g.Watching() {
				return errors.New("the gate with auth.conf's grant is not watching")
			}
			return nil
		})
	})
	t.Run("refused", func(t *testing.T) {
		_, w := watchedGate(t, connect("stranger", "s"), tenant, "fs")
		w.bindTimeout = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := w.Run(ctx)
		if !errors.Is(err, ErrStatusPermission) {
			t.Fatalf("Run = %v; want %s", err, CodeStatusPermission)
		}
		if c := coded.CodeOf(err); c != CodeStatusPermission {
			t.Errorf("code %q, want %q", c, CodeStatusPermission)
		}
		if !strings.Contains(err.Error(), "auth.conf") {
			t.Errorf("the error does not say what to grant: %v", err)
		}
	})
}
