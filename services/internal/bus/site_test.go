package bus_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// startSite runs a hub in the JetStream domain bus.HubDomain and a leaf
// node in a domain of its own linked to it, and returns their JetStream
// contexts (services/e2e TestLeafSite runs the shipped configurations).
func startSite(t *testing.T) (hub, leaf jetstream.JetStream) {
	t.Helper()
	ho := natstest.Options(t)
	ho.JetStreamDomain = bus.HubDomain
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the hub's leafnodes
	if err != nil {
		t.Fatal(err)
	}
	ho.LeafNode.Host, ho.LeafNode.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	h := natstest.StartWith(t, ho)
	lo := natstest.Options(t)
	lo.JetStreamDomain = "site1"
	u, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", ho.LeafNode.Port))
	if err != nil {
		t.Fatal(err)
	}
	lo.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}
	l := natstest.StartWith(t, lo)
	poll.Eventually(t, 10*time.Second, func() error {
		if l.NumLeafNodes() == 0 {
			return errNotYet("leaf linked to the hub")
		}
		return nil
	})
	_, hub = h.Connect(t)
	_, leaf = l.Connect(t)
	return hub, leaf
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) + ": not yet" }

// TestSiteMirrorsOneTenant: the site's buckets mirror the hub's under the
// same names, hold the tenant's keys only, and are bound and watched by
// nats.go exactly as the hub's are (what a proxy does); a second setup
// changes nothing.
func TestSiteMirrorsOneTenant(t *testing.T) {
	hub, leaf := startSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := bus.Setup(ctx, hub, bus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := bus.SetupSite(ctx, leaf, bus.SiteConfig{Tenant: "default"}); err != nil {
			t.Fatalf("SetupSite: %v", err)
		}
	}
	for _, k := range []string{"default.files.v1", "acme.files.v1", "default.files"} {
		if _, err := h.Status.Put(ctx, k, []byte(`{"status":"verified"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Policy.Put(ctx, "default", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Policy.Put(ctx, "acme", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	kv, err := leaf.KeyValue(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatalf("binding the site's status bucket: %v", err)
	}
	w, err := kv.Watch(ctx, "default.files.*")
	if err != nil {
		t.Fatalf("watching the site's status: %v", err)
	}
	defer func() { _ = w.Stop() }()
	for got := false; !got; {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue // the initial values, maybe before the mirror caught up
			}
			if e.Key() != "default.files.v1" {
				t.Fatalf("the site's watch: entry %s, want default.files.v1", e.Key())
			}
			got = true
		case <-ctx.Done():
			t.Fatal("the site's watch: nothing")
		}
	}
	poll.Eventually(t, 10*time.Second, func() error {
		keys, err := kv.Keys(ctx)
		slices.Sort(keys)
		if err != nil || strings.Join(keys, " ") != "default.files default.files.v1" {
			return errNotYet("the site's status keys are the tenant's: " + strings.Join(keys, " "))
		}
		return nil
	})
	pkv, err := leaf.KeyValue(ctx, bus.BucketPolicy)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if _, err := pkv.Get(ctx, "default"); err != nil {
			return errNotYet("the site's policy of default: " + err.Error())
		}
		return nil
	})
	if _, err := pkv.Get(ctx, "acme"); err == nil {
		t.Fatal("the site mirrors the policy of another tenant")
	}
}

// TestSiteMirrorMismatch: a bucket of the site that is not the mirror the
// setup wants is an error with a code, never silently kept or replaced.
func TestSiteMirrorMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(context.Context, jetstream.JetStream) error
	}{
		{"plain_bucket", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketStatus})
			return err
		}},
		{"other_tenant", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := bus.SetupSite(ctx, js, bus.SiteConfig{Tenant: "acme"})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := natstest.Start(t).Connect(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := tc.setup(ctx, js); err != nil {
				t.Fatal(err)
			}
			_, err := bus.SetupSite(ctx, js, bus.SiteConfig{Tenant: "default"})
			if coded.CodeOf(err) != bus.CodeSiteMirrorMismatch {
				t.Fatalf("SetupSite over %s: %v, want code %s", tc.name, err, bus.CodeSiteMirrorMismatch)
			}
		})
	}
}
