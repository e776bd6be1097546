// Package boundaries holds the test of the import rules that
// docs/architecture.md states: a service never imports another, shared
// code imports no service, the proxy's session imports no transport, and
// the fingerprint engine is the standard library's alone, without I/O. The
// rules are written once, in boundaries_test.go, and checked against
// what the go command lists (as Tailscale's tstest/deptest does per
// package). It has no code of its own beside the test.
package boundaries
