package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
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
	BaselineKeys   string // file of trusted baseline signing keys, passed to drift; empty: none
	Replicas       int
	NotifyWebhook  string // empty: no notify service
	NotifyFormat   string
}

// Ports derived from the port base.
func (c Config) adminAddr() string    { return c.addr(0) }
func (c Config) opsAddr(i int) string { return c.addr(1 + i) } // 0 fingerprint, 1 drift, 2 audit, 3 proxy, 4 notify
func (c Config) proxyAddr() string    { return c.addr(10) }
func (c Config) demoAddr() string     { return c.addr(20) }
func (c Config) addr(offset int) string {
	return "127.0.0.1:" + strconv.Itoa(c.PortBase+offset)
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := Config{DataDir: ".data/run", NATSPort: 4222, PortBase: 8470, AuditDatabase: "mcpdrift", Posture: "discovery", Replicas: 1, NotifyFormat: "json"}
	rest, err := options.Parse(options.Command{Name: "stack", Header: usage, Args: options.Positional, Options: []options.Option{
		dataDir(&cfg.DataDir, "the stack's state: JetStream, admin tokens, proxy outbox, logs"),
		options.Opt("bin-dir", "MCPDRIFT_STACK_BIN_DIR", "DIR", "directory of the service commands; none: the directory of this executable", options.String(&cfg.BinDir)),
		options.Opt("nats-port", "MCPDRIFT_STACK_NATS_PORT", "PORT", "loopback port of the embedded NATS server", options.Int(&cfg.NATSPort)),
		options.Opt("port-base", "MCPDRIFT_STACK_PORT_BASE", "PORT", "first of the loopback HTTP ports, see above", options.Int(&cfg.PortBase)),
		options.Opt("clickhouse-addr", "MCPDRIFT_CLICKHOUSE_ADDR", "ADDR", "ClickHouse native protocol address for the audit service; none: no audit service, audit events wait in JetStream", options.String(&cfg.ClickHouseAddr)),
		options.Opt("audit-database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "ClickHouse database of the audit tables", options.String(&cfg.AuditDatabase)),
		options.Opt("posture", "MCPDRIFT_POSTURE", "MODE", "on first sight of a server: discovery (trust on first use) or strict", options.String(&cfg.Posture)),
		options.Opt("baseline-keys", "MCPDRIFT_BASELINE_KEYS", "FILE", "trusted public keys (PEM) a baseline lockfile must be signed with to be imported, passed to the drift service; none: imports are refused", options.String(&cfg.BaselineKeys)),
		options.Opt("notify-webhook", "MCPDRIFT_NOTIFY_WEBHOOK", "URL", "webhook the notify service posts every event to (never printed; MCPDRIFT_NOTIFY_SECRET, when set, signs its requests); none: no notify service", options.String(&cfg.NotifyWebhook)),
		options.Opt("notify-format", "MCPDRIFT_NOTIFY_FORMAT", "FORMAT", "format of the notify service's requests: json, slack or cloudevents", options.String(&cfg.NotifyFormat)),
	}}, args, getenv, stderr)
	if err != nil {
		return Config{}, err
	}
	if len(rest) > 0 {
		return Config{}, options.Usagef("unexpected arguments %q (the only subcommand is demo)", rest)
	}
	if cfg.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return Config{}, fmt.Errorf("finding the service commands: %w (give --bin-dir)", err)
		}
		cfg.BinDir = filepath.Dir(exe)
	}
	return cfg, options.Invalid(cfg.Validate())
}

// dataDir is the --data-dir of stack and stack demo.
func dataDir(p *string, usage string) options.Option {
	return options.Opt("data-dir", "MCPDRIFT_STACK_DIR", "DIR", usage, options.String(p))
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
	need := commands
	if c.NotifyWebhook != "" {
		need = append(need[:len(need):len(need)], "notify")
	}
	for _, name := range need {
		if _, err := os.Stat(filepath.Join(c.BinDir, name)); err != nil {
			errs = append(errs, fmt.Errorf("command %s not found in %s: build them all with make build, or give --bin-dir", name, c.BinDir))
		}
	}
	return errors.Join(errs...)
}

// commands are the service commands the stack runs; notify too when a
// webhook is set.
var commands = []string{"fingerprint", "drift", "audit", "demoserver", "proxy"}

// DemoConfig is what `stack demo` is configured with.
type DemoConfig struct {
	DataDir string
}

func parseDemoConfig(args []string, getenv func(string) string, stderr io.Writer) (DemoConfig, error) {
	cfg := DemoConfig{DataDir: ".data/run"}
	_, err := options.Parse(options.Command{Name: "stack demo", Header: "stack demo: play a scripted rug pull against the stack running on DATA-DIR.\n\nUsage: stack demo [flags]\n\n",
		Options: []options.Option{dataDir(&cfg.DataDir, "directory of the running stack")}}, args, getenv, stderr)
	return cfg, err
}
