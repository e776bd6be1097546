package driftsvc

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// TestSlowLaneStallsOnlyItsServers: while one server's fingerprints are
// held up in its worker, with far more of them queued than a lane used to
// hold, another server's fingerprint is still applied (the consumer's
// callback used to block on the full lane and stall every worker).
func TestSlowLaneStallsOnlyItsServers(t *testing.T) {
	e := newEnv(t)
	a := e.manifest(fixA)
	const workers = 2
	slow, fast := "", ""
	for i := 0; slow == "" || fast == ""; i++ {
		name := fmt.Sprintf("s%d", i)
		switch bus.LaneOf(bus.FingerprintSubject("acme", name), workers) {
		case 0:
			if slow == "" {
				slow = name
			}
		case 1:
			if fast == "" {
				fast = name
			}
		}
	}

	svc, err := New(Config{Workers: workers}, Deps{JS: e.js, Handles: e.h})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	slowSubject := bus.FingerprintSubject("acme", slow)
	svc.beforeHandle = func(msg jetstream.Msg) {
		if msg.Subject() == slowSubject {
			<-release
		}
	}
	e.run(svc)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	const held = 300 // several times what a lane's queue held before
	now := time.Now()
	for i := range held {
		e.publish(slow, fmt.Sprintf("slow-%d", i), "", "invalid_json", now, "")
	}
	e.publish(fast, "fast-0", a, "", now, "")
	poll.Eventually(t, 10*time.Second, func() error {
		if r := e.record(svc, fast); r == nil {
			return fmt.Errorf("no record for %s while %s's lane is held", fast, slow)
		}
		return nil
	})
	close(release)
	released = true
	poll.Eventually(t, 20*time.Second, e.consumerDone)
}

// TestManifestCacheIsBounded: the parsed manifests kept stay within their
// byte budget, least recently used going first, and one larger than the
// whole budget is not kept.
func TestManifestCacheIsBounded(t *testing.T) {
	c := newManifestCache(100)
	sf := func(n int) *surface.Surface { return &surface.Surface{Items: make([]surface.Item, n)} }
	c.put("sha256:a", sf(1), 40)
	c.put("sha256:b", sf(2), 40)
	if _, ok := c.get("sha256:a"); !ok { // a is now the most recently used
		t.Fatal("a missing before the budget was reached")
	}
	c.put("sha256:c", sf(3), 40)
	if _, ok := c.get("sha256:b"); ok {
		t.Fatal("b, the least recently used, kept past the budget")
	}
	for _, h := range []string{"sha256:a", "sha256:c"} {
		if _, ok := c.get(h); !ok {
			t.Fatalf("%s evicted, want kept", h)
		}
	}
	c.put("sha256:big", sf(4), 101)
	if _, ok := c.get("sha256:big"); ok {
		t.Fatal("a manifest larger than the budget was kept")
	}
	if n, used := c.len(); n != 2 || used != 80 {
		t.Fatalf("cache holds %d manifests, %d bytes; want 2, 80", n, used)
	}
	for i := range 1000 {
		c.put(fmt.Sprintf("sha256:%d", i), sf(1), 7)
	}
	if n, used := c.len(); used > 100 || n != 14 {
		t.Fatalf("cache holds %d manifests, %d bytes after 1000 puts; want 14 within 100", n, used)
	}
}
