package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Config is what `stack` is configured with.
type Config struct {
	DataDir        string
	BinDir         string
	NATSPort       int
	PortBase       int
	ClickHouseAddr string // empty: no audit service
	AuditDatabase  string
	Posture        string
	Replicas       int
}

// Ports derived from the port base.
func (c Config) adminAddr() string    { return c.addr(0) }
func (c Config) opsAddr(i int) string { return c.addr(1 + i) } // 0 fingerprint, 1 drift, 2 audit, 3 proxy
func (c Config) proxyAddr() string    { return c.addr(10) }
func (c Config) demoAddr() string     { return c.addr(20) }
func (c Config) addr(offset int) string {
	return "127.0.0.1:" + strconv.Itoa(c.PortBase+offset)
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1 // reported by Validate
	}
	return n
}

func newFlagSet(name, text string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, text); fs.PrintDefaults() }
	return fs
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := newFlagSet("stack", usage, stderr)
	var cfg Config
	fs.StringVar(&cfg.DataDir, "data-dir", envOr(getenv, "MCPDRIFT_STACK_DIR", ".data/run"), "`directory` of the stack's state: JetStream, admin tokens, proxy outbox, logs (MCPDRIFT_STACK_DIR)")
	fs.StringVar(&cfg.BinDir, "bin-dir", envOr(getenv, "MCPDRIFT_STACK_BIN_DIR", ""), "`directory` of the service commands; default: the directory of this executable (MCPDRIFT_STACK_BIN_DIR)")
	fs.IntVar(&cfg.NATSPort, "nats-port", atoi(envOr(getenv, "MCPDRIFT_STACK_NATS_PORT", "4222")), "loopback `port` of the embedded NATS server (MCPDRIFT_STACK_NATS_PORT)")
	fs.IntVar(&cfg.PortBase, "port-base", atoi(envOr(getenv, "MCPDRIFT_STACK_PORT_BASE", "8470")), "first of the loopback HTTP `port`s, see above (MCPDRIFT_STACK_PORT_BASE)")
	fs.StringVar(&cfg.ClickHouseAddr, "clickhouse-addr", envOr(getenv, "MCPDRIFT_CLICKHOUSE_ADDR", ""), "ClickHouse native protocol `address` for the audit service; empty: no audit service, audit events wait in JetStream (MCPDRIFT_CLICKHOUSE_ADDR)")
	fs.StringVar(&cfg.AuditDatabase, "audit-database", envOr(getenv, "MCPDRIFT_AUDIT_DATABASE", "mcpdrift"), "ClickHouse `database` of the audit tables (MCPDRIFT_AUDIT_DATABASE)")
	fs.StringVar(&cfg.Posture, "posture", envOr(getenv, "MCPDRIFT_POSTURE", "discovery"), "`mode` on first sight of a server: discovery (trust on first use) or strict (MCPDRIFT_POSTURE)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q (the only subcommand is demo)", fs.Args())
	}
	if cfg.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return Config{}, fmt.Errorf("finding the service commands: %w (give --bin-dir)", err)
		}
		cfg.BinDir = filepath.Dir(exe)
	}
	cfg.Replicas = 1
	return cfg, cfg.Validate()
}

// Validate reports every problem of the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory: empty"))
	}
	if c.NATSPort < 1 || c.NATSPort > 65535 {
		errs = append(errs, fmt.Errorf("nats port %d: want 1 to 65535", c.NATSPort))
	}
	if c.PortBase < 1 || c.PortBase+20 > 65535 {
		errs = append(errs, fmt.Errorf("port base %d: want 1 to 65515", c.PortBase))
	}
	if c.Posture != "discovery" && c.Posture != "strict" {
		errs = append(errs, fmt.Errorf("posture %q: want discovery or strict", c.Posture))
	}
	for _, name := range commands {
		if _, err := os.Stat(filepath.Join(c.BinDir, name)); err != nil {
			errs = append(errs, fmt.Errorf("command %s not found in %s: build them all with make build, or give --bin-dir", name, c.BinDir))
		}
	}
	return errors.Join(errs...)
}

// commands are the service commands the stack runs.
var commands = []string{"fingerprint", "drift", "audit", "demoserver", "proxy"}

// DemoConfig is what `stack demo` is configured with.
type DemoConfig struct {
	DataDir string
}

func parseDemoConfig(args []string, getenv func(string) string, stderr io.Writer) (DemoConfig, error) {
	fs := newFlagSet("stack demo", "stack demo: play a scripted rug pull against the stack running on DATA-DIR.\n\nUsage: stack demo [flags]\n\nFlags:\n", stderr)
	var cfg DemoConfig
	fs.StringVar(&cfg.DataDir, "data-dir", envOr(getenv, "MCPDRIFT_STACK_DIR", ".data/run"), "`directory` of the running stack (MCPDRIFT_STACK_DIR)")
	if err := fs.Parse(args); err != nil {
		return DemoConfig{}, err
	}
	if fs.NArg() > 0 {
		return DemoConfig{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, nil
}
