package main

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/options/optionstest"
)

// TestNATSPasswordNeverShows: a password in MCPDRIFT_NATS_URL shows
// neither in --help nor in the error and the log lines of a failed connect
// (issue 15: the connect error quoted it).
func TestNATSPasswordNeverShows(t *testing.T) {
	optionstest.NATSPasswordNeverShows(t, run, nil, false, []string{})
}
