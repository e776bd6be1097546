package fleet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

func testLog(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	eventually(t, 10*time.Second, "client still connected after the server stopped", func() bool {
		return b.NC.Status() != nats.CONNECTED
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
	eventually(t, 30*time.Second, "client did not reconnect to the restarted server", func() bool {
		return b.NC.Status() == nats.CONNECTED
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
