package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestNATSRolesPartitioned boots the single node of deploy/nats/nats.conf
// with deploy/nats/auth.conf, sets the bus up in 4 partitions as the
// admin, and consumes every partition under the fingerprint and the drift
// roles the way the services do (bus.PartitionRoutes through bus.Router:
// create, pull with a priority group, ack, unpin at shutdown); a proxy's
// observations reach the fingerprint role; a proxy may not choose a
// partition itself.
func TestNATSRolesPartitioned(t *testing.T) {
	const p = 4
	d := startNATSSingle(t)
	admin := d.connect(t, "admin")
	if _, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{Partitions: p}); err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	proxy := d.connect(t, "proxy")
	fingerprint := d.connect(t, "fingerprint") // publishes the fingerprints
	for _, role := range []struct{ name, stream, durable, filter, publish string }{
		{"fingerprint", bus.StreamObservations, bus.ConsumerFingerprint, bus.Prefix + ".obs.list.*.*", "list"},
		{"drift", bus.StreamFingerprints, bus.ConsumerDrift, bus.Prefix + ".fp.*.*", "fp"},
	} {
		t.Run(role.name, func(t *testing.T) {
			c := d.connect(t, role.name)
			var mu sync.Mutex
			got := map[string]bool{}
			cc := jetstream.ConsumerConfig{Durable: role.durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second}
			router, err := bus.NewRouter(bus.RouterConfig{
				Settle:       bus.SettleConfig{Service: role.name, MaxDeliver: 5, Timeout: 5 * time.Second, Backoff: bus.Backoff(time.Second, time.Second)},
				Routes:       bus.PartitionRoutes(role.stream, cc, 16, role.filter, p, nil),
				DrainTimeout: 5 * time.Second,
			}, bus.SettleDeps{JS: c.js, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)},
				bus.Workers(2, bus.Settling(func(_ context.Context, msg jetstream.Msg) error {
					mu.Lock()
					defer mu.Unlock()
					got[msg.Subject()] = true
					return nil
				})))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- router.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			for i := range 16 {
				server := fmt.Sprintf("s%d", i)
				var err error
				if role.publish == "list" {
					_, err = proxy.js.Publish(natsOpCtx(t, 10*time.Second), bus.ListObservationSubject("default", server), []byte("obs"))
				} else {
					_, err = fingerprint.js.Publish(natsOpCtx(t, 10*time.Second), bus.FingerprintSubject("default", server), []byte("fp"))
				}
				if err != nil {
					t.Fatalf("publishing for %s: %v", server, err)
				}
			}
			poll.Eventually(t, 20*time.Second, func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(got) != 16 {
					return fmt.Errorf("%s consumed %d subjects, want 16 (errors: %d reported)", role.name, len(got), len(c.errs))
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			done <- nil
			// Shut down, each partition it held is unpinned at once.
			for i := range p {
				info, err := c.js.Consumer(natsOpCtx(t, 10*time.Second), role.stream, bus.PartitionDurable(role.durable, i))
				if err != nil {
					t.Fatalf("consumer info of partition %d: %v", i, err)
				}
				for _, g := range info.CachedInfo().PriorityGroups {
					if g.PinnedClientID != "" {
						t.Errorf("partition %d still pinned to %s after the shutdown", i, g.PinnedClientID)
					}
				}
			}
			select {
			case err := <-c.errs:
				t.Errorf("the %s role met an error: %v", role.name, err)
			default:
			}
		})
	}
	// A proxy names no partition.
	if err := proxy.nc.Publish(bus.ListObservationSubject("default", "files")+".0", []byte("obs")); err != nil {
		t.Fatal(err)
	}
	proxy.violationLike(t, "publish", bus.Prefix+".obs.list.default.files.0")
}
