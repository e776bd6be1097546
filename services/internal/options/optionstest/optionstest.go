// Package optionstest checks what every command promises of its settings:
// a password in MCPDRIFT_NATS_URL is never printed.
package optionstest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

// Secret is the NATS password NATSPasswordNeverShows puts in the URL.
const Secret = "s3cret-pw"

// Run is a command's run: its arguments, environment and stderr.
type Run func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// NATSPasswordNeverShows runs the command with Secret in MCPDRIFT_NATS_URL
// (a NATS that is not there) and env besides, with --help and then with
// each of starts, and fails t when the password is in an error or in what
// the command wrote. A start with NATS unreachable must fail unless
// mayStart.
func NATSPasswordNeverShows(t *testing.T, run Run, env map[string]string, mayStart bool, starts ...[]string) {
	t.Helper()
	all := map[string]string{"MCPDRIFT_NATS_URL": "nats://user:" + Secret + "@127.0.0.1:1", "MCPDRIFT_LOG_LEVEL": "debug"}
	for k, v := range env {
		all[k] = v
	}
	for _, args := range append([][]string{{"--help"}}, starts...) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// NATS calls its connection handlers on a goroutine of its own,
		// which may still log after run returned.
		var stderr syncbuf.Buffer
		err := run(ctx, args, func(k string) string { return all[k] }, &stderr)
		cancel()
		if !slices.Equal(args, []string{"--help"}) && err == nil && !mayStart {
			t.Errorf("%q with NATS unreachable succeeded", args)
		}
		if out := fmt.Sprint(err) + "\n" + stderr.String(); strings.Contains(out, Secret) {
			t.Errorf("%q: the NATS password shows:\n%s", args, out)
		}
	}
}
