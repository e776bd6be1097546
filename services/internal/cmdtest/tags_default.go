//go:build !lockcheck

package cmdtest

// tags are the build tags the commands are built with (tags_lockcheck.go).
var tags []string
