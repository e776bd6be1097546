// Package cmdtest builds the repository's commands for tests that run them
// as processes: each command at most once per test binary, into one
// temporary directory that Main removes when the tests end. It is the one
// way a test gets a command's binary.
package cmdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// module is the import path of the commands' module: a command is
// module/<name>, built from wherever the test runs.
const module = "github.com/mcpdrift/mcpdrift/services/"

var (
	mu     sync.Mutex
	dir    string // made on first use
	built  = map[string]bool{}
	failed = map[string]error{} // a command whose build failed fails every later caller alike
)

// Dir builds those of the named commands (directories under services/:
// "drift", "proxy", ...) not built yet by this test binary, in one go build,
// and returns the directory that holds them, each under its name.
func Dir(tb testing.TB, names ...string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "mcpdrift-cmdtest-")
		if err != nil {
			tb.Fatalf("cmdtest: %v", err)
		}
		dir = d
	}
	var missing []string
	for _, n := range names {
		if err := failed[n]; err != nil {
			tb.Fatal(err)
		}
		if !built[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		args := append([]string{"build"}, tags...)
		args = append(args, "-o", dir+string(filepath.Separator))
		for _, n := range missing {
			args = append(args, module+n)
		}
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			err = fmt.Errorf("cmdtest: building %v: %v\n%s", missing, err, out)
			for _, n := range missing {
				failed[n] = err
			}
			tb.Fatal(err)
		}
		for _, n := range missing {
			built[n] = true
		}
	}
	return dir
}

// Path returns the path of the named command, building it on first use.
func Path(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(Dir(tb, name), name)
}

// Main runs a package's tests with run (m.Run, or a wrapper of it such as
// chtest.Main) and then removes the commands built for them. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(cmdtest.Main(m.Run)) }
func Main(run func() int) int {
	code := run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	return code
}
