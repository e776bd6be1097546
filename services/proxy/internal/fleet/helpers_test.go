package fleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

func testLog(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
}

// watchedGate is a gate of server with a status watch of its own (the
// proxy of one server), for tests: run w.Run.
func watchedGate(t testing.TB, js jetstream.JetStream, tnt, server string) (*Gate, *StatusWatch) {
	t.Helper()
	w, err := NewStatusWatch(js, tnt, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := w.Gate(server, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return g, w
}

// seen says what a gate's view of a variant was, for a poll's error: want
// says what the test waits for.
func seen(want string, v session.View, ok bool) error {
	if !ok {
		return fmt.Errorf("want %s; the gate knows nothing of the variant", want)
	}
	return fmt.Errorf("want %s; the gate says %s (serve %v, alert %v, baseline %q, %d items)", want, v.Status, v.Serve, v.Alert, v.BaselineHash, len(v.Items))
}

// statsSeen says what a publisher's counters were, for a poll's error.
func statsSeen(want string, st Stats) error {
	return fmt.Errorf("want %s; stats %+v", want, st)
}

// runInBackground runs fn(ctx) until the test ends, and waits for it.
func runInBackground(t testing.TB, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return 30s after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// stopBus stops the server of b and waits until the client noticed.
func stopBus(t *testing.T, b *natstest.Bus) (port int) {
	t.Helper()
	port = b.Addr().(*net.TCPAddr).Port
	b.Stop()
	poll.Eventually(t, 10*time.Second, func() error {
		if st := b.NC.Status(); st == nats.CONNECTED {
			return fmt.Errorf("the server stopped; the client is still %v", st)
		}
		return nil
	})
	return port
}

// restartBus starts a server on the store and port of the stopped b and
// waits until b's connection is back.
func restartBus(t *testing.T, b *natstest.Bus, port int) {
	t.Helper()
	opts := natstest.Options(t)
	opts.StoreDir = b.StoreDir
	opts.Port = port
	natstest.StartWith(t, opts)
	poll.Eventually(t, 30*time.Second, func() error {
		if st := b.NC.Status(); st != nats.CONNECTED {
			return fmt.Errorf("the server restarted; the client is %v", st)
		}
		return nil
	})
}

// fixture returns a real capture and its surface.
func fixture(t testing.TB, name string) ([]byte, *surface.Surface) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "internal", "surface", "testdata", "real", name))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	sf, err := surface.Parse(raw, surface.Options{})
	if err != nil {
		t.Fatalf("parsing fixture %s: %v", name, err)
	}
	return raw, sf
}
