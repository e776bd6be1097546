package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// services are the real fingerprint, drift and audit commands (built
// binaries: this package may not import their internal packages) and a
// private ClickHouse server for the audit sink.
type services struct {
	bin, dir string
	c        *cluster
	chAddr   string // "" when running without the audit sink
	procs    map[string]*proc
	env      map[string][]string
	extra    []string // added to every service's environment
}

func (s *services) common(role string) []string {
	return append([]string{"MCPDRIFT_NATS_URL=" + s.c.url(role), "MCPDRIFT_LOG_LEVEL=warn", "MCPDRIFT_BUS_SETUP=check", "MCPDRIFT_REPLICAS=3"}, s.extra...)
}

// startAll starts fingerprint, drift-1, drift-2 and (with ClickHouse) audit.
func (s *services) startAll() error {
	s.procs = map[string]*proc{}
	s.env = map[string][]string{
		"fingerprint": s.common("fingerprint"),
		"drift-1":     append(s.common("drift"), "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=ops:read:ops-token-0123456789"),
		"drift-2":     append(s.common("drift"), "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=ops:read:ops-token-0123456789"),
	}
	if s.chAddr != "" {
		s.env["audit"] = append(s.common("audit"), "MCPDRIFT_CLICKHOUSE_ADDR="+s.chAddr, "MCPDRIFT_AUDIT_DATABASE=mcpdrift_scale")
	}
	for name := range s.env {
		if err := s.start(name); err != nil {
			return err
		}
	}
	return nil
}

func (s *services) start(name string) error {
	cmd := strings.TrimRight(name, "-0123456789")
	p, err := startProc(name, filepath.Join(s.bin, cmd), nil, s.env[name], filepath.Join(s.dir, name+".log"))
	if err != nil {
		return err
	}
	s.procs[name] = p
	return nil
}

func (s *services) kill(name string) { s.procs[name].kill() }

func (s *services) stop() {
	for _, p := range s.procs {
		p.stop(20 * time.Second)
	}
}

func (s *services) pids() map[string]int {
	m := map[string]int{}
	for n, p := range s.procs {
		if !p.exited() {
			m[n] = p.pid()
		}
	}
	return m
}

// clickhouseServer is a private clickhouse-server (Debian's package) with
// its config and data under dir, on free loopback ports.
type clickhouseServer struct {
	addr string
	p    *proc
}

func startClickHouse(dir string) (*clickhouseServer, error) {
	bin := ""
	for _, b := range []string{"/usr/bin/clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse"} {
		if _, err := os.Stat(b); err == nil {
			bin = b
			break
		}
	}
	if bin == "" {
		return nil, fmt.Errorf("no clickhouse-server: install it with scripts/deps.d/clickhouse.sh, or run with --audit=false")
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
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
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "users.xml"), []byte(users), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--config-file=" + filepath.Join(dir, "config.xml")}
	if filepath.Base(bin) == "clickhouse" {
		args = append([]string{"server"}, args...)
	}
	p, err := startProc("clickhouse", bin, args, nil, filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, err
	}
	ch := &clickhouseServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), p: p}
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.addr}, DialTimeout: time.Second})
		if err == nil {
			err = conn.Ping(context.Background())
			_ = conn.Close()
			if err == nil {
				return ch, nil
			}
		}
		if p.exited() || time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("clickhouse-server not ready on %s: %v (log %s)", ch.addr, err, dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// counts reads the audit tables' row counts (distinct event ids: the sink
// is idempotent under redelivery, duplicates collapse on merge).
func (ch *clickhouseServer) counts(ctx context.Context) (map[string]uint64, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{ch.addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	out := map[string]uint64{}
	for _, t := range []string{"list_observations", "call_observations", "verdicts"} {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT uniqExact(event_id) FROM mcpdrift_scale."+t).Scan(&n); err != nil {
			return nil, fmt.Errorf("counting %s: %w", t, err)
		}
		out[t] = n
	}
	return out, nil
}
