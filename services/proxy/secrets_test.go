package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/options/optionstest"
)

// TestNATSPasswordNeverShows: a password in MCPDRIFT_NATS_URL shows
// neither in --help nor in what a proxy that cannot reach NATS logs
// (issue 15: --help printed it as a flag default).
func TestNATSPasswordNeverShows(t *testing.T) {
	run := func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		_, err := run(ctx, args, getenv, strings.NewReader(""), io.Discard, stderr)
		return err
	}
	// The proxy starts without NATS (it spools), so its start succeeds.
	optionstest.NATSPasswordNeverShows(t, run, nil, true, []string{"--server-id", "fs", "--outbox-dir", t.TempDir(), "--", "true"})
}
