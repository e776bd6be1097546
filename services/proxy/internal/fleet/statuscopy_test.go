package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const copyProxy = "node1"

// openCopies opens status copies in dir with a fast writer.
func openCopies(t testing.TB, dir string, mod func(*CopyConfig)) *StatusCopies {
	t.Helper()
	cfg := CopyConfig{Dir: dir, Proxy: copyProxy, MaxAge: time.Hour, Debounce: 5 * time.Millisecond, Refresh: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := OpenStatusCopies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// offlineJS is a JetStream context whose connection never connects: NATS
// is unreachable.
func offlineJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// gateWithCopy is a gate of server, on js, reading its copy from c, and
// its status watch.
func gateWithCopy(t testing.TB, js jetstream.JetStream, server string, c *StatusCopies) (*Gate, *StatusWatch) {
	t.Helper()
	g, w := watchedGate(t, js, tenant, server)
	g.UseCopies(c)
	return g, w
}

// serverJSON is a server record.
func serverJSON(held bool) []byte {
	return fmt.Appendf(nil, `{"tenant":%q,"server":"s","held":%v,"updated_at_ms":1}`, tenant, held)
}

// writeCopy writes a copy of server as a gate would: the server record
// (nil: none) and the variants' records, last live at live.
func writeCopy(t testing.TB, c *StatusCopies, tnt, server string, hold []byte, variants map[string][]byte, live time.Time) {
	t.Helper()
	doc := &copyDoc{Tenant: tnt, Server: server, Proxy: c.cfg.Proxy, LiveAtMs: live.UnixMilli()}
	if hold != nil {
		doc.Hold = &copyEntry{Key: bus.ServerKey(tnt, server), Revision: 1, Value: hold}
	}
	rev := uint64(2)
	for _, v := range slices.Sorted(maps.Keys(variants)) {
		doc.Variants = append(doc.Variants, copyEntry{Key: bus.StatusKey(tnt, server, v), Revision: rev, Value: variants[v]})
		rev++
	}
	if err := c.write(doc); err != nil {
		t.Fatal(err)
	}
}

// want is an expected answer of a gate.
type want struct {
	ok     bool
	status string
	serve  bool
}

func checkView(t *testing.T, g *Gate, variant string, w want, items map[string]int) {
	t.Helper()
	start := time.Now()
	v, ok := view(g, variant, 2*time.Second)
	if ok != w.ok || v.Status != w.status || v.Serve != w.serve {
		t.Errorf("variant %q: %v; want known %v, %s, serve %v", variant, seen("", v, ok), w.ok, w.status, w.serve)
	}
	if v.Alert {
		t.Errorf("variant %q: alert from the copy; the copy never serves items outside the baseline", variant)
	}
	if v.Withhold {
		t.Errorf("variant %q: withhold_changed from the copy; a drift the proxy sees closes the whole server", variant)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("variant %q: answered after %v; with NATS down the copy answers at once", variant, waited)
	}
	if n, ok := items[variant]; ok && len(v.Items) != n {
		t.Errorf("variant %q: %d baseline items, want %d", variant, len(v.Items), n)
	}
}

// TestGateRestartsFromCopy: a gate that knew its server, stopped, and
// started again while NATS is down answers from its copy: verified is
// served with its baseline items, everything else is closed, and a
// variant the copy does not hold is unknown. When NATS comes back the
// watch's values replace the copy at once.
func TestGateRestartsFromCopy(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	dir := filepath.Join(t.TempDir(), "status")
	c := openCopies(t, dir, nil)
	server := "mem"
	put := func(variant string, value []byte) {
		t.Helper()
		if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, server, variant), value); err != nil {
			t.Fatal(err)
		}
	}
	put("default", recordJSON("verified", "block", sf))
	put("valert", recordJSON("verified", "alert", sf))
	put("gone", recordJSON("verified", "block", sf))
	put("vq", recordJSON("quarantined", "block", sf))
	put("vc", recordJSON("changed", "alert", sf))              // served live under alert; closed from the copy
	put("vw", recordJSON("changed", "withhold_changed", sf))   // served live (its unchanged items); closed from the copy
	put("vwv", recordJSON("verified", "withhold_changed", sf)) // served from the copy, as under block
	put("vp", statusJSON("pending", "block", ""))
	put("noitems", statusJSON("verified", "block", sf.Hash.String()))
	put("unreadable", []byte(`{"status":`))

	first, firstWatch := gateWithCopy(t, b.JS, server, c)
	stopFirst := runInBackground(t, firstWatch.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		doc, err := c.read(tenant, server)
		if err != nil {
			return fmt.Errorf("the copy: %w", err)
		}
		if len(doc.Variants) != 10 {
			return fmt.Errorf("the copy holds %d variants, want 10", len(doc.Variants))
		}
		return nil
	})
	if v, ok := view(first, "vc", time.Second); !ok || !v.Serve || !v.Alert {
		t.Fatalf("live, vc (changed under alert) = %v; want served under alert", seen("", v, ok))
	}
	if v, ok := view(first, "vw", time.Second); !ok || !v.Serve || !v.Withhold {
		t.Fatalf("live, vw (changed under withhold_changed) = %v; want served under withhold_changed", seen("", v, ok))
	}
	stopFirst()
	// While the proxy is down the pipeline quarantines default and
	// deletes gone; NATS then goes away.
	put("default", recordJSON("quarantined", "block", sf))
	if err := b.Handles.Status.Delete(ctx, bus.StatusKey(tenant, server, "gone")); err != nil {
		t.Fatal(err)
	}
	port := stopBus(t, b)

	g, w := gateWithCopy(t, b.JS, server, c)
	runInBackground(t, w.Run)
	items := map[string]int{"default": len(sf.Items), "valert": len(sf.Items), "gone": len(sf.Items), "vq": 0, "vc": 0, "vw": 0, "vwv": len(sf.Items)}
	for _, tt := range []struct {
		variant string
		want    want
	}{
		{"default", want{true, "verified", true}},
		{"valert", want{true, "verified", true}}, // served by its baseline items only
		{"gone", want{true, "verified", true}},
		{"vq", want{true, "quarantined", false}},
		{"vc", want{true, "changed", false}},
		{"vw", want{true, "changed", false}},
		{"vwv", want{true, "verified", true}},
		{"vp", want{true, "pending", false}},
		{"noitems", want{true, "verified", false}},
		{"unreadable", want{true, "unknown", false}},
		{"never", want{false, "", false}},
		{"", want{false, "", false}},
	} {
		t.Run("copy_"+tt.variant, func(t *testing.T) { checkView(t, g, tt.variant, tt.want, items) })
	}
	if v, _ := view(g, "default", time.Second); !maps.Equal(v.Items, itemsOf(sf)) {
		t.Errorf("default from the copy: the items are not the baseline's")
	}
	if st := g.CopyStats(); !st.InUse || g.Watching() || g.Serving() {
		t.Errorf("from the copy: stats %+v, watching %v, serving %v; want in use, not watching, not serving (vq is closed)", st, g.Watching(), g.Serving())
	}

	restartBus(t, b, port)
	poll.Eventually(t, 30*time.Second, func() error {
		if !g.Watching() {
			return errors.New("the watch has not loaded since NATS came back")
		}
		return nil
	})
	for _, tt := range []struct {
		variant string
		want    want
	}{
		{"default", want{true, "quarantined", false}},
		{"gone", want{false, "", false}},
		{"vc", want{true, "changed", true}},
		{"vw", want{true, "changed", true}},
	} {
		t.Run("live_"+tt.variant, func(t *testing.T) {
			v, ok := view(g, tt.variant, 100*time.Millisecond)
			if ok != tt.want.ok || v.Status != tt.want.status || v.Serve != tt.want.serve {
				t.Errorf("once NATS is back: %v; want known %v, %s, serve %v", seen("", v, ok), tt.want.ok, tt.want.status, tt.want.serve)
			}
		})
	}
	if g.CopyStats().InUse {
		t.Error("the copy is still in use after the watch loaded")
	}
	// The copy now says what the watch loaded.
	poll.Eventually(t, 10*time.Second, func() error {
		doc, err := c.read(tenant, server)
		if err != nil {
			return err
		}
		for _, e := range doc.Variants {
			if e.Key == bus.StatusKey(tenant, server, "gone") {
				return errors.New("the copy still holds the deleted variant")
			}
			if e.Key == bus.StatusKey(tenant, server, "default") && !bytes.Contains(e.Value, []byte(`"quarantined"`)) {
				return fmt.Errorf("the copy holds default as %s", e.Value)
			}
		}
		return nil
	})
}

// TestGateCopyHeld: a server held in the copy stays held, for variants the
// copy holds and those it does not.
func TestGateCopyHeld(t *testing.T) {
	_, sf := fixture(t, "memory/2025.9.25.json")
	c := openCopies(t, t.TempDir(), nil)
	for _, tt := range []struct {
		name string
		hold []byte
		want want
	}{
		{"held", serverJSON(true), want{true, "quarantined", false}},
		{"unreadable_holds", []byte(`{"held":`), want{true, "quarantined", false}},
		{"released", serverJSON(false), want{true, "verified", true}},
		{"none", nil, want{true, "verified", true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server := "h" + tt.name
			writeCopy(t, c, tenant, server, tt.hold, map[string][]byte{"default": recordJSON("verified", "block", sf)}, time.Now())
			g, _ := gateWithCopy(t, offlineJS(t), server, c)
			checkView(t, g, "default", tt.want, nil)
			other := want{false, "", false}
			if tt.want.status == "quarantined" {
				other = tt.want
			}
			checkView(t, g, "other", other, nil)
		})
	}
}

// TestGateCopyRefused: a copy that is not exactly what this proxy wrote
// for this tenant and server, recently, is never used: the gate fails
// closed as without one, and counts why.
func TestGateCopyRefused(t *testing.T) {
	_, sf := fixture(t, "memory/2025.9.25.json")
	verified := map[string][]byte{"default": recordJSON("verified", "block", sf)}
	quarantined := map[string][]byte{"default": recordJSON("quarantined", "block", sf)}
	const server = "fs"
	tests := []struct {
		name   string
		make   func(t *testing.T, dir string, c *StatusCopies) // leaves a copy of fs in dir
		now    time.Duration                                   // the reading proxy's clock, ahead by
		reason string
	}{
		{"byte_flipped", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, tenant, server, nil, verified, time.Now())
			edit(t, c.path(tenant, server), func(b []byte) []byte { b[len(b)-20] ^= 1; return b })
		}, 0, CopyCorrupt},
		{"rewritten_to_verified_without_the_key", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, tenant, server, nil, quarantined, time.Now())
			edit(t, c.path(tenant, server), func(b []byte) []byte {
				head, body, _ := bytes.Cut(b, []byte("\n"))
				var doc copyDoc
				if err := json.Unmarshal(body, &doc); err != nil {
					t.Fatal(err)
				}
				doc.Variants[0].Value = recordJSON("verified", "block", sf)
				body, _ = json.Marshal(doc)
				return append(append(head, '\n'), body...)
			})
		}, 0, CopyCorrupt},
		{"written_with_another_key", func(t *testing.T, dir string, c *StatusCopies) {
			other := openCopies(t, dir, func(cfg *CopyConfig) { cfg.Key = bytes.Repeat([]byte("k"), 32) })
			writeCopy(t, other, tenant, server, nil, verified, time.Now())
		}, 0, CopyCorrupt},
		{"key_file_replaced", func(t *testing.T, dir string, c *StatusCopies) {
			// whoever can write the directory can replace a generated key:
			// the gate's key is read once, so the copy no longer matches
			if err := os.WriteFile(filepath.Join(dir, copyKeyName), bytes.Repeat([]byte("x"), 64), 0o600); err != nil {
				t.Fatal(err)
			}
			writeCopy(t, openCopies(t, dir, nil), tenant, server, nil, verified, time.Now())
		}, 0, CopyCorrupt},
		{"another_server", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, tenant, "other", nil, verified, time.Now())
			rename(t, c.path(tenant, "other"), c.path(tenant, server))
		}, 0, CopyForeign},
		{"another_tenant", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, "globex", server, nil, verified, time.Now())
			rename(t, c.path("globex", server), c.path(tenant, server))
		}, 0, CopyForeign},
		{"another_proxy", func(t *testing.T, dir string, c *StatusCopies) {
			other := openCopies(t, dir, func(cfg *CopyConfig) { cfg.Proxy = "node2" })
			writeCopy(t, other, tenant, server, nil, verified, time.Now())
		}, 0, CopyForeign},
		{"expired", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, tenant, server, nil, verified, time.Now())
		}, time.Hour + time.Minute, CopyExpired},
		{"from_the_future", func(t *testing.T, dir string, c *StatusCopies) {
			writeCopy(t, c, tenant, server, nil, verified, time.Now().Add(time.Hour))
		}, 0, CopyExpired},
		{"not_a_copy", func(t *testing.T, dir string, c *StatusCopies) {
			if err := os.WriteFile(c.path(tenant, server), []byte(`{"status":"verified"}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, 0, CopyCorrupt},
		{"empty", func(t *testing.T, dir string, c *StatusCopies) {
			if err := os.WriteFile(c.path(tenant, server), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, 0, CopyCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c := openCopies(t, dir, nil)
			tt.make(t, dir, c)
			reader := openCopies(t, dir, func(cfg *CopyConfig) {
				cfg.Key = c.key
				cfg.Now = func() time.Time { return time.Now().Add(tt.now) }
			})
			g, _ := gateWithCopy(t, offlineJS(t), server, reader)
			checkView(t, g, "default", want{false, "", false}, nil)
			st := g.CopyStats()
			if st.InUse {
				t.Error("the copy is in use")
			}
			for _, r := range CopyReasons {
				if n, w := st.Ignored[r], map[bool]uint64{true: 1}[r == tt.reason]; n != w {
					t.Errorf("ignored %s: %d, want %d", r, n, w)
				}
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		c := openCopies(t, t.TempDir(), nil)
		writeCopy(t, c, tenant, server, nil, verified, time.Now())
		offline, _ := gateWithCopy(t, offlineJS(t), server, c)
		checkView(t, offline, "default", want{true, "verified", true}, nil)
	})
}

// TestGateCopyExpiresInUse: a copy that grows older than the maximum age
// while NATS stays away stops answering.
func TestGateCopyExpiresInUse(t *testing.T) {
	_, sf := fixture(t, "memory/2025.9.25.json")
	var ahead atomic.Int64
	c := openCopies(t, t.TempDir(), func(cfg *CopyConfig) {
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	writeCopy(t, c, tenant, "fs", nil, map[string][]byte{"default": recordJSON("verified", "block", sf)}, time.Now())
	g, _ := gateWithCopy(t, offlineJS(t), "fs", c)
	checkView(t, g, "default", want{true, "verified", true}, nil)
	ahead.Store(int64(time.Hour))
	checkView(t, g, "default", want{false, "", false}, nil)
	if st := g.CopyStats(); st.InUse || st.Ignored[CopyExpired] != 1 {
		t.Errorf("after the copy expired: %+v", st)
	}
	ahead.Store(0) // a clock set back does not bring it back
	checkView(t, g, "default", want{false, "", false}, nil)
}

// TestGateCopyNotWhileConnected: with NATS up, the copy never answers,
// not even while the watch loads: a variant the copy serves and the bucket
// does not hold is unknown.
func TestGateCopyNotWhileConnected(t *testing.T) {
	b := natstest.StartBus(t)
	_, sf := fixture(t, "memory/2025.9.25.json")
	c := openCopies(t, t.TempDir(), nil)
	writeCopy(t, c, tenant, "fs", nil, map[string][]byte{"default": recordJSON("verified", "block", sf)}, time.Now())
	g, w := gateWithCopy(t, b.JS, "fs", c)
	runInBackground(t, w.Run)
	if v, ok := g.View(context.Background(), "default", false, 5*time.Second); ok {
		t.Fatalf("connected, a variant only the copy holds: %v; want unknown", seen("", v, ok))
	}
	if g.CopyStats().InUse {
		t.Error("the copy is in use while connected")
	}
}

// TestGateCopyWrittenOnStop: changes that come together are written once
// the writer's delay has passed, and the last ones before the gate stops
// are in the copy, even with a long delay.
func TestGateCopyWrittenOnStop(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	_, sf := fixture(t, "memory/2025.9.25.json")
	c := openCopies(t, t.TempDir(), func(cfg *CopyConfig) { cfg.Debounce, cfg.Refresh = time.Hour, time.Hour })
	g, w := gateWithCopy(t, b.JS, "fs", c)
	stop := runInBackground(t, w.Run)
	poll.Eventually(t, 10*time.Second, func() error {
		if !g.Watching() {
			return errors.New("not watching")
		}
		return nil
	})
	for i := range 20 {
		st := "verified"
		if i == 19 {
			st = "quarantined"
		}
		if _, err := b.Handles.Status.Put(ctx, bus.StatusKey(tenant, "fs", "default"), recordJSON(st, "block", sf)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, func() error {
		v, ok := view(g, "default", time.Second)
		if !ok || v.Status != "quarantined" {
			return seen("quarantined", v, ok)
		}
		return nil
	})
	if _, err := os.Stat(c.path(tenant, "fs")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy was written before the writer's delay: %v", err)
	}
	stop()
	doc, err := c.read(tenant, "fs")
	if err != nil {
		t.Fatalf("after the gate stopped: %v", err)
	}
	if len(doc.Variants) != 1 || !bytes.Contains(doc.Variants[0].Value, []byte(`"quarantined"`)) {
		t.Errorf("the copy after the gate stopped: %+v", doc.Variants)
	}
	if time.Since(time.UnixMilli(doc.LiveAtMs)) > 10*time.Second {
		t.Errorf("the copy was last live at %v", time.UnixMilli(doc.LiveAtMs))
	}
	if fi, err := os.Stat(c.path(tenant, "fs")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the copy's mode: %v %v", fi.Mode(), err)
	}
}

func TestStatusCopyKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "status")
	a := openCopies(t, dir, nil)
	fi, err := os.Stat(filepath.Join(dir, copyKeyName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the generated key: %v %v; want mode 0600", fi, err)
	}
	if d, err := os.Stat(dir); err != nil || d.Mode().Perm() != 0o700 {
		t.Errorf("the directory: %v %v; want mode 0700", d, err)
	}
	if b := openCopies(t, dir, nil); !bytes.Equal(a.key, b.key) {
		t.Error("a second proxy generated another key")
	}
	if _, err := OpenStatusCopies(CopyConfig{Dir: dir, Proxy: copyProxy, MaxAge: time.Hour, Key: []byte("short")}); err == nil {
		t.Error("a 5-byte key was taken")
	}
	// A crashed writer's temporary file goes; a running one's stays.
	stale, fresh := filepath.Join(dir, ".acme.fs-1.tmp"), filepath.Join(dir, ".acme.fs-2.tmp")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(stale, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	openCopies(t, dir, nil)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stale temporary file is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh temporary file was removed: %v", err)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("  0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if key, err := ReadCopyKey(keyFile); err != nil || string(key) != "0123456789abcdef0123456789abcdef" {
		t.Errorf("ReadCopyKey = %q, %v", key, err)
	}
}

func FuzzReadCopy(f *testing.F) {
	_, sf := fixture(f, "memory/2025.9.25.json")
	dir := f.TempDir()
	c := openCopies(f, dir, nil)
	writeCopy(f, c, tenant, "fs", serverJSON(false), map[string][]byte{"default": recordJSON("verified", "block", sf)}, time.Now())
	valid, err := os.ReadFile(c.path(tenant, "fs"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(copyFormat + " 00\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		c := openCopies(t, dir, func(cfg *CopyConfig) { cfg.Key = bytes.Repeat([]byte("k"), 32) })
		if err := os.WriteFile(c.path(tenant, "fs"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		doc, err := c.read(tenant, "fs")
		var ce *copyError
		if err != nil && !errors.As(err, &ce) {
			t.Fatalf("read: %v, not a reason to ignore the copy", err)
		}
		if err == nil && (doc.Tenant != tenant || doc.Server != "fs") {
			t.Fatalf("read a copy of %s/%s", doc.Tenant, doc.Server)
		}
	})
}

func edit(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
