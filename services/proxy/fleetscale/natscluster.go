package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
)

// The NATS side of the simulation: deploy/nats/cluster/nats-{1,2,3}.conf as
// three nats-server processes on loopback, with only their addresses and
// store directories rewritten (as services/e2e does), and deploy/nats/auth.conf
// with a proxy user per simulated tenant added beside the shipped ones.

// roles are the users of deploy/nats/auth.conf.
var roles = []string{"admin", "fingerprint", "drift", "audit", "alerting", "notify", "proxy", "leaf", "sys"}

// cluster is three running nats-server processes.
type cluster struct {
	bin       string
	dir       string
	passwords map[string]string // user -> password the clients send
	env       []string          // the servers' environment: bcrypt hashes of the shipped roles
	nodes     []*node
}

type node struct {
	name                      string
	client, route, http, leaf int
	conf, store, log          string
	proc                      *proc
}

// startCluster writes the three node configurations and the auth file
// (with a proxy user per tenant) under dir and starts the nodes.
func startCluster(deployDir, bin, dir string, tenants []string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir, passwords: map[string]string{}}
	auth, err := os.ReadFile(filepath.Join(deployDir, "auth.conf"))
	if err != nil {
		return nil, err
	}
	for _, r := range roles {
		c.passwords[r] = randomHex(16)
		h, err := bcrypt.GenerateFromPassword([]byte(c.passwords[r]), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		c.env = append(c.env, "MCPDRIFT_NATS_"+strings.ToUpper(r)+"_PASSWORD="+string(h))
	}
	tenantAuth, err := c.tenantUsers(string(auth), tenants)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(tenantAuth), 0o600); err != nil {
		return nil, err
	}
	ports, err := chtest.FreePorts(12)
	if err != nil {
		return nil, err
	}
	for i := range 3 {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("nats-%d", i+1), client: ports[4*i], route: ports[4*i+1], http: ports[4*i+2], leaf: ports[4*i+3],
			store: filepath.Join(dir, fmt.Sprintf("store-%d", i+1))})
	}
	for i, n := range c.nodes {
		repl := [][2]string{
			{`listen = "0.0.0.0:4222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.client)},
			{`http = "0.0.0.0:8222"`, fmt.Sprintf(`http = "127.0.0.1:%d"`, n.http)},
			{`listen = "0.0.0.0:6222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.route)},
			// the sites' leafnodes port (--sites)
			{`listen = "0.0.0.0:7422"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.leaf)},
			{`store_dir = "/var/lib/nats"`, fmt.Sprintf(`store_dir = %q`, n.store)},
			{`include ../auth.conf`, `include auth.conf`},
		}
		for _, o := range c.nodes {
			repl = append(repl, [2]string{fmt.Sprintf(`"nats-route://%s:6222"`, o.name), fmt.Sprintf(`"nats-route://127.0.0.1:%d"`, o.route)})
		}
		conf, err := template(filepath.Join(deployDir, "cluster", fmt.Sprintf("nats-%d.conf", i+1)), repl)
		if err != nil {
			return nil, err
		}
		// nats-server's default of 1,000 consumers per stream caps the fleet
		// at 500 (proxy, server) pairs (two status watches each); configs
		// from before deploy/nats lifted it get the same limit here.
		if !strings.Contains(conf, "default_max_consumers") {
			conf = strings.Replace(conf, "jetstream {", "jetstream {\n  limits { default_max_consumers = 100000 }", 1)
		}
		n.conf = filepath.Join(dir, n.name+".conf")
		n.log = filepath.Join(dir, n.name+".log")
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if err := c.start(n); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.waitHealthy(60 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// tenantUsers adds, for each tenant, a copy of the shipped PROXY_DEFAULT
// permissions with the tenant in place of "default" and a user
// proxy-<tenant> (as auth.conf's comment says an operator does), and the
// same for the sites' leaf nodes: LEAF_<TENANT> and a user leaf-<tenant>
// (auth.conf: "Copy LEAF_DEFAULT and its user per tenant").
func (c *cluster) tenantUsers(auth string, tenants []string) (string, error) {
	var blocks, users strings.Builder
	end := 0
	for _, role := range []string{"PROXY", "LEAF"} {
		block, at, err := confBlock(auth, role+"_DEFAULT")
		if err != nil {
			return "", fmt.Errorf("auth.conf: %w; update fleetscale's template", err)
		}
		end = max(end, at)
		for _, t := range tenants {
			blocks.WriteString("\n" + forTenant(block, role, t) + "\n")
			pw := randomHex(16)
			user := strings.ToLower(role) + "-" + t
			c.passwords[user] = pw
			h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&users, "      { user = %s, password = %q, permissions = $%s_%s }\n", user, h, role, strings.ToUpper(t))
		}
	}
	anchor := "      { user = proxy,"
	i := strings.Index(auth, anchor)
	if i < 0 || i < end {
		return "", errors.New("auth.conf: proxy user not found after the permission blocks; update fleetscale's template")
	}
	return auth[:end] + "\n" + blocks.String() + auth[end:i] + users.String() + auth[i:], nil
}

// tenantWord matches "default" as a tenant in a subject of auth.conf
// (mcpdrift.obs.list.default.*, $KV.mcpdrift_policy.default,
// _INBOX_proxy_default).
var tenantWord = regexp.MustCompile(`([._])default([."])`)

// forTenant is a copy of a ROLE_DEFAULT block for tenant t.
func forTenant(block, role, t string) string {
	b := strings.Replace(block, role+"_DEFAULT", role+"_"+strings.ToUpper(t), 1)
	return tenantWord.ReplaceAllString(b, "${1}"+t+"${2}")
}

// confBlock returns the block "NAME = { ... }" (or "NAME { ... }") of a
// NATS configuration, braces matched, and the offset just past it.
func confBlock(conf, name string) (string, int, error) {
	re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*=?\s*\{`)
	loc := re.FindStringIndex(conf)
	if loc == nil {
		return "", 0, fmt.Errorf("block %s not found", name)
	}
	depth := 0
	for i := loc[1] - 1; i < len(conf); i++ {
		switch conf[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return strings.TrimSpace(conf[loc[0] : i+1]), i + 1, nil
			}
		case '#':
			// a comment runs to the end of its line (and may hold braces)
			if j := strings.IndexByte(conf[i:], '\n'); j >= 0 {
				i += j
			}
		}
	}
	return "", 0, fmt.Errorf("block %s: unbalanced braces", name)
}

func (c *cluster) start(n *node) error {
	p, err := startProc(n.name, c.bin, []string{"-c", n.conf}, c.env, n.log)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// kill stops a node abruptly (SIGKILL), as a crash would.
func (c *cluster) kill(name string) error {
	for _, n := range c.nodes {
		if n.name == name {
			n.proc.kill()
			return nil
		}
	}
	return fmt.Errorf("no node %s", name)
}

// restart starts a killed node again on its store.
func (c *cluster) restart(name string) error {
	for _, n := range c.nodes {
		if n.name == name {
			return c.start(n)
		}
	}
	return fmt.Errorf("no node %s", name)
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n.proc != nil {
			n.proc.stop(15 * time.Second)
		}
	}
}

// waitHealthy waits until every running node answers its JetStream health check.
func (c *cluster) waitHealthy(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, n := range c.nodes {
		if n.proc == nil || n.proc.exited() {
			continue
		}
		u := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.http)
		for {
			resp, err := http.Get(u)
			last := ""
			if err == nil {
				var body bytes.Buffer
				_, _ = body.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				last = body.String()
			} else {
				last = err.Error()
			}
			if n.proc.exited() {
				return fmt.Errorf("nats-server %s exited (log %s)", n.name, n.log)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nats-server %s not healthy within %v: %s", n.name, within, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// url is the client URL of every node with a user's credentials.
func (c *cluster) url(user string) string {
	var urls []string
	for _, n := range c.nodes {
		u := url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", n.client), User: url.UserPassword(user, c.passwords[user])}
		urls = append(urls, u.String())
	}
	return strings.Join(urls, ",")
}

func (c *cluster) pids() map[string]int {
	m := map[string]int{}
	for _, n := range c.nodes {
		if n.proc != nil && !n.proc.exited() {
			m[n.name] = n.proc.pid()
		}
	}
	return m
}

// violations counts the permission violations the nodes logged.
func (c *cluster) violations() int {
	k := 0
	for _, n := range c.nodes {
		b, _ := os.ReadFile(n.log)
		k += bytes.Count(b, []byte("Publish Violation")) + bytes.Count(b, []byte("Subscription Violation"))
	}
	return k
}

func template(file string, repl [][2]string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	s := string(b)
	for _, r := range repl {
		if n := strings.Count(s, r[0]); n != 1 {
			return "", fmt.Errorf("%s has %d occurrences of %q, want 1: update fleetscale's template", file, n, r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// proc is a child process with its output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(name, bin string, args, env []string, logFile string) (*proc, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// The children die with the harness, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process group and waits.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGINT, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}
