//go:build lockcheck

package cmdtest

// tags are the build tags the commands are built with: those of the test
// binary that the commands' behaviour depends on (lockcheck: the proxy's
// lock order is checked, services/proxy/internal/lockorder).
var tags = []string{"-tags", "lockcheck"}
