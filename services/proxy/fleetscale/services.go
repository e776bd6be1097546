package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
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
// its config and data under dir, on free loopback ports: the one the tests
// start (package chtest).
type clickhouseServer struct {
	addr string
	s    *chtest.Server
}

func startClickHouse(dir string) (*clickhouseServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s, err := chtest.StartIn(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (install it with scripts/deps.d/clickhouse.sh, or run with --audit=false)", err)
	}
	return &clickhouseServer{addr: s.Addr, s: s}, nil
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
