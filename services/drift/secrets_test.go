package main

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/options/optionstest"
)

// TestNATSPasswordNeverShows: a password in MCPDRIFT_NATS_URL shows
// neither in --help nor in the error and the log lines of a failed connect
// (issue 15: --help printed it as a flag default).
func TestNATSPasswordNeverShows(t *testing.T) {
	optionstest.NATSPasswordNeverShows(t, run, map[string]string{"MCPDRIFT_ADMIN_TOKENS": "ops:write:0123456789abcdef0123"}, false, []string{})
}
