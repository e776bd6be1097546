// Package natstest runs a real nats-server with JetStream in-process for
// tests: one per test, on a random loopback port, storing under t.TempDir(),
// shut down by t.Cleanup.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Server is a running in-process nats-server.
type Server struct {
	*server.Server
	StoreDir string
}

// Options returns the options Start uses, for tests that need to adjust them.
func Options(t testing.TB) *server.Options {
	return &server.Options{
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 16 << 20,
	}
}

// Start runs a server with JetStream and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options(t))
}

// StartWith runs a server with the given options (a restart test passes the
// StoreDir of a previous server to keep its state).
func StartWith(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: starting nats-server: %v", err)
	}
	started := make(chan struct{})
	go func() { defer close(started); s.Start() }()
	stop := func() {
		s.Shutdown()
		s.WaitForShutdown()
		<-started
	}
	if !s.ReadyForConnections(10 * time.Second) {
		stop()
		t.Fatal("natstest: nats-server not ready after 10s")
	}
	t.Cleanup(stop)
	return &Server{Server: s, StoreDir: opts.StoreDir}
}

// Connect returns a connection and a JetStream context, closed when the test ends.
func (s *Server) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("natstest: connecting: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Stop shuts the server down now (for restart tests); Cleanup is harmless after.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Bus is a started server with a connection and the mcpdrift streams and
// buckets set up, as every service test needs.
type Bus struct {
	*Server
	NC      *nats.Conn
	JS      jetstream.JetStream
	Handles *bus.Handles
}

// StartBus starts a server, connects, and runs bus.Setup with defaults.
func StartBus(t testing.TB) *Bus {
	t.Helper()
	srv := Start(t)
	nc, js := srv.Connect(t)
	h, err := bus.Setup(context.Background(), js, bus.Config{})
	if err != nil {
		t.Fatalf("natstest: bus.Setup: %v", err)
	}
	return &Bus{Server: srv, NC: nc, JS: js, Handles: h}
}
