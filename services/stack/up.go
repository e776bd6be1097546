package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

// Info is what a running stack writes to DATA-DIR/stack.json for `stack
// demo` and for people: where everything is.
type Info struct {
	PID            int               `json:"pid"`
	NATSURL        string            `json:"nats_url"`
	AdminURL       string            `json:"admin_url"`
	TokensFile     string            `json:"admin_tokens_file"`
	MCPURL         string            `json:"mcp_url"`
	Tenant         string            `json:"tenant"`
	Server         string            `json:"server"`
	DemoControlURL string            `json:"demo_control_url"`
	ClickHouseAddr string            `json:"clickhouse_addr,omitempty"`
	AuditDatabase  string            `json:"audit_database,omitempty"`
	Ops            map[string]string `json:"ops"`
	Logs           string            `json:"logs"`
}

const (
	tenant       = "default"
	sampleServer = "notes"
	infoFile     = "stack.json"
	tokensFile   = "admin-tokens"
	stopTimeout  = 15 * time.Second
	readyTimeout = 60 * time.Second
)

// child is one service command run by the stack.
type child struct {
	name  string
	cmd   *exec.Cmd
	ready string // a URL that answers 200 once the service is ready
	log   *os.File
	done  chan struct{}
	err   error
}

func up(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(stderr)
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	logDir := filepath.Join(dataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	unlock, err := lockDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	token, err := ensureTokens(filepath.Join(dataDir, tokensFile))
	if err != nil {
		return err
	}

	ns, err := startNATS(cfg, filepath.Join(dataDir, "nats"))
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		log.Info().Msg("nats stopped")
	}()
	natsURL := ns.ClientURL()
	log.Info().Str("url", natsURL).Str("store", filepath.Join(dataDir, "nats")).Msg("nats ready")

	common := []string{"MCPDRIFT_NATS_URL=" + natsURL, "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_TENANT=" + tenant}
	info := Info{
		PID: os.Getpid(), NATSURL: natsURL, AdminURL: "http://" + cfg.adminAddr(),
		TokensFile: filepath.Join(dataDir, tokensFile), Tenant: tenant, Server: sampleServer,
		MCPURL:         "http://" + cfg.proxyAddr() + "/" + sampleServer + "/mcp",
		DemoControlURL: "http://" + cfg.demoAddr() + "/control/release",
		Ops:            map[string]string{},
		Logs:           logDir,
	}
	// A spec with an ops address (ops >= 0) gets MCPDRIFT_OPS_ADDR and, unless
	// it says otherwise, is ready when its /readyz answers.
	specs := []struct {
		name  string
		env   []string
		args  []string
		ops   int    // index of its ops address; -1: none
		ready string // default: its ops /readyz
		skip  string // why it is not started; empty: it is
	}{
		{name: "fingerprint", ops: 0},
		{name: "drift", env: []string{"MCPDRIFT_ADMIN_ADDR=" + cfg.adminAddr(), "MCPDRIFT_ADMIN_TOKENS_FILE=" + info.TokensFile,
			"MCPDRIFT_POSTURE=" + cfg.Posture, "MCPDRIFT_CLICKHOUSE_ADDR=" + cfg.ClickHouseAddr, "MCPDRIFT_AUDIT_DATABASE=" + cfg.AuditDatabase,
			"MCPDRIFT_BASELINE_KEYS=" + cfg.BaselineKeys}, ops: 1},
		{name: "audit", env: []string{"MCPDRIFT_CLICKHOUSE_ADDR=" + cfg.ClickHouseAddr, "MCPDRIFT_AUDIT_DATABASE=" + cfg.AuditDatabase,
			"MCPDRIFT_AUDIT_BATCH_AGE=1s", "MCPDRIFT_AUDIT_DRAIN_TIMEOUT=10s"}, ops: 2,
			skip: skipUnless(cfg.ClickHouseAddr != "", "clickhouse not configured: the audit service is not started; audit events wait in jetstream until it runs")},
		{name: "notify", env: []string{"MCPDRIFT_NOTIFY_WEBHOOK=" + cfg.NotifyWebhook, "MCPDRIFT_NOTIFY_FORMAT=" + cfg.NotifyFormat,
			"MCPDRIFT_NOTIFY_DRAIN_TIMEOUT=5s"}, ops: 4, skip: skipUnless(cfg.NotifyWebhook != "", "no webhook: the notify service is not started")},
		{name: "demoserver", args: []string{"--listen", cfg.demoAddr(), "--state-file", filepath.Join(dataDir, "demoserver.json")},
			ops: -1, ready: info.DemoControlURL},
		{name: "proxy", env: []string{"MCPDRIFT_PROXY_ID=stack", "MCPDRIFT_OUTBOX_DIR=" + filepath.Join(dataDir, "outbox")},
			args: []string{"--listen", cfg.proxyAddr(), "--upstream", sampleServer + "=http://" + cfg.demoAddr() + "/mcp"},
			ops:  3, ready: "http://" + cfg.proxyAddr() + "/readyz"},
	}
	var running []*child
	// Stop in reverse order of start: the proxy first, NATS last (deferred
	// above), so every service can still flush and ack while it stops.
	defer func() {
		for i := len(running) - 1; i >= 0; i-- {
			running[i].stop(log)
		}
	}()
	exited := make(chan *child, len(specs))
	for _, s := range specs {
		if s.skip != "" {
			if s.name == "audit" {
				log.Warn().Str("command", s.name).Msg(s.skip)
			} else {
				log.Info().Str("command", s.name).Msg(s.skip)
			}
			continue
		}
		env := append(append([]string{}, common...), s.env...)
		if s.ops >= 0 {
			info.Ops[s.name] = "http://" + cfg.opsAddr(s.ops)
			env = append(env, "MCPDRIFT_OPS_ADDR="+cfg.opsAddr(s.ops))
			if s.ready == "" {
				s.ready = info.Ops[s.name] + "/readyz"
			}
		}
		c, err := startChild(filepath.Join(cfg.BinDir, s.name), s.name, s.args, env, logDir)
		if err != nil {
			return err
		}
		c.ready = s.ready
		running = append(running, c)
		go func() { <-c.done; exited <- c }()
		if err := c.waitReady(ctx, readyTimeout); err != nil {
			return err
		}
		log.Info().Str("command", s.name).Int("pid", c.cmd.Process.Pid).Msg("ready")
	}
	if cfg.ClickHouseAddr != "" {
		info.ClickHouseAddr, info.AuditDatabase = cfg.ClickHouseAddr, cfg.AuditDatabase
	}
	if err := writeJSON(filepath.Join(dataDir, infoFile), info); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dataDir, infoFile))
	printBanner(stdout, info, token)

	select {
	case <-ctx.Done():
		log.Info().Msg("stopping")
		return nil
	case c := <-exited:
		return fmt.Errorf("%s exited (%v); its log: %s\n%s", c.name, c.err, c.log.Name(), tail(c.log.Name(), 20))
	}
}

// skipUnless is a spec's skip: why, unless run.
func skipUnless(run bool, why string) string {
	if run {
		return ""
	}
	return why
}

func newLogger(w io.Writer) zerolog.Logger {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05"}
		}
	}
	return options.Logger(w, zerolog.InfoLevel, "stack")
}

func startNATS(cfg Config, storeDir string) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		ServerName: "mcpdrift-stack",
		Host:       "127.0.0.1",
		Port:       cfg.NATSPort,
		JetStream:  true,
		StoreDir:   storeDir,
		MaxPayload: 16 << 20,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats: not ready on 127.0.0.1:%d after 30s (is the port taken? choose another with --nats-port)", cfg.NATSPort)
	}
	return ns, nil
}

// ensureTokens returns the admin write token, creating the tokens file (a
// write token "admin" and a read token "viewer") on first start.
func ensureTokens(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		secret := func() string {
			var r [16]byte
			_, _ = rand.Read(r[:])
			return hex.EncodeToString(r[:])
		}
		b = []byte("admin:write:" + secret() + "\nviewer:read:" + secret() + "\n")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", fmt.Errorf("writing admin tokens: %w", err)
		}
	} else if err != nil {
		return "", fmt.Errorf("reading admin tokens: %w", err)
	}
	return writeToken(b)
}

// writeToken finds the secret of the first write token in a tokens file.
func writeToken(b []byte) (string, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(strings.TrimSpace(line), ":", 3); len(parts) == 3 && parts[1] == "write" {
			return parts[2], nil
		}
	}
	return "", errors.New("admin tokens file: no write token (want a line name:write:secret)")
}

func startChild(bin, name string, args, env []string, logDir string) (*child, error) {
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// waitReady polls the child's ready URL until it answers 200.
func (c *child) waitReady(ctx context.Context, limit time.Duration) error {
	url := c.ready
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited while starting (%v); its log: %s\n%s", c.name, c.err, c.log.Name(), tail(c.log.Name(), 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%s); its log: %s\n%s", c.name, limit, url, c.log.Name(), tail(c.log.Name(), 20))
		}
	}
}

// stop interrupts the child and waits for it, killing it after stopTimeout.
func (c *child) stop(log zerolog.Logger) {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.done:
		case <-time.After(stopTimeout):
			log.Warn().Str("command", c.name).Msg("did not stop in time; killed")
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	c.log.Close()
	log.Info().Str("command", c.name).Msg("stopped")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func printBanner(w io.Writer, in Info, token string) {
	ch := "ClickHouse: not configured. Audit events wait in JetStream; start one with\n" +
		"    scripts/clickhouse.sh start\n  and run make run again (or run the audit service yourself)."
	if in.ClickHouseAddr != "" {
		ch = "ClickHouse: " + in.ClickHouseAddr + ", database " + in.AuditDatabase + "\n" +
			"    bin/driftctl audit drifts --clickhouse " + in.ClickHouseAddr
	}
	var ops []string
	for _, name := range []string{"fingerprint", "drift", "audit", "proxy"} {
		if u, ok := in.Ops[name]; ok {
			ops = append(ops, fmt.Sprintf("    %-12s %s/metrics", name, u))
		}
	}
	fmt.Fprintf(w, `
mcpdrift is running (NATS %s, state in %s).

  MCP endpoint (Streamable HTTP), the sample server %q behind the proxy:
    %s
    e.g. npx @modelcontextprotocol/inspector --cli %s --transport http --method tools/list

  Review console: %s/
    in a browser; log in with the MCPDRIFT_TOKEN below (write), or the viewer's read token from %s

  Admin API: %s  (tokens in %s)
    export MCPDRIFT_API=%s MCPDRIFT_TOKEN=%s
    bin/driftctl status
    bin/driftctl show %s %s                # the sample server: every listing variant, with its diff
    bin/driftctl tail                      # follow verdicts

  Sample server release control (make the server rug-pull):
    curl -X POST %s -d release=1.1.0

  %s

  Health and metrics:
%s

  Logs: %s.  A scripted rug pull: make demo.  Stop: Ctrl-C.
`, in.NATSURL, filepath.Dir(in.TokensFile), in.Server, in.MCPURL, in.MCPURL, strings.TrimSuffix(in.AdminURL, "/"), in.TokensFile, in.AdminURL, in.TokensFile,
		in.AdminURL, token, in.Tenant, in.Server, in.DemoControlURL, ch, strings.Join(ops, "\n"), in.Logs)
}
