package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/streamhttp"
)

// serveHTTP runs the HTTP mode until SIGINT or SIGTERM: a gate and a
// publisher (with its own outbox) per upstream, one listener for all.
func serveHTTP(ctx context.Context, cfg Config, nc *nats.Conn, js jetstream.JetStream, log zerolog.Logger, stderr io.Writer) (int, error) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var pubs []*fleet.Publisher
	defer func() {
		stopBG()
		wg.Wait()
		for _, p := range pubs {
			if err := p.Close(); err != nil {
				log.Warn().Err(err).Msg("closing a publisher")
			}
		}
	}()
	var ups []streamhttp.Upstream
	for _, u := range cfg.Upstreams {
		ulog := log.With().Str("server", u.ID).Logger()
		gate, pub, err := startFleet(ctx, bg, &wg, js, cfg, u.ID, filepath.Join(cfg.OutboxDir, u.ID), ulog)
		if err != nil {
			return 2, err
		}
		pubs = append(pubs, pub)
		up := streamhttp.Upstream{ID: u.ID, Gate: gate, Observer: pub, Session: cfg.sessionConfig(u.ID)}
		if u.SSE {
			up.SSEURL = u.URL
		} else {
			up.URL = u.URL
		}
		ups = append(ups, up)
	}
	px, err := streamhttp.New(streamhttp.Config{Log: log}, ups)
	if err != nil {
		return 2, err
	}
	defer px.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !nc.IsConnected() {
			// Still serving what the cache knows, failing closed on the
			// rest, and spooling events: but not ready for new traffic.
			http.Error(w, "not connected to NATS", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("/", px)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return 2, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info().Str("listen", ln.Addr().String()).Int("upstreams", len(ups)).Msg("serving")
	fmt.Fprintf(stderr, "proxy: serving %d upstream(s) on http://%s/<server-id>/mcp\n", len(ups), ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return 2, fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Streams stay open until their clients leave: give them a grace, then
	// end them.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return 0, nil
}
