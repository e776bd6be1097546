package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// This file runs a site: the leaf node of deploy/nats/leaf as a nats-server
// process, connected to the 3-node hub of deploy/nats/cluster through a TCP
// relay of the test's own, which cuts and heals the link.

// leafRoles are the users of deploy/nats/leaf/auth.conf.
var leafRoles = []string{"admin", "proxy", "sys"}

// startNATSLeaf boots deploy/nats/leaf/leaf.conf with the hub at hubURL
// (nats-leaf://leaf:<password>@host:port) and waits until it is healthy.
func startNATSLeaf(t testing.TB, hubURL string) *natsDeployment {
	t.Helper()
	d := newNATSDeploymentOf(t, filepath.Join(deployDir, "leaf", "auth.conf"), leafRoles)
	d.env = append(d.env, "MCPDRIFT_NATS_HUB_URL="+hubURL)
	p := natsFreePorts(t, 2)
	n := &natsNode{name: "leaf-site1", client: p[0], http: p[1], store: filepath.Join(d.dir, "store")}
	d.start(t, n, natsTemplate(t, filepath.Join(deployDir, "leaf", "leaf.conf"), [][2]string{
		{`listen = "0.0.0.0:4222"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, n.client)},
		{`http = "0.0.0.0:8222"`, fmt.Sprintf(`http = "127.0.0.1:%d"`, n.http)},
		{`store_dir = "/var/lib/nats"`, fmt.Sprintf(`store_dir = %q`, n.store)},
	}))
	d.waitHealthy(t)
	return d
}

// leafLinks is how many leaf connections the leaf node's monitoring
// (/leafz) reports.
func (d *natsDeployment) leafLinks() (int, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/leafz", d.nodes[0].http))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var z struct {
		Leafs int `json:"leafnodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return 0, err
	}
	return z.Leafs, nil
}

// awaitLink polls until the leaf node is linked to the hub (or not).
func (d *natsDeployment) awaitLink(t testing.TB, linked bool) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, func() error {
		n, err := d.leafLinks()
		if err != nil {
			return awaiting(false, fmt.Sprintf("leaf linked %v", linked), err.Error())
		}
		return awaiting((n > 0) == linked, fmt.Sprintf("leaf linked %v", linked), fmt.Sprintf("%d leaf connections", n))
	})
}

// linkRelay forwards the connections it accepts on a loopback port to a
// target. cut closes the listener and every connection (the link is gone);
// heal listens again on the same port.
type linkRelay struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startLinkRelay(t testing.TB, target string) *linkRelay {
	t.Helper()
	r := &linkRelay{t: t, target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	r.heal()
	r.addr = r.ln.Addr().String()
	t.Cleanup(func() { r.cut(); r.wg.Wait() })
	return r
}

func (r *linkRelay) heal() {
	r.t.Helper()
	var ln net.Listener
	// The port was just released by cut: listening again may have to wait
	// for the system to let go of it.
	poll.Eventually(r.t, 10*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", r.addr)
		return awaiting(err == nil, "listening again on "+r.addr, natsErr(err))
	})
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				continue
			}
			if !r.track(c, up) {
				return
			}
			for _, p := range [][2]net.Conn{{up, c}, {c, up}} {
				r.wg.Add(1)
				go func() {
					defer r.wg.Done()
					_, _ = io.Copy(p[0], p[1])
					p[0].Close()
					p[1].Close()
				}()
			}
		}
	}()
}

// track records a pair of connections, or closes them when the relay was
// cut meanwhile.
func (r *linkRelay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *linkRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// startSiteProxy runs the proxy command on stdio in front of the mcptest
// server as serverID, with its outbox (and status copy) in outbox.
func startSiteProxy(t *testing.T, natsURL, proxyID, serverID, outbox string) *agent {
	t.Helper()
	cmd := exec.Command(filepath.Join(build(t), "proxy"), "--server-id", serverID, "--proxy-id", proxyID,
		"--outbox-dir", outbox, "--first-sight-wait", "2s", "--", os.Args[0])
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+natsURL, mcptest.Env+"=1")
	return runAgent(t, cmd, proxyID)
}

// outboxEvent is one event a proxy spooled: its subject and message id.
type outboxEvent struct{ subject, id string }

// spooled lists the events in a proxy's outbox (its header lines,
// proxy/internal/fleet/outbox.go): the status copies beside them, locks and
// temporary files are not events.
func spooled(t testing.TB, dir string) []outboxEvent {
	t.Helper()
	var evs []outboxEvent
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if e.Name() == "status" {
				return filepath.SkipDir
			}
			return nil
		}
		kind := filepath.Ext(e.Name())
		if kind != ".list" && kind != ".call" && !strings.HasPrefix(kind, ".call-") {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // published and removed meanwhile
		}
		if err != nil {
			return err
		}
		defer f.Close()
		line, err := bufio.NewReader(f).ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if fl := strings.Fields(line); len(fl) == 5 && fl[0] == "mcpdrift-outbox/1" {
			evs = append(evs, outboxEvent{subject: fl[1], id: fl[2]})
		} else {
			return fmt.Errorf("%s: header %q", path, line)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the outbox %s: %v", dir, err)
	}
	return evs
}

// streamMsgIDs returns the message id (Nats-Msg-Id) of every message in a
// stream, by subject.
func streamMsgIDs(ctx context.Context, js jetstream.JetStream, stream string) (map[string]string, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	for seq := s.CachedInfo().State.FirstSeq; seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ids[m.Header.Get(jetstream.MsgIDHeader)] = m.Subject
	}
	return ids, nil
}

// statusValues returns the status records under a key filter (a watch's
// initial values), joined, for polls to look into.
func statusValues(ctx context.Context, kv jetstream.KeyValue, filter string, opts ...jetstream.WatchOpt) (string, error) {
	w, err := kv.Watch(ctx, filter, opts...)
	if err != nil {
		return "", err
	}
	defer func() { _ = w.Stop() }()
	var vals []string
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return strings.Join(vals, "\n"), nil
			}
			vals = append(vals, e.Key()+" "+string(e.Value()))
		case <-ctx.Done():
			return strings.Join(vals, "\n"), ctx.Err()
		}
	}
}

// TestLeafSite runs a site: the 3-node hub with the real fingerprint and
// drift commands, a leaf node (deploy/nats/leaf) linked to it through a
// relay, its mirrors of the status created by the site's setup step
// (driftctl bus-setup --site), and real proxies connected to the leaf only, with the
// proxy user of deploy/nats/leaf/auth.conf. A first listing through the
// leaf becomes a baseline on the hub and the leaf's proxies serve it. The
// link is cut: the site's proxies keep serving what is verified, fail
// closed on a changed manifest and on a server never seen, and spool
// their observations; meanwhile a rug pull is seen on the hub. The link
// heals: every spooled observation reaches the hub's stream, the new
// server is baselined and served, and the hub's drift reaches the site.
// Last, the site cannot write the hub's status nor speak for another
// tenant: the hub confines the leaf to its user's rights.
func TestLeafSite(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a NATS cluster and a leaf node, runs the commands")
	}
	build(t)
	start := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), what) }
	hub := startNATSCluster(t)
	admin := hub.connect(t, "admin")
	poll.Eventually(t, 60*time.Second, func() error {
		_, err := bus.Setup(natsOpCtx(t, 10*time.Second), admin.js, bus.Config{Replicas: 3})
		return awaiting(err == nil, "bus setup with 3 replicas", natsErr(err))
	})
	env := func(role string) []string {
		return []string{"MCPDRIFT_NATS_URL=" + hub.url(role), "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_BUS_SETUP=check", "MCPDRIFT_REPLICAS=3"}
	}
	runService(t, "fingerprint", env("fingerprint")...)
	runService(t, "drift", append(env("drift"), "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=ops:read:ops-token-0123456789")...)
	step("hub up, bus set up, services started")

	// The site: its leaf node reaches the hub's node 1 through the relay,
	// as the hub's leaf user.
	relay := startLinkRelay(t, fmt.Sprintf("127.0.0.1:%d", hub.nodes[0].leaf))
	leaf := startNATSLeaf(t, fmt.Sprintf("nats-leaf://leaf:%s@%s", hub.passwords["leaf"], relay.addr))
	leaf.awaitLink(t, true)
	siteAdmin := leaf.connect(t, "admin")
	// The site's setup step, as its admin: the mirrors, in the leaf's
	// domain; run again, it changes nothing.
	for i, want := range []string{"created", "unchanged"} {
		out, err := exec.Command(filepath.Join(build(t), "driftctl"), "bus-setup", "--site", "--tenant", "default",
			"--nats-url", leaf.url("admin")).CombinedOutput()
		if err != nil || strings.Count(string(out), want) != len(bus.SiteObjects()) {
			t.Fatalf("driftctl bus-setup --site, run %d: %v, want every mirror %s:\n%s", i+1, err, want, out)
		}
	}
	siteKV, err := siteAdmin.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	hubKV, err := admin.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	step("leaf linked, mirrors set up")

	// First sight through the leaf: proxy L1's listing becomes baseline v1
	// on the hub, whose status reaches L1 through the leaf's mirror.
	outL1, outL2, outL3 := t.TempDir(), t.TempDir(), t.TempDir()
	l1 := startSiteProxy(t, leaf.url("proxy"), "leaf-1", "files", outL1)
	l1.init()
	poll.Eventually(t, wait, func() error {
		got := l1.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`) && strings.Contains(got, `"name":"rug"`), "site proxy L1 serves the baselined tools", got)
	})
	for name, kv := range map[string]jetstream.KeyValue{"hub": hubKV, "site mirror": siteKV} {
		got, err := statusValues(natsOpCtx(t, 10*time.Second), kv, "default.files.*")
		if err != nil || !strings.Contains(got, `"status":"verified"`) {
			t.Fatalf("%s status of files after first sight: %v %s", name, err, got)
		}
	}
	l2 := startSiteProxy(t, leaf.url("proxy"), "leaf-2", "files", outL2)
	l2.init()
	poll.Eventually(t, wait, func() error {
		got := l2.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"result"`) && !strings.Contains(got, `"isError":true`), "site proxy L2 serves read", got)
	})
	// A proxy on the hub, in front of the same server.
	h1 := startSiteProxy(t, hub.url("proxy"), "hub-1", "files", t.TempDir())
	h1.init()
	poll.Eventually(t, wait, func() error {
		got := h1.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"result"`) && !strings.Contains(got, `"isError":true`), "hub proxy H1 serves read", got)
	})
	hub.noViolations(t)
	leaf.noViolations(t)
	step("first sight through the leaf served")

	// The cut.
	relay.cut()
	leaf.awaitLink(t, false)
	step("link cut")

	// A rug pull on the hub: the drift is recorded there, and cannot reach
	// the site yet.
	h1.call("tools/call", `{"name":"rug","arguments":{}}`)
	poll.Eventually(t, 60*time.Second, func() error {
		got, err := statusValues(natsOpCtx(t, 5*time.Second), hubKV, "default.files.*")
		return awaiting(err == nil && strings.Contains(got, `"status":"changed"`), "the hub records the drift", got)
	})
	step("drift recorded on the hub")

	// The site keeps serving what is verified: L2's upstream never changed.
	if got := l2.call("tools/call", `{"name":"read","arguments":{}}`); strings.Contains(got, `"isError":true`) || !strings.Contains(got, `"result"`) {
		t.Fatalf("site proxy L2 refuses a verified tool while cut: %s", got)
	}
	if got := l2.call("tools/list", "{}"); !strings.Contains(got, `"name":"read"`) {
		t.Fatalf("site proxy L2 withholds verified tools while cut: %s", got)
	}
	// A changed manifest fails closed at once: L1's upstream pulls the rug.
	l1.call("tools/call", `{"name":"rug","arguments":{}}`)
	poll.Eventually(t, wait, func() error {
		got := l1.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`), "site proxy L1 refuses the changed tool while cut", got)
	})
	// A server the site never saw fails closed.
	l3 := startSiteProxy(t, leaf.url("proxy"), "leaf-3", "fresh", outL3)
	l3.init()
	if got := l3.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("site proxy L3 serves a server never baselined while cut: %s", got)
	}
	if got := l3.call("tools/call", `{"name":"read","arguments":{}}`); !strings.Contains(got, `"isError":true`) {
		t.Fatalf("site proxy L3 forwards a call to a server never baselined while cut: %s", got)
	}
	// Everything observed meanwhile waits in the outboxes: the listings of
	// L1 (the changed manifest) and L3 (the new server), and calls.
	var held []outboxEvent
	poll.Eventually(t, wait, func() error {
		held = nil
		for _, dir := range []string{outL1, outL2, outL3} {
			held = append(held, spooled(t, dir)...)
		}
		lists := map[string]bool{}
		for _, ev := range held {
			if strings.HasPrefix(ev.subject, "mcpdrift.obs.list.") {
				lists[ev.subject] = true
			}
		}
		return awaiting(lists[bus.ListObservationSubject("default", "files")] && lists[bus.ListObservationSubject("default", "fresh")],
			"the site's proxies spool the listings of files and fresh", fmt.Sprint(held))
	})
	// The hub has none of them.
	ids, err := streamMsgIDs(natsOpCtx(t, 10*time.Second), admin.js, bus.StreamObservations)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range held {
		if _, ok := ids[ev.id]; ok {
			t.Fatalf("event %s (%s) is in the hub's stream and in an outbox while cut", ev.id, ev.subject)
		}
	}
	step(fmt.Sprintf("site served verified, failed closed on new, spooled %d events", len(held)))

	// The heal.
	relay.heal()
	leaf.awaitLink(t, true)
	step("link healed")

	// Nothing is lost: every spooled event reaches the hub's stream, under
	// its message id, and the outboxes drain.
	poll.Eventually(t, 60*time.Second, func() error {
		ids, err := streamMsgIDs(natsOpCtx(t, 10*time.Second), admin.js, bus.StreamObservations)
		if err != nil {
			return awaiting(false, "the spooled events in the hub's stream", err.Error())
		}
		var missing []string
		for _, ev := range held {
			if subject, ok := ids[ev.id]; !ok || subject != ev.subject {
				missing = append(missing, ev.id+" "+ev.subject)
			}
		}
		return awaiting(len(missing) == 0, fmt.Sprintf("all %d spooled events in %s", len(held), bus.StreamObservations), fmt.Sprint("missing ", missing))
	})
	poll.Eventually(t, wait, func() error {
		var left []outboxEvent
		for _, dir := range []string{outL1, outL2, outL3} {
			left = append(left, spooled(t, dir)...)
		}
		return awaiting(len(left) == 0, "the site's outboxes drain", fmt.Sprint(left))
	})
	step("spooled events arrived")
	// The drift on the hub reaches the site: L2 withholds the server.
	poll.Eventually(t, 30*time.Second, func() error {
		got := l2.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`) && strings.Contains(got, "server_changed"), "site proxy L2 withholds the server changed on the hub while cut", got)
	})
	if got := l2.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("site proxy L2 lists tools of a changed server after the heal: %s", got)
	}
	// The new server, first seen while cut, is baselined on the hub from
	// the spooled listing and served on the site.
	poll.Eventually(t, 60*time.Second, func() error {
		got := l3.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`), "site proxy L3 serves fresh, baselined on the hub", got)
	})
	if got, err := statusValues(natsOpCtx(t, 10*time.Second), hubKV, "default.fresh.*"); err != nil || !strings.Contains(got, `"status":"verified"`) {
		t.Fatalf("hub status of fresh after the heal: %v %s", err, got)
	}
	step("drift and new baseline reached the site")
	hub.noViolations(t)
	leaf.noViolations(t)

	// Confinement: the site's admin has every right on the leaf, but the
	// hub grants the site only its leaf user's. A status write and another
	// tenant's observation through the leaf go nowhere; an observation of
	// the site's tenant sent after them arrives (the link keeps order).
	// (The drift service may still be writing the records: what it writes
	// is not what the site sends, so the check is that no revision of the
	// records ever holds the site's bytes.)
	const forged = `{"status":"verified","forged_by":"site"}`
	for _, subject := range []string{"$KV.mcpdrift_status." + bus.StatusKey("default", "files", "default"), bus.ListObservationSubject("acme", "files")} {
		if err := siteAdmin.nc.Publish(subject, []byte(forged)); err != nil {
			t.Fatal(err)
		}
	}
	if err := siteAdmin.nc.Flush(); err != nil { // the leaf has forwarded them, or dropped them
		t.Fatal(err)
	}
	// (the admin's replies go to _INBOX, which the hub does not send to the
	// site: the sentinel is a proxy's)
	siteProxy := leaf.connect(t, "proxy")
	if _, err := siteProxy.js.Publish(natsOpCtx(t, 10*time.Second), bus.ListObservationSubject("default", "sentinel"), []byte("x"),
		jetstream.WithMsgID("leaf-sentinel")); err != nil {
		t.Fatalf("the site's observation after the refused ones: %v", err)
	}
	ids, err = streamMsgIDs(natsOpCtx(t, 10*time.Second), admin.js, bus.StreamObservations)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(mapValues(ids), bus.ListObservationSubject("acme", "files")) {
		t.Fatal("an observation of tenant acme reached the hub through the site of tenant default")
	}
	if history, err := statusValues(natsOpCtx(t, 10*time.Second), hubKV, "default.files.*", jetstream.IncludeHistory()); err != nil || strings.Contains(history, forged) {
		t.Fatalf("the site wrote the hub's status: %v\n%s", err, history)
	}
	// Nor read another tenant's status: the site's admin may do anything
	// on the leaf, but the hub lets the site's leaf user create consumers
	// of its tenant's keys only. Through the hub's domain, with replies
	// where the hub may send them: a consumer of default's keys is created,
	// one of acme's is refused.
	nc, err := nats.Connect(leaf.url("admin"), nats.CustomInboxPrefix(bus.MirrorDeliverPrefix("default")+".inbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	hubJS, err := jetstream.NewWithDomain(nc, bus.HubDomain)
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"default", "acme"} {
		_, err := hubJS.CreateConsumer(natsOpCtx(t, 5*time.Second), "KV_"+bus.BucketStatus, jetstream.ConsumerConfig{
			Name: "probe-" + tenant, FilterSubject: "$KV." + bus.BucketStatus + "." + tenant + ".>", InactiveThreshold: 10 * time.Second})
		if (err == nil) != (tenant == "default") {
			t.Fatalf("the site creates a consumer of %s's status on the hub: %v", tenant, err)
		}
		if err != nil {
			t.Logf("the site's consumer of %s's status on the hub: %v", tenant, err)
		}
	}
	step("site confined to its tenant")
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
