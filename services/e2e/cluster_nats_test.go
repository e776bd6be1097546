package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// This file runs the NATS configurations of deploy/nats as real nats-server
// processes on loopback ports: the shipped files, with only their addresses
// and store directory rewritten.

// deployDir is deploy/nats, from services/e2e.
const deployDir = "../../deploy/nats"

// natsRoles are the users of deploy/nats/auth.conf (leaf: the leaf nodes
// of the sites of tenant "default", leaf_test.go).
var natsRoles = []string{"admin", "fingerprint", "drift", "audit", "alerting", "notify", "proxy", "leaf", "sys"}

// natsInboxPrefixes are the reply prefixes the commands set for each role
// (proxy: its tenant, "default"), the only inboxes auth.conf lets the role
// subscribe to. The admin and alerting use the default _INBOX: the admin may
// subscribe to anything, alerting makes no requests.
var natsInboxPrefixes = map[string]string{
	"fingerprint": "_INBOX_fingerprint",
	"drift":       "_INBOX_drift",
	"audit":       "_INBOX_audit",
	"notify":      "_INBOX_notify",
	"proxy":       "_INBOX_proxy_default",
}

// natsBinary is the nats-server that scripts/deps.d/nats-server.sh builds
// from the Go module this test links (the same version).
func natsBinary(t testing.TB) string {
	t.Helper()
	bin, err := filepath.Abs("../../.data/bin/nats-server")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s cannot run (%v): build it with `make deps` or scripts/deps.d/nats-server.sh", bin, err)
	}
	if got, want := strings.TrimSpace(string(out)), "nats-server: v"+server.VERSION; got != want {
		t.Fatalf("%s is %q, want %q: rebuild it with scripts/deps.d/nats-server.sh", bin, got, want)
	}
	return bin
}

// natsDeployment is a set of nats-server processes and the role passwords.
type natsDeployment struct {
	bin       string
	dir       string
	passwords map[string]string // role -> password the clients send
	env       []string          // the servers' environment: bcrypt hashes
	nodes     []*natsNode
}

type natsNode struct {
	name                 string
	client, route, http  int
	leaf                 int // the sites' leafnodes port (hub nodes)
	conf, store, logFile string
	cmd                  *exec.Cmd
	done                 chan struct{}
}

func newNATSDeployment(t testing.TB) *natsDeployment {
	t.Helper()
	return newNATSDeploymentOf(t, filepath.Join(deployDir, "auth.conf"), natsRoles)
}

// newNATSDeploymentOf is a deployment with the permissions file authFile
// and a password for each of roles, as the environment of nats-server
// holds them.
func newNATSDeploymentOf(t testing.TB, authFile string, roles []string) *natsDeployment {
	t.Helper()
	d := &natsDeployment{bin: natsBinary(t), dir: t.TempDir(), passwords: map[string]string{}}
	auth, err := os.ReadFile(authFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "auth.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		d.passwords[r] = hex.EncodeToString(b)
		// The server holds only the bcrypt hash, as docs/deployment.md advises.
		h, err := bcrypt.GenerateFromPassword([]byte(d.passwords[r]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		d.env = append(d.env, "MCPDRIFT_NATS_"+strings.ToUpper(r)+"_PASSWORD="+string(h))
	}
	return d
}

// natsFreePorts reserves n loopback ports and releases them for the servers.
func natsFreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := chtest.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// template rewrites a shipped configuration; every replacement must match
// exactly once, so a change to the shipped file that the test no longer
// understands fails here rather than testing something else.
func natsTemplate(t testing.TB, file string, repl [][2]string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range repl {
		if n := strings.Count(s, r[0]); n != 1 {
			t.Fatalf("%s has %d occurrences of %q, want 1: update the test's template", file, n, r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// startSingle boots deploy/nats/nats.conf.
func startNATSSingle(t testing.TB) *natsDeployment {
	t.Helper()
	d := newNATSDeployment(t)
	p := natsFreePorts(t, 2)
	n := &natsNode{name: "nats-1", client: p[0], http: p[1], store: filepath.Join(d.dir, "store-1")}
	conf := natsTemplate(t, filepath.Join(deployDir, "nats.conf"), [][2]string{
		{`listen = "0.0.0.0:4222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.client)},
		{`http = "127.0.0.1:8222"`, fmt.Sprintf(`http = "127.0.0.1:%d"`, n.http)},
		{`store_dir = "/var/lib/nats"`, fmt.Sprintf(`store_dir = %q`, n.store)},
	})
	d.start(t, n, conf)
	d.waitHealthy(t)
	return d
}

// startCluster boots deploy/nats/cluster/nats-{1,2,3}.conf.
func startNATSCluster(t testing.TB) *natsDeployment {
	t.Helper()
	d := newNATSDeployment(t)
	p := natsFreePorts(t, 12)
	for i := range 3 {
		d.nodes = append(d.nodes, &natsNode{name: fmt.Sprintf("nats-%d", i+1), client: p[4*i], route: p[4*i+1], http: p[4*i+2], leaf: p[4*i+3],
			store: filepath.Join(d.dir, fmt.Sprintf("store-%d", i+1))})
	}
	nodes := d.nodes
	d.nodes = nil
	for i, n := range nodes {
		repl := [][2]string{
			{`listen = "0.0.0.0:4222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.client)},
			{`http = "0.0.0.0:8222"`, fmt.Sprintf(`http = "127.0.0.1:%d"`, n.http)},
			{`listen = "0.0.0.0:6222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.route)},
			{`listen = "0.0.0.0:7422"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.leaf)},
			{`store_dir = "/var/lib/nats"`, fmt.Sprintf(`store_dir = %q`, n.store)},
			{`include ../auth.conf`, `include auth.conf`},
		}
		for _, o := range nodes {
			repl = append(repl, [2]string{fmt.Sprintf(`"nats-route://%s:6222"`, o.name), fmt.Sprintf(`"nats-route://127.0.0.1:%d"`, o.route)})
		}
		d.start(t, n, natsTemplate(t, filepath.Join(deployDir, "cluster", fmt.Sprintf("nats-%d.conf", i+1)), repl))
	}
	d.waitHealthy(t)
	return d
}

func (d *natsDeployment) start(t testing.TB, n *natsNode, conf string) {
	t.Helper()
	n.conf = filepath.Join(d.dir, n.name+".conf")
	n.logFile = filepath.Join(d.dir, n.name+".log")
	if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(n.logFile)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(d.bin, "-c", n.conf)
	n.cmd.Env = append(os.Environ(), d.env...)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); logf.Close(); close(n.done) }()
	d.nodes = append(d.nodes, n)
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(os.Interrupt)
		select {
		case <-n.done:
		case <-time.After(15 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
			t.Errorf("nats-server %s did not stop on SIGINT within 15s", n.name)
		}
		if t.Failed() {
			b, _ := os.ReadFile(n.logFile)
			t.Logf("nats-server %s log (last 4 KiB):\n%s", n.name, natsLogTail(b, 4096))
		}
	})
}

func natsLogTail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// kill stops a node abruptly (SIGKILL), as a crash would.
func (d *natsDeployment) kill(t testing.TB, name string) {
	t.Helper()
	for _, n := range d.nodes {
		if n.name == name {
			_ = n.cmd.Process.Kill()
			<-n.done
			return
		}
	}
	t.Fatalf("no node %s", name)
}

// waitHealthy waits until every running node answers its JetStream health
// check (meta leader known, streams current).
func (d *natsDeployment) waitHealthy(t testing.TB) {
	t.Helper()
	for _, n := range d.nodes {
		u := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.http)
		poll.Eventually(t, 30*time.Second, func() error {
			select {
			case <-n.done:
				b, _ := os.ReadFile(n.logFile)
				t.Fatalf("nats-server %s exited:\n%s", n.name, natsLogTail(b, 4096))
			default:
			}
			resp, err := http.Get(u)
			if err != nil {
				return awaiting(false, "nats-server "+n.name+" healthy at "+u, err.Error())
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			return awaiting(resp.StatusCode == http.StatusOK, "nats-server "+n.name+" healthy at "+u, body.String())
		})
	}
}

// noViolations fails the test if a server logged a permissions violation:
// every role's rights suffice for what its command does.
func (d *natsDeployment) noViolations(t testing.TB) {
	t.Helper()
	for _, n := range d.nodes {
		b, err := os.ReadFile(n.logFile)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "Publish Violation") || strings.Contains(l, "Subscription Violation") {
				t.Errorf("nats-server %s: %s", n.name, l)
			}
		}
	}
}

// url is the client URL of every node, with a role's credentials
// (the proxy and services take them in MCPDRIFT_NATS_URL).
func (d *natsDeployment) url(role string) string {
	var urls []string
	for _, n := range d.nodes {
		u := url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", n.client), User: url.UserPassword(role, d.passwords[role])}
		urls = append(urls, u.String())
	}
	return strings.Join(urls, ",")
}

// natsRoleConn is a connection with a role's credentials that records the
// server's asynchronous errors (permission violations).
type natsRoleConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// connect connects as role, with the role's inbox prefix as its command
// sets it (natsInboxPrefixes).
func (d *natsDeployment) connect(t testing.TB, role string) *natsRoleConn {
	t.Helper()
	c := &natsRoleConn{errs: make(chan error, 64)}
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		})}
	if p, ok := natsInboxPrefixes[role]; ok {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(d.url(role), opts...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// violationLike waits for the server to report a permissions violation on
// a subject the pattern matches (* one token, > the rest): the server answers
// a denied publish or subscribe with one.
func (c *natsRoleConn) violationLike(t testing.TB, kind, pattern string) {
	t.Helper()
	prefix := "permissions violation for " + kind + " to "
	var seen []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-c.errs:
			msg := strings.ToLower(err.Error())
			seen = append(seen, err.Error())
			i := strings.Index(msg, prefix)
			if i < 0 {
				continue
			}
			subject, err := strconv.Unquote(err.Error()[i+len(prefix):])
			if err == nil && natsSubjectMatch(pattern, subject) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s violation on %s reported by the server within 10s; errors: %q", kind, pattern, seen)
		}
	}
}

// natsSubjectMatch matches a subject against a pattern with NATS wildcards.
func natsSubjectMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

// opCtx bounds one NATS operation.
func natsOpCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
