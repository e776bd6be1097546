package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestDeployConfigsValid: nats-server accepts every shipped configuration
// (its own check, -t), with the passwords auth.conf requires.
func TestDeployConfigsValid(t *testing.T) {
	d := newNATSDeployment(t)
	for _, f := range []string{"nats.conf", "cluster/nats-1.conf", "cluster/nats-2.conf", "cluster/nats-3.conf", "leaf/leaf.conf"} {
		t.Run(strings.NewReplacer("/", "_", ".", "_").Replace(f), func(t *testing.T) {
			cmd := exec.Command(d.bin, "-t", "-c", filepath.Join(deployDir, f))
			// (the leaf node reads the hub's URL, with its leaf user's
			// credentials, from the environment too)
			cmd.Env = append(os.Environ(), append(d.env, "MCPDRIFT_NATS_HUB_URL=nats-leaf://leaf:secret@nats-1:7422")...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nats-server -t -c %s: %v\n%s", f, err, out)
			}
		})
	}
}

// TestLeafConfigs: the leaf node's configuration agrees with the hub's and
// with what bus.SetupSite creates. A proxy has the same rights on a leaf
// as on the hub (leaf/auth.conf copies auth.conf's PROXY_DEFAULT); the hub
// runs the JetStream domain the mirrors name; the hub's leaf user may
// create exactly the mirrors' consumers (filtered to its tenant, through
// that domain) and receive their deliveries.
func TestLeafConfigs(t *testing.T) {
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	block := func(file, name string) string {
		s := read(file)
		i := strings.Index(s, "\n"+name+" = {")
		if i < 0 {
			t.Fatalf("%s has no %s block", file, name)
		}
		j := strings.Index(s[i:], "\n}\n")
		if j < 0 {
			t.Fatalf("%s: %s block has no end", file, name)
		}
		return s[i : i+j+3]
	}
	if hub, leaf := block("auth.conf", "PROXY_DEFAULT"), block("leaf/auth.conf", "PROXY_DEFAULT"); hub != leaf {
		t.Errorf("leaf/auth.conf's PROXY_DEFAULT differs from auth.conf's: copy it again\nhub:\n%s\nleaf:\n%s", hub, leaf)
	}
	for _, f := range []string{"cluster/nats-1.conf", "cluster/nats-2.conf", "cluster/nats-3.conf"} {
		if !strings.Contains(read(f), "\n  domain = "+bus.HubDomain+"\n") {
			t.Errorf("%s does not run the JetStream domain %q that the sites' mirrors name (bus.HubDomain)", f, bus.HubDomain)
		}
	}
	leafPerms := block("auth.conf", "LEAF_DEFAULT")
	want := []string{bus.MirrorDeliverPrefix("default") + ".>", "_INBOX_proxy_default.>"}
	for _, kc := range bus.SiteBuckets(bus.SiteConfig{Tenant: "default"}) {
		m := kc.Mirror
		want = append(want, m.External.APIPrefix+".CONSUMER.CREATE."+m.Name+".*."+m.FilterSubject, "$JS.FC."+m.Name+".>")
	}
	for _, w := range want {
		if !strings.Contains(leafPerms, `"`+w+`"`) {
			t.Errorf("auth.conf's LEAF_DEFAULT does not allow %q, which a site's mirrors need (bus.SiteBuckets)", w)
		}
	}
}

// TestClusterRugPull boots the 3-node cluster of deploy/nats/cluster, runs
// the bus setup with the admin's credentials and 3 replicas, then the real
// fingerprint and drift commands and two proxies, each with its own role's
// credentials and only the rights auth.conf gives it. A node is killed, and a
// rug pull behind proxy 1 still withholds the server on proxy 2.
func TestClusterRugPull(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a NATS cluster and runs the commands")
	}
	build(t)
	start := time.Now()
	d := startNATSCluster(t)
	admin := d.connect(t, "admin")

	// The setup step: only the admin may create streams and buckets.
	poll.Eventually(t, 60*time.Second, func() error {
		_, err := bus.Setup(natsOpCtx(t, 10*time.Second), admin.js, bus.Config{Replicas: 3})
		return awaiting(err == nil, "bus setup with 3 replicas", natsErr(err))
	})
	for _, name := range []string{bus.StreamObservations, bus.StreamFingerprints, bus.StreamVerdicts, bus.StreamAdmin,
		"KV_" + bus.BucketStatus, "KV_" + bus.BucketBaselines, "OBJ_" + bus.BucketManifests} {
		s, err := admin.js.Stream(natsOpCtx(t, 10*time.Second), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}

	env := func(role string) []string {
		return []string{"MCPDRIFT_NATS_URL=" + d.url(role), "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_BUS_SETUP=check", "MCPDRIFT_REPLICAS=3"}
	}
	runService(t, "fingerprint", env("fingerprint")...)
	runService(t, "drift", append(env("drift"), "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=ops:read:ops-token-0123456789")...)
	t.Logf("%v: cluster up, bus set up, services started", time.Since(start).Round(time.Millisecond))
	a1 := startProxy(t, d.url("proxy"), "node-1")
	a2 := startProxy(t, d.url("proxy"), "node-2")
	a1.init()
	a2.init()

	// First sight: baseline v1, then both proxies serve.
	poll.Eventually(t, wait, func() error {
		got := a1.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`) && strings.Contains(got, `"name":"rug"`), "proxy 1 serves the approved tools", got)
	})
	poll.Eventually(t, wait, func() error {
		got := a2.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`), "proxy 2 serves the approved tools", got)
	})

	// A node dies: the leader of the status bucket, which every proxy watches.
	kvStream := "KV_" + bus.BucketStatus
	leader := natsStreamLeader(t, admin.js, kvStream)
	d.kill(t, leader)
	t.Logf("%v: killed %s, the leader of %s", time.Since(start).Round(time.Millisecond), leader, kvStream)
	poll.Eventually(t, 30*time.Second, func() error {
		l := natsStreamLeaderNow(admin.js, kvStream)
		return awaiting(l != "" && l != leader, "a new leader of "+kvStream, l)
	})

	// The rug pull behind proxy 1, with one node of three down.
	t.Logf("%v: rug pull", time.Since(start).Round(time.Millisecond))
	a1.call("tools/call", `{"name":"rug","arguments":{}}`)
	poll.Eventually(t, wait, func() error {
		got := a1.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`), "proxy 1 refuses the poisoned tool", got)
	})
	// The pipeline (fingerprint and drift consumers, whose leaders may have
	// been on the dead node) writes the drift, then proxy 2 learns it.
	kv, err := admin.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 60*time.Second, func() error {
		w, err := kv.Watch(natsOpCtx(t, 5*time.Second), "default.files.*")
		if err != nil {
			return awaiting(false, "the drift service records the drift", err.Error())
		}
		defer func() { _ = w.Stop() }()
		var last string
		for e := range w.Updates() {
			if e == nil {
				break // the initial values are all in
			}
			if last = string(e.Value()); strings.Contains(last, `"status":"changed"`) {
				return nil
			}
		}
		return awaiting(false, "the drift service records the drift", last)
	})
	t.Logf("%v: status changed", time.Since(start).Round(time.Millisecond))
	poll.Eventually(t, 30*time.Second, func() error {
		got := a2.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`) && strings.Contains(got, "server_changed"), "proxy 2 withholds the changed server (from the verdict alone)", got)
	})
	t.Logf("%v: proxy 2 withholds the server", time.Since(start).Round(time.Millisecond))
	if got := a2.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) {
		t.Fatalf("proxy 2 still lists tools of a changed server: %s", got)
	}
	// Every status record written through the cluster says so; beside them
	// is the server record (docs/adr/0006), which does not hold the server.
	keys, err := kv.ListKeys(natsOpCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range keys.Keys() {
		e, err := kv.Get(natsOpCtx(t, 10*time.Second), k)
		if k == bus.ServerKey("default", "files") {
			if err != nil || !strings.Contains(string(e.Value()), `"held":false`) {
				t.Fatalf("server record %s after the rug pull: %v %s", k, err, kvValue(e))
			}
			continue
		}
		if err != nil || !strings.HasPrefix(k, "default.files.") || !strings.Contains(string(e.Value()), `"status":"changed"`) {
			t.Fatalf("status record %s after the rug pull: %v %s", k, err, kvValue(e))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no status record after the rug pull")
	}
	d.noViolations(t)
}

func natsStreamLeader(t testing.TB, js jetstream.JetStream, name string) string {
	t.Helper()
	l := natsStreamLeaderNow(js, name)
	if l == "" {
		t.Fatalf("stream %s has no leader", name)
	}
	return l
}

func natsStreamLeaderNow(js jetstream.JetStream, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return ""
	}
	if c := s.CachedInfo().Cluster; c != nil {
		return c.Leader
	}
	return ""
}

func natsErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func kvValue(e jetstream.KeyValueEntry) string {
	if e == nil {
		return "<none>"
	}
	return string(e.Value())
}

// TestNATSRolePermissions boots the single node of deploy/nats/nats.conf
// and checks, role by role, that what each role must do works and that what
// it must not do is refused by the server: above all, a proxy's credentials
// cannot write the status bucket, publish a verdict, or read what other
// roles and tenants have, their replies included: each role makes its
// requests under its own inbox prefix and may subscribe to no other.
func TestNATSRolePermissions(t *testing.T) {
	d := startNATSSingle(t)
	// A proxy with another role's password is not let in.
	if nc, err := nats.Connect(strings.Replace(d.url("proxy"), d.passwords["proxy"], d.passwords["admin"], 1)); err == nil {
		nc.Close()
		t.Fatal("the proxy user connected with the admin's password")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("connecting with a wrong password: %v, want an authorization violation", err)
	}
	admin := d.connect(t, "admin")
	h, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{})
	if err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	const key = "default.files.default"
	record := []byte(`{"tenant":"default","server":"files","variant":"default","status":"verified"}`)

	// Allowed: drift writes the status, fingerprint stores a manifest.
	drift := d.connect(t, "drift")
	dkv, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if err != nil {
		t.Fatalf("drift binds the status bucket: %v", err)
	}
	rev, err := dkv.Put(natsOpCtx(t, 10*time.Second), key, record)
	if err != nil {
		t.Fatalf("drift writes the status bucket: %v", err)
	}
	if _, err := dkv.Put(natsOpCtx(t, 10*time.Second), "acme.files.default", record); err != nil {
		t.Fatalf("drift writes the status bucket: %v", err)
	}
	// Allowed for drift, the review console's reads: the whole status
	// bucket in one watch (the fleet page), and single verdicts and admin
	// actions (the activity page).
	wa, err := dkv.WatchAll(natsOpCtx(t, 10*time.Second), jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatalf("drift watches the status bucket: %v", err)
	}
	for seen := 0; ; seen++ {
		select {
		case e := <-wa.Updates():
			if e != nil {
				continue
			}
			if seen != 2 {
				t.Fatalf("drift's watch of the status bucket: %d entries, want 2", seen)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("drift's watch of the status bucket: no end of the initial values within 10s")
		}
		break
	}
	_ = wa.Stop()
	for _, sub := range []struct{ stream, subject string }{
		{bus.StreamVerdicts, bus.VerdictSubject("default", "files")},
		{bus.StreamAdmin, bus.AdminSubject("default", "files")},
	} {
		ack, err := drift.js.Publish(natsOpCtx(t, 10*time.Second), sub.subject, []byte("{}"))
		if err != nil {
			t.Fatalf("drift publishes on %s: %v", sub.subject, err)
		}
		st, err := drift.js.Stream(natsOpCtx(t, 10*time.Second), sub.stream)
		if err != nil {
			t.Fatalf("drift binds %s: %v", sub.stream, err)
		}
		if _, err := st.GetMsg(natsOpCtx(t, 10*time.Second), ack.Sequence); err != nil {
			t.Fatalf("drift reads message %d of %s: %v", ack.Sequence, sub.stream, err)
		}
	}
	fp := d.connect(t, "fingerprint")
	fos, err := fp.js.ObjectStore(natsOpCtx(t, 10*time.Second), bus.BucketManifests)
	if err != nil {
		t.Fatalf("fingerprint binds the manifest store: %v", err)
	}
	manifest := []byte(`{"tools":[]}`)
	if _, err := fos.PutBytes(natsOpCtx(t, 10*time.Second), "sha256-abc", manifest); err != nil {
		t.Fatalf("fingerprint stores a manifest: %v", err)
	}

	// Allowed for a proxy: publish its observations (listings, compact
	// listings, batches of calls, and single calls as proxies before the
	// batch form did), watch
	// its tenant's status (whose records carry the baselines' item hashes:
	// no manifest read).
	proxy := d.connect(t, "proxy")
	for _, subject := range []string{bus.ListObservationSubject("default", "files"), bus.ListingsSeenSubject("default", "files"),
		bus.CallObservationsSubject("default", "files"), bus.CallObservationSubject("default", "files")} {
		ack, err := proxy.js.Publish(natsOpCtx(t, 10*time.Second), subject, []byte("obs"), jetstream.WithMsgID("obs-"+subject))
		if err != nil || ack.Stream != bus.StreamObservations {
			t.Fatalf("proxy publishes an observation on %s: %v %+v", subject, err, ack)
		}
	}
	pkv, err := proxy.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if err != nil {
		t.Fatalf("proxy binds the status bucket: %v", err)
	}
	w, err := pkv.Watch(natsOpCtx(t, 10*time.Second), "default.files.*")
	if err != nil {
		t.Fatalf("proxy watches its status: %v", err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || e.Key() != key || e.Revision() != rev {
			t.Fatalf("proxy's watch: first entry %v, want %s revision %d", e, key, rev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("proxy's watch: no status within 10s")
	}
	_ = w.Stop()
	// ... and its server's own record (the hold, docs/adr/0006), a watch
	// of its own: one consumer per filter is what the permissions allow.
	if _, err := dkv.Put(natsOpCtx(t, 10*time.Second), "default.files", []byte(`{"held":true}`)); err != nil {
		t.Fatalf("drift writes a server record: %v", err)
	}
	ws, err := pkv.Watch(natsOpCtx(t, 10*time.Second), "default.files")
	if err != nil {
		t.Fatalf("proxy watches its server record: %v", err)
	}
	select {
	case e := <-ws.Updates():
		if e == nil || e.Key() != "default.files" {
			t.Fatalf("proxy's watch of its server record: first entry %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("proxy's watch of its server record: nothing within 10s")
	}
	_ = ws.Stop()
	// ... and, as the proxy does (docs/adr/0010), all of its tenant's keys
	// in one watch; and the baseline versions of its tenant, whose entries
	// hold the item hashes the records name.
	wt, err := pkv.Watch(natsOpCtx(t, 10*time.Second), "default.>")
	if err != nil {
		t.Fatalf("proxy watches its tenant's status: %v", err)
	}
	select {
	case e := <-wt.Updates():
		if e == nil || !strings.HasPrefix(e.Key(), "default.") {
			t.Fatalf("proxy's watch of its tenant: first entry %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("proxy's watch of its tenant: nothing within 10s")
	}
	_ = wt.Stop()
	dbl, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketBaselines)
	if err != nil {
		t.Fatalf("drift binds the baselines bucket: %v", err)
	}
	baselineKey := bus.BaselineKey("default", "files", "default", 1)
	if _, err := dbl.Put(natsOpCtx(t, 10*time.Second), baselineKey, []byte(`{"version":1,"hash":"sha256:a"}`)); err != nil {
		t.Fatalf("drift keeps a baseline version: %v", err)
	}
	pbl, err := proxy.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketBaselines)
	if err != nil {
		t.Fatalf("proxy binds the baselines bucket: %v", err)
	}
	if e, err := pbl.Get(natsOpCtx(t, 10*time.Second), baselineKey); err != nil || !strings.Contains(string(e.Value()), "sha256:a") {
		t.Fatalf("proxy reads its tenant's baseline version: %v", err)
	}

	// The per-call policy: drift writes a tenant's record, the tenant's proxy
	// reads it and watches it.
	dpol, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketPolicy)
	if err != nil {
		t.Fatalf("drift binds the policy bucket: %v", err)
	}
	var polRev uint64
	for _, tenant := range []string{"default", "acme"} {
		r, err := dpol.Put(natsOpCtx(t, 10*time.Second), tenant, []byte(`{"tenant":"`+tenant+`","version":1}`))
		if err != nil {
			t.Fatalf("drift writes the policy of %s: %v", tenant, err)
		}
		if tenant == "default" {
			polRev = r
		}
	}
	if keys, err := dpol.Keys(natsOpCtx(t, 10*time.Second)); err != nil || len(keys) != 2 {
		t.Fatalf("drift lists the policy bucket: %v %v", keys, err)
	}
	ppol, err := proxy.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketPolicy)
	if err != nil {
		t.Fatalf("proxy binds the policy bucket: %v", err)
	}
	if e, err := ppol.Get(natsOpCtx(t, 10*time.Second), "default"); err != nil || e.Key() != "default" {
		t.Fatalf("proxy reads its tenant's policy: %v", err)
	}
	wp, err := ppol.Watch(natsOpCtx(t, 10*time.Second), "default")
	if err != nil {
		t.Fatalf("proxy watches its tenant's policy: %v", err)
	}
	select {
	case e := <-wp.Updates():
		if e == nil || e.Key() != "default" {
			t.Fatalf("proxy's policy watch: first entry %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("proxy's policy watch: nothing within 10s")
	}
	_ = wp.Stop()

	// Approvals of held calls: the proxy asks (request-reply), drift answers
	// it and stores the request, the proxy watches the request's key.
	dsub, err := drift.nc.Subscribe(approval.RequestSubjects, func(m *nats.Msg) { _ = m.Respond([]byte(`{"ok":true}`)) })
	if err != nil {
		t.Fatalf("drift subscribes to approval requests: %v", err)
	}
	if err := drift.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if msg, err := proxy.nc.Request(approval.RequestSubject("default", "files"), []byte(`{}`), 10*time.Second); err != nil || string(msg.Data) != `{"ok":true}` {
		t.Fatalf("proxy asks for an approval and drift answers: %v", err)
	}
	_ = dsub.Unsubscribe()
	dap, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketApprovals)
	if err != nil {
		t.Fatalf("drift binds the approvals bucket: %v", err)
	}
	approvalKey := approval.Key("default", approval.NewID())
	if _, err := dap.Create(natsOpCtx(t, 10*time.Second), approvalKey, []byte(`{}`)); err != nil {
		t.Fatalf("drift stores an approval request: %v", err)
	}
	pap, err := proxy.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketApprovals)
	if err != nil {
		t.Fatalf("proxy binds the approvals bucket: %v", err)
	}
	wap, err := pap.Watch(natsOpCtx(t, 10*time.Second), approvalKey)
	if err != nil {
		t.Fatalf("proxy watches its approval request: %v", err)
	}
	select {
	case e := <-wap.Updates():
		if e == nil || e.Key() != approvalKey {
			t.Fatalf("proxy's approval watch: first entry %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("proxy's approval watch: nothing within 10s")
	}
	_ = wap.Stop()
	// Allowed for drift, the review console's sessions: create at a login,
	// read, delete at a logout.
	dss, err := drift.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketSessions)
	if err != nil {
		t.Fatalf("drift binds the sessions bucket: %v", err)
	}
	sessionKey := strings.Repeat("ab", 32)
	if _, err := dss.Create(natsOpCtx(t, 10*time.Second), sessionKey, []byte(`{}`)); err != nil {
		t.Fatalf("drift stores a console session: %v", err)
	}
	if _, err := dss.Get(natsOpCtx(t, 10*time.Second), sessionKey); err != nil {
		t.Fatalf("drift reads a console session: %v", err)
	}
	if err := dss.Delete(natsOpCtx(t, 10*time.Second), sessionKey); err != nil {
		t.Fatalf("drift deletes a console session: %v", err)
	}

	// Refused, each on a fresh connection so that the violation is its own.
	denied := []struct {
		name, role, kind, subject string
		do                        func(ctx context.Context, c *natsRoleConn) error
	}{
		{"proxy_reads_sessions", "proxy", "publish", "$JS.API.DIRECT.GET.KV_mcpdrift_sessions.$KV.mcpdrift_sessions." + strings.Repeat("ab", 32), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.nc.Request("$JS.API.DIRECT.GET.KV_mcpdrift_sessions.$KV.mcpdrift_sessions."+strings.Repeat("ab", 32), nil, 2*time.Second)
			return err
		}},
		{"proxy_writes_status", "proxy", "publish", "$KV.mcpdrift_status." + key, func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
			if err != nil {
				return nil // binding is allowed: a failure here is a test failure below
			}
			_, err = kv.Put(ctx, key, []byte(`{"status":"verified"}`))
			return err
		}},
		{"proxy_deletes_status", "proxy", "publish", "$KV.mcpdrift_status." + key, func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
			if err != nil {
				return nil
			}
			return kv.Delete(ctx, key)
		}},
		{"proxy_publishes_verdict", "proxy", "publish", bus.VerdictSubject("default", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.VerdictSubject("default", "files"), []byte(`{"serve":true}`))
			return err
		}},
		{"proxy_publishes_fingerprint", "proxy", "publish", bus.FingerprintSubject("default", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.FingerprintSubject("default", "files"), []byte("fp"))
			return err
		}},
		{"proxy_observes_other_tenant", "proxy", "publish", bus.ListObservationSubject("acme", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.ListObservationSubject("acme", "files"), []byte("obs"))
			return err
		}},
		{"proxy_observes_other_tenant_calls", "proxy", "publish", bus.CallObservationsSubject("acme", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.CallObservationsSubject("acme", "files"), []byte("calls"))
			return err
		}},
		{"proxy_observes_other_tenant_seen", "proxy", "publish", bus.ListingsSeenSubject("acme", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.ListingsSeenSubject("acme", "files"), []byte("seen"))
			return err
		}},
		{"proxy_observes_other_tenant_call", "proxy", "publish", bus.CallObservationSubject("acme", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.CallObservationSubject("acme", "files"), []byte("call"))
			return err
		}},
		{"proxy_watches_other_tenant", "proxy", "publish", "$JS.API.CONSUMER.CREATE.KV_mcpdrift_status.*.$KV.mcpdrift_status.acme.files.*", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
			if err != nil {
				return nil
			}
			_, err = kv.Watch(ctx, "acme.files.*")
			return err
		}},
		{"proxy_reads_other_status", "proxy", "publish", "$JS.API.DIRECT.GET.KV_mcpdrift_status.$KV.mcpdrift_status.acme.files.default", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
			if err != nil {
				return nil
			}
			_, err = kv.Get(ctx, "acme.files.default")
			return err
		}},
		{"proxy_reads_other_baseline", "proxy", "publish", "$JS.API.DIRECT.GET.KV_mcpdrift_baselines.$KV.mcpdrift_baselines.acme.files.default.v1", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketBaselines)
			if err != nil {
				return nil
			}
			_, err = kv.Get(ctx, "acme.files.default.v1")
			return err
		}},
		{"proxy_writes_baseline", "proxy", "publish", "$KV.mcpdrift_baselines.default.files.default.v2", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, "$KV.mcpdrift_baselines.default.files.default.v2", []byte(`{}`))
			return err
		}},
		{"proxy_reads_manifests", "proxy", "publish", "$JS.API.STREAM.INFO.OBJ_mcpdrift_manifests", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.ObjectStore(ctx, bus.BucketManifests)
			return err
		}},
		{"proxy_writes_manifest", "proxy", "publish", "$O.mcpdrift_manifests.C.*", func(ctx context.Context, c *natsRoleConn) error {
			// The proxy may not bind the store (above): a chunk published as
			// the object store client would.
			if err := c.nc.Publish("$O.mcpdrift_manifests.C.abc", []byte(`{"tools":[{"name":"evil"}]}`)); err != nil {
				return err
			}
			return c.nc.Flush()
		}},
		{"proxy_reads_observations", "proxy", "subscription", "mcpdrift.obs.>", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.nc.SubscribeSync("mcpdrift.obs.>")
			return err
		}},
		{"proxy_takes_fingerprint_consumer", "proxy", "publish", "$JS.API.CONSUMER.CREATE.MCPDRIFT_OBS.fingerprint.>", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.CreateOrUpdateConsumer(ctx, bus.StreamObservations, jetstream.ConsumerConfig{
				Durable: bus.ConsumerFingerprint, FilterSubject: "mcpdrift.obs.list.>", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"proxy_deletes_stream", "proxy", "publish", "$JS.API.STREAM.DELETE.KV_mcpdrift_status", func(ctx context.Context, c *natsRoleConn) error {
			return c.js.DeleteKeyValue(ctx, bus.BucketStatus)
		}},
		{"proxy_writes_policy", "proxy", "publish", "$KV.mcpdrift_policy.default", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketPolicy)
			if err != nil {
				return nil
			}
			_, err = kv.Put(ctx, "default", []byte(`{"tenant":"default","version":99}`))
			return err
		}},
		{"proxy_reads_other_policy", "proxy", "publish", "$JS.API.DIRECT.GET.KV_mcpdrift_policy.$KV.mcpdrift_policy.acme", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketPolicy)
			if err != nil {
				return nil
			}
			_, err = kv.Get(ctx, "acme")
			return err
		}},
		{"proxy_watches_other_policy", "proxy", "publish", "$JS.API.CONSUMER.CREATE.KV_mcpdrift_policy.*.$KV.mcpdrift_policy.acme", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketPolicy)
			if err != nil {
				return nil
			}
			_, err = kv.Watch(ctx, "acme")
			return err
		}},
		{"proxy_writes_approval", "proxy", "publish", "$KV.mcpdrift_approvals.default.*", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketApprovals)
			if err != nil {
				return nil
			}
			_, err = kv.Put(ctx, approvalKey, []byte(`{"resolution":{"outcome":"approved"}}`))
			return err
		}},
		{"proxy_asks_other_tenant_approval", "proxy", "publish", approval.RequestSubject("acme", "files"), func(ctx context.Context, c *natsRoleConn) error {
			if err := c.nc.Publish(approval.RequestSubject("acme", "files"), []byte(`{}`)); err != nil {
				return err
			}
			return c.nc.Flush()
		}},
		{"proxy_watches_other_approval", "proxy", "publish", "$JS.API.CONSUMER.CREATE.KV_mcpdrift_approvals.*.$KV.mcpdrift_approvals.acme.*", func(ctx context.Context, c *natsRoleConn) error {
			kv, err := c.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketApprovals)
			if err != nil {
				return nil
			}
			_, err = kv.Watch(ctx, approval.Key("acme", approval.NewID()))
			return err
		}},
		{"proxy_answers_approvals", "proxy", "subscription", approval.RequestSubjects, func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.nc.SubscribeSync(approval.RequestSubjects)
			return err
		}},
		{"fingerprint_writes_policy", "fingerprint", "publish", "$KV.mcpdrift_policy.default", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, "$KV.mcpdrift_policy.default", []byte(`{}`))
			return err
		}},
		{"fingerprint_writes_status", "fingerprint", "publish", "$KV.mcpdrift_status." + key, func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, "$KV.mcpdrift_status."+key, []byte(`{"status":"verified"}`))
			return err
		}},
		{"fingerprint_publishes_verdict", "fingerprint", "publish", bus.VerdictSubject("default", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.VerdictSubject("default", "files"), []byte(`{}`))
			return err
		}},
		{"audit_writes_status", "audit", "publish", "$KV.mcpdrift_status." + key, func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, "$KV.mcpdrift_status."+key, []byte(`{}`))
			return err
		}},
		{"audit_takes_drift_consumer", "audit", "publish", "$JS.API.CONSUMER.CREATE.MCPDRIFT_FP.drift.>", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.CreateOrUpdateConsumer(ctx, bus.StreamFingerprints, jetstream.ConsumerConfig{
				Durable: bus.ConsumerDrift, FilterSubject: "mcpdrift.fp.>", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"audit_takes_other_stream", "audit", "publish", "$JS.API.CONSUMER.CREATE.MCPDRIFT_FP." + bus.ConsumerAuditObservations, func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.CreateOrUpdateConsumer(ctx, bus.StreamFingerprints, jetstream.ConsumerConfig{
				Durable: bus.ConsumerAuditObservations, AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"notify_takes_audit_consumer", "notify", "publish", "$JS.API.CONSUMER.CREATE.MCPDRIFT_DRIFT." + bus.ConsumerAuditVerdicts, func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.CreateOrUpdateConsumer(ctx, bus.StreamVerdicts, jetstream.ConsumerConfig{
				Durable: bus.ConsumerAuditVerdicts, AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1})
			return err
		}},
		{"notify_pulls_audit_consumer", "notify", "publish", "$JS.API.CONSUMER.MSG.NEXT.MCPDRIFT_DRIFT." + bus.ConsumerAuditVerdicts, func(ctx context.Context, c *natsRoleConn) error {
			if err := c.nc.Publish("$JS.API.CONSUMER.MSG.NEXT.MCPDRIFT_DRIFT."+bus.ConsumerAuditVerdicts, []byte(`{"batch":1}`)); err != nil {
				return err
			}
			return c.nc.Flush()
		}},
		{"notify_reads_observations", "notify", "publish", "$JS.API.CONSUMER.CREATE.MCPDRIFT_OBS.notify-x", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.CreateOrUpdateConsumer(ctx, bus.StreamObservations, jetstream.ConsumerConfig{
				Durable: "notify-x", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"notify_publishes_verdict", "notify", "publish", bus.VerdictSubject("default", "files"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.VerdictSubject("default", "files"), []byte(`{}`))
			return err
		}},
		{"notify_writes_approval", "notify", "publish", "$KV.mcpdrift_approvals.default.*", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, "$KV.mcpdrift_approvals."+approvalKey, []byte(`{"resolution":{"outcome":"approved"}}`))
			return err
		}},
		{"notify_dead_letters_as_drift", "notify", "publish", bus.DeadLetterSubject("drift"), func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.js.Publish(ctx, bus.DeadLetterSubject("drift"), []byte(`{}`))
			return err
		}},
		{"alerting_publishes_verdict", "alerting", "publish", bus.VerdictSubject("default", "files"), func(ctx context.Context, c *natsRoleConn) error {
			if err := c.nc.Publish(bus.VerdictSubject("default", "files"), []byte(`{"serve":true}`)); err != nil {
				return err
			}
			return c.nc.Flush()
		}},
		{"alerting_reads_observations", "alerting", "subscription", "mcpdrift.obs.>", func(ctx context.Context, c *natsRoleConn) error {
			_, err := c.nc.SubscribeSync("mcpdrift.obs.>")
			return err
		}},
	}
	// Replies: no role may subscribe to the shared inbox, to everything, or
	// to the inbox prefix of another role or tenant, where the replies meant
	// for the others arrive (pulled observations, status watch updates,
	// manifest chunks, acks).
	for _, role := range natsRoles {
		if role == "admin" || role == "sys" {
			continue
		}
		subjects := map[string]string{"all_replies": "_INBOX.>", "one_level": "_INBOX.*", "everything": ">",
			"any_prefix": "*.>", "tenant_acme_replies": "_INBOX_proxy_acme.>"}
		for r, prefix := range natsInboxPrefixes {
			// A site's leaf node carries the replies to its tenant's
			// proxies (leaf_test.go), and only those.
			if r != role && (role != "leaf" || r != "proxy") {
				subjects[r+"_replies"] = prefix + ".>"
				subjects[r+"_one_reply"] = prefix + ".abc"
			}
		}
		for _, name := range sortedMapKeys(subjects) {
			subject := subjects[name]
			denied = append(denied, struct {
				name, role, kind, subject string
				do                        func(ctx context.Context, c *natsRoleConn) error
			}{role + "_reads_" + name, role, "subscription", subject, func(ctx context.Context, c *natsRoleConn) error {
				_, err := c.nc.SubscribeSync(subject)
				return err
			}})
		}
	}
	for _, tc := range denied {
		t.Run(tc.name, func(t *testing.T) {
			c := d.connect(t, tc.role)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			done := make(chan struct{})
			// The client's error varies (a timeout, no answer, none for a
			// plain publish); the server's refusal does not.
			go func() { _ = tc.do(ctx, c); close(done) }()
			c.violationLike(t, tc.kind, tc.subject)
			cancel()
			<-done
		})
	}
	// Nothing a refused write tried took effect.
	akv, _ := admin.js.KeyValue(natsOpCtx(t, 10*time.Second), bus.BucketStatus)
	if e, err := akv.Get(natsOpCtx(t, 10*time.Second), key); err != nil || e.Revision() != rev {
		t.Fatalf("status %s after the refused writes: %v revision %d, want %d", key, err, e.Revision(), rev)
	}
	if got, err := h.Manifests.GetBytes(natsOpCtx(t, 10*time.Second), "sha256-abc"); err != nil || string(got) != string(manifest) {
		t.Fatalf("manifest after a refused write: %v %q", err, got)
	}
	if e, err := h.Policy.Get(natsOpCtx(t, 10*time.Second), "default"); err != nil || e.Revision() != polRev {
		t.Fatalf("policy after a refused write: %v, want revision %d", err, polRev)
	}

	// Allowed: alerting follows verdicts, audit consumes them on its own
	// durable consumer and acks, drift publishes them.
	alerting := d.connect(t, "alerting")
	sub, err := alerting.nc.SubscribeSync("mcpdrift.drift.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := alerting.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(natsOpCtx(t, 10*time.Second), drift.js, bus.VerdictSubject("default", "files"), []byte(`{"status":"STATUS_CHANGED"}`), "verdict-1"); err != nil {
		t.Fatalf("drift publishes a verdict: %v", err)
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil || !strings.Contains(string(m.Data), "STATUS_CHANGED") {
		t.Fatalf("alerting receives the verdict: %v", err)
	}
	audit := d.connect(t, "audit")
	for stream, durable := range map[string]string{bus.StreamObservations: bus.ConsumerAuditObservations,
		bus.StreamVerdicts: bus.ConsumerAuditVerdicts, bus.StreamAdmin: bus.ConsumerAuditAdmin} {
		cons, err := audit.js.CreateOrUpdateConsumer(natsOpCtx(t, 10*time.Second), stream, jetstream.ConsumerConfig{
			Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1})
		if err != nil {
			t.Fatalf("audit creates its consumer on %s: %v", stream, err)
		}
		if stream == bus.StreamAdmin {
			continue // empty
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(natsOpCtx(t, 10*time.Second)); err != nil {
				t.Fatalf("audit acks on %s: %v", stream, err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("audit fetched %d messages from %s, want 1 (%v)", n, stream, batch.Error())
		}
	}
}

// TestProxyStatusNotGranted: a proxy command whose NATS user (auth.conf's
// proxy, granted the tenant "default") is started for another tenant
// cannot watch that tenant's status: it exits 1 with
// status_permission_denied instead of serving nothing for ever.
func TestProxyStatusNotGranted(t *testing.T) {
	d := startNATSSingle(t)
	admin := d.connect(t, "admin")
	if _, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{}); err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), "proxy"), "--tenant", "other", "--server-id", "files", "--proxy-id", "node-1",
		"--outbox-dir", t.TempDir(), "--", os.Args[0])
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+d.url("proxy"), mcptest.Env+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe() // held open: the proxy must stop by itself
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("proxy of a tenant its user is not granted: %v (context %v); want exit status 1\n%s", err, ctx.Err(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "status_permission_denied") {
		t.Errorf("stderr does not name status_permission_denied:\n%s", stderr.String())
	}
}
