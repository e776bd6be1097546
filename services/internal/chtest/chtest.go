// Package chtest runs a real ClickHouse server for tests: a private
// clickhouse-server process per test package (its config and data in a
// temporary directory, on free loopback ports), started on first use and
// stopped when the package's tests end, or the server named by
// MCPDRIFT_CLICKHOUSE_ADDR when that is set. Tests isolate themselves with a
// database of their own (Database). Restart tests start a server of their own
// (Start) and stop and start it again.
//
// The binary comes from Debian's clickhouse-server package; when it is
// missing, tests fail with a sentence naming scripts/deps.d/clickhouse.sh,
// which installs it (make deps, run by make test).
package chtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// EnvAddr names an external server (host:port of the native protocol) to use
// instead of starting one.
const EnvAddr = "MCPDRIFT_CLICKHOUSE_ADDR"

// readyWithin bounds how long a started server may take to answer.
const readyWithin = 60 * time.Second

// Server is a ClickHouse server reachable over the native protocol.
type Server struct {
	// Addr is host:port of the native protocol.
	Addr string

	dir  string
	env  []string // added to the server's environment
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
)

// Main runs a package's tests and then stops the shared server. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }
//
// Without it the shared server still dies with the test binary (it is
// started with a parent-death signal), but its directory stays behind.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Stop()
		_ = os.RemoveAll(shared.dir)
	}
	return code
}

// Shared returns the package's server, starting it on first use.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		if addr := os.Getenv(EnvAddr); addr != "" {
			shared = &Server{Addr: addr}
			sharedErr = waitReady(context.Background(), addr, nil)
			return
		}
		dir, err := os.MkdirTemp("", "mcpdrift-chtest-")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = start(dir)
	})
	if sharedErr != nil {
		t.Fatalf("chtest: %v", sharedErr)
	}
	return shared
}

// Start runs a server of the test's own under t.TempDir(), for tests that
// stop and restart it; it is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start(t.TempDir())
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Binary finds clickhouse-server, or says how to install it.
func Binary() (string, error) {
	for _, name := range []string{"clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("clickhouse"); err == nil {
		return p, nil // the single binary of current releases: "clickhouse server"
	}
	return "", errors.New("clickhouse-server is not installed: run scripts/deps.d/clickhouse.sh (or make deps), " +
		"or set " + EnvAddr + " to a running server's native host:port")
}

// StartWith is Start with more configuration: files written into the
// server's directory before it starts, by path relative to it (e.g.
// "config.d/x.xml", "users.d/x.xml"), and variables added to its
// environment (for from_env settings).
func StartWith(t testing.TB, files map[string][]byte, env []string) *Server {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("chtest: %v", err)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			t.Fatalf("chtest: %v", err)
		}
	}
	s, err := start(dir, env...)
	if err != nil {
		t.Fatalf("chtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartIn starts a private server with its configuration and data under
// dir, for a harness that is not a test (make scale); Stop ends it.
func StartIn(dir string) (*Server, error) { return start(dir) }

// Pid is the server process's id, 0 while it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func start(dir string, env ...string) (*Server, error) {
	if _, err := Binary(); err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	if err := writeConfig(dir, ports); err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), dir: dir, env: env}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Restart starts the server process again on the same directory and ports
// (after Stop) and waits until it answers.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return errors.New("chtest: an external server cannot be restarted")
	}
	if s.cmd != nil {
		return errors.New("chtest: server already running")
	}
	bin, err := Binary()
	if err != nil {
		return err
	}
	args := []string{"--config-file=" + filepath.Join(s.dir, "config.xml")}
	if filepath.Base(bin) == "clickhouse" {
		args = append([]string{"server"}, args...)
	}
	out, err := os.OpenFile(filepath.Join(s.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	if err := waitReady(ctx, s.Addr, done); err != nil {
		s.stopLocked()
		return fmt.Errorf("%w (server log: %s)", err, s.logTail())
	}
	return nil
}

// Stop kills the server process and waits for it to exit. Data written
// before stays on disk for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd, s.done = nil, nil
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.err.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Options returns connection options for the server and database.
func (s *Server) Options(database string) *clickhouse.Options {
	return &clickhouse.Options{
		Addr:        []string{s.Addr},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
	}
}

// Conn opens a connection to the server's default database, closed when the
// test ends.
func (s *Server) Conn(t testing.TB) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(s.Options("default"))
	if err != nil {
		t.Fatalf("chtest: connecting to %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Database creates a database of the test's own (dropped when the test ends)
// and returns its name.
func (s *Server) Database(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	conn := s.Conn(t)
	ctx := context.Background()
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("chtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		c, err := clickhouse.Open(s.Options("default"))
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
	})
	return name
}

// waitReady polls until the server answers a query, the process exits, or
// ctx ends.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyWithin)
		defer cancel()
	}
	var last error
	for {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: time.Second})
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-exited:
			return fmt.Errorf("clickhouse-server exited before answering on %s", addr)
		case <-ctx.Done():
			return fmt.Errorf("clickhouse-server on %s not ready: %v", addr, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FreePorts reserves n loopback ports and releases them for the servers a
// test or a harness starts (ClickHouse here, NATS in e2e and make scale).
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeConfig writes a minimal server config: loopback only, the given
// ports (native, HTTP, interserver), everything under dir, small caches.
func writeConfig(dir string, ports []int) error {
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>%[1]s/server.log</log><errorlog>%[1]s/server.err.log</errorlog></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%[2]d</tcp_port>
  <http_port>%[3]d</http_port>
  <interserver_http_port>%[4]d</interserver_http_port>
  <path>%[1]s/data/</path>
  <tmp_path>%[1]s/tmp/</tmp_path>
  <user_files_path>%[1]s/user_files/</user_files_path>
  <format_schema_path>%[1]s/format_schemas/</format_schema_path>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
</yandex>
`, dir, ports[0], ports[1], ports[2])
	users := `<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
`
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(config), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644)
}
