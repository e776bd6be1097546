package ops

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

// serve runs the handler of s on a test server and returns its host:port.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

func TestHealthz(t *testing.T) {
	addr := serve(t, New("test", zerolog.Nop()))
	status, body := opstest.Get(t, addr, "/healthz")
	if status != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q, want 200 ok", status, body)
	}
}

func TestReadyzFollowsChecks(t *testing.T) {
	s := New("test", zerolog.Nop())
	addr := serve(t, s)
	if status, body := opstest.Get(t, addr, "/readyz"); status != http.StatusOK || body != "ready\n" {
		t.Fatalf("no checks: GET /readyz = %d %q, want 200 ready", status, body)
	}
	var nats, store atomic.Pointer[error]
	check := func(p *atomic.Pointer[error]) func(context.Context) error {
		return func(context.Context) error {
			if e := p.Load(); e != nil {
				return *e
			}
			return nil
		}
	}
	s.AddCheck("nats", check(&nats))
	s.AddCheck("store", check(&store))
	set := func(p *atomic.Pointer[error], err error) {
		if err == nil {
			p.Store(nil)
		} else {
			p.Store(&err)
		}
	}
	for _, tc := range []struct {
		name        string
		nats, store error
		status      int
		body        string
		// the gauges: mcpdrift_ready, mcpdrift_ready_check{check="nats"}, {check="store"}
		ready, natsOK, storeOK float64
	}{
		{name: "all_pass", status: 200, body: "ready\n", ready: 1, natsOK: 1, storeOK: 1},
		{name: "one_fails", nats: errors.New("not connected to NATS (reconnecting)"), status: 503,
			body: "not ready\nnats: not connected to NATS (reconnecting)\n", ready: 0, natsOK: 0, storeOK: 1},
		{name: "both_fail", nats: errors.New("down"), store: errors.New("two\nlines   of text"), status: 503,
			body: "not ready\nnats: down\nstore: two lines of text\n"},
		{name: "pass_again", status: 200, body: "ready\n", ready: 1, natsOK: 1, storeOK: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set(&nats, tc.nats)
			set(&store, tc.store)
			status, body := opstest.Get(t, addr, "/readyz")
			if status != tc.status || body != tc.body {
				t.Fatalf("GET /readyz = %d %q, want %d %q", status, body, tc.status, tc.body)
			}
			fams := opstest.Scrape(t, addr)
			fams.Require(t, tc.ready, "mcpdrift_ready")
			fams.Require(t, tc.natsOK, "mcpdrift_ready_check", "check", "nats")
			fams.Require(t, tc.storeOK, "mcpdrift_ready_check", "check", "store")
			if n := len(fams["mcpdrift_ready_check"].GetMetric()); n != 2 {
				t.Errorf("mcpdrift_ready_check has %d series, want one per check (2)", n)
			}
		})
	}
}

func TestReadyzBoundsASlowCheck(t *testing.T) {
	s := New("test", zerolog.Nop())
	s.AddCheck("slow", func(ctx context.Context) error {
		<-ctx.Done() // a check that never answers by itself
		return ctx.Err()
	})
	status, body := opstest.Get(t, serve(t, s), "/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "slow: context deadline exceeded") {
		t.Fatalf("GET /readyz = %d %q, want 503 naming the slow check", status, body)
	}
}

func TestRunningFailsOnceStopping(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	check := Running(ctx)
	if err := check(context.Background()); err != nil {
		t.Fatalf("running: %v", err)
	}
	cancel()
	if err := check(context.Background()); err == nil || err.Error() != "shutting down" {
		t.Fatalf("stopping: %v, want shutting down", err)
	}
}

func TestMetricsParse(t *testing.T) {
	s := New("test", zerolog.Nop())
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpdrift_test_things_total", Help: "Things."}, []string{"result"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mcpdrift_test_seconds", Help: "Time.", Buckets: prometheus.DefBuckets})
	s.Registry().MustRegister(c, h)
	c.WithLabelValues("ok").Add(3)
	h.Observe(0.2)
	h.Observe(0.3)
	fams := opstest.Scrape(t, serve(t, s))
	if v, ok := fams.Value("mcpdrift_test_things_total", "result", "ok"); !ok || v != 3 {
		t.Errorf("mcpdrift_test_things_total{result=ok} = %v %v, want 3", v, ok)
	}
	if v, ok := fams.Value("mcpdrift_test_seconds"); !ok || v != 2 {
		t.Errorf("mcpdrift_test_seconds count = %v %v, want 2", v, ok)
	}
	if v, ok := fams.Value("mcpdrift_build_info", "service", "test", "version", "(devel)", "goversion", runtime.Version()); !ok || v != 1 {
		t.Errorf("mcpdrift_build_info = %v %v, want 1 with the service, version and Go version", v, ok)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_open_fds"} {
		if fams[name] == nil {
			t.Errorf("no %s: the Go and process collectors are missing", name)
		}
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	var logs syncbuf.Buffer
	s := New("test", zerolog.New(&logs))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	go func() {
		defer close(exited)
		done <- s.RunWith(ctx, "127.0.0.1:0", func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	addr := opstest.Addr(t, logs.String)
	if status, _ := opstest.Get(t, addr, "/healthz"); status != http.StatusOK {
		t.Fatalf("GET /healthz = %d", status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still listening after Run returned")
	}
}

func TestRunAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = New("test", zerolog.Nop()).RunWith(context.Background(), ln.Addr().String(), neverRun(t))
	if !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "--ops-addr") {
		t.Fatalf("Run on a held address = %v, want ErrAddrInUse naming the address and --ops-addr", err)
	}
}

func TestRunBadAddress(t *testing.T) {
	err := New("test", zerolog.Nop()).RunWith(context.Background(), "127.0.0.1:http-nope", neverRun(t))
	if err == nil || errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), "ops: listening on 127.0.0.1:http-nope") {
		t.Fatalf("Run on a bad address = %v", err)
	}
}

// neverRun is work that must not start: RunWith takes the address first.
func neverRun(t *testing.T) func(context.Context) error {
	return func(context.Context) error {
		t.Error("the work ran although the address could not be taken")
		return nil
	}
}

func TestNATSConnected(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	check := NATSConnected(nc)
	if err := check(context.Background()); err != nil {
		t.Fatalf("connected: %v", err)
	}
	srv.Stop()
	poll.Eventually(t, opstest.Wait, func() error {
		if check(context.Background()) == nil {
			return errors.New("the check still passes with the server gone")
		}
		return nil
	})
	if err := check(context.Background()); !strings.Contains(err.Error(), "not connected to NATS") {
		t.Fatalf("disconnected: %v", err)
	}
}

func TestConsumerLag(t *testing.T) {
	b := natstest.StartBus(t)
	ctx := context.Background()
	cons, err := b.JS.CreateOrUpdateConsumer(ctx, bus.StreamObservations, jetstream.ConsumerConfig{
		Durable: "lagtest", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := b.JS.Publish(ctx, bus.ListObservationSubject("acme", "s"+string(rune('a'+i))), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	s := New("test", zerolog.Nop())
	s.AddConsumerLag(b.JS, bus.StreamObservations, "lagtest")
	s.AddConsumerLag(b.JS, "NO_SUCH_STREAM", "missing")     // its info request fails
	s.AddConsumerLag(b.JS, bus.StreamObservations, "later") // not created yet: no lag, and no error
	s.lag.maxAge = time.Hour                                // every scrape below within the hour reuses the first answer...
	addr := serve(t, s)

	want := func(fams opstest.Families, pending, ackPending float64) {
		t.Helper()
		if v, ok := fams.Value("mcpdrift_consumer_pending", "consumer", "lagtest"); !ok || v != pending {
			t.Errorf("pending = %v %v, want %v", v, ok, pending)
		}
		if v, ok := fams.Value("mcpdrift_consumer_ack_pending", "consumer", "lagtest"); !ok || v != ackPending {
			t.Errorf("ack pending = %v %v, want %v", v, ok, ackPending)
		}
	}
	want(opstest.Scrape(t, addr), 5, 0)

	batch, err := cons.FetchNoWait(2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if n != 2 {
		t.Fatalf("fetched %d, want 2", n)
	}
	fams := opstest.Scrape(t, addr)
	want(fams, 5, 0) // ...so this one does not see the fetch
	if _, ok := fams.Value("mcpdrift_consumer_pending", "consumer", "missing"); ok {
		t.Error("a consumer whose info fails has a pending sample")
	}
	if v, _ := fams.Value("mcpdrift_consumer_info_errors_total", "consumer", "missing"); v != 1 {
		t.Errorf("info errors of the missing consumer = %v, want 1 (one request per max age)", v)
	}

	s.lag.mu.Lock()
	s.lag.maxAge = 0 // now every scrape asks
	s.lag.mu.Unlock()
	fams = opstest.Scrape(t, addr)
	want(fams, 3, 2)
	if v, _ := fams.Value("mcpdrift_consumer_info_errors_total", "consumer", "missing"); v != 2 {
		t.Errorf("info errors of the missing consumer = %v, want 2", v)
	}
	if v, _ := fams.Value("mcpdrift_consumer_info_errors_total", "consumer", "lagtest"); v != 0 {
		t.Errorf("info errors of lagtest = %v, want 0", v)
	}
	if _, ok := fams.Value("mcpdrift_consumer_pending", "consumer", "later"); ok {
		t.Error("a consumer not created yet has a pending sample")
	}
	if v, _ := fams.Value("mcpdrift_consumer_info_errors_total", "consumer", "later"); v != 0 {
		t.Errorf("info errors of a consumer not created yet = %v, want 0", v)
	}
}

func TestConsumerLagBoundedWhenNATSIsGone(t *testing.T) {
	b := natstest.StartBus(t)
	if _, err := b.JS.CreateOrUpdateConsumer(context.Background(), bus.StreamObservations, jetstream.ConsumerConfig{Durable: "lagtest"}); err != nil {
		t.Fatal(err)
	}
	s := New("test", zerolog.Nop())
	s.AddConsumerLag(b.JS, bus.StreamObservations, "lagtest")
	s.lag.maxAge = 0
	addr := serve(t, s)
	opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", "lagtest")
	b.Stop()
	// The scrape still answers, without the lag, and counts the failure.
	fams := opstest.Scrape(t, addr)
	if _, ok := fams.Value("mcpdrift_consumer_pending", "consumer", "lagtest"); ok {
		t.Error("lag reported with NATS gone")
	}
	if v, _ := fams.Value("mcpdrift_consumer_info_errors_total", "consumer", "lagtest"); v != 1 {
		t.Errorf("info errors = %v, want 1", v)
	}
}

func TestStarting(t *testing.T) {
	s := New("test", zerolog.Nop())
	started := s.Starting("connecting")
	addr := serve(t, s)
	if status, body := opstest.Get(t, addr, "/readyz"); status != http.StatusServiceUnavailable || body != "not ready\nstarted: connecting\n" {
		t.Fatalf("before started: GET /readyz = %d %q", status, body)
	}
	started()
	if status, body := opstest.Get(t, addr, "/readyz"); status != http.StatusOK {
		t.Fatalf("after started: GET /readyz = %d %q", status, body)
	}
}

func TestRunWithTurnsNotReadyBeforeTheDrain(t *testing.T) {
	var logs syncbuf.Buffer
	s := New("test", zerolog.New(&logs))
	ctx, stop := context.WithCancel(context.Background())
	draining, drained := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	exited := make(chan struct{})
	var finish sync.Once
	t.Cleanup(func() { stop(); finish.Do(func() { close(drained) }); <-exited })
	go func() {
		defer close(exited)
		done <- s.RunWith(ctx, "127.0.0.1:0", func(ctx context.Context) error {
			<-ctx.Done()
			close(draining)
			<-drained // the work still finishing what it holds
			return errors.New("work result")
		})
	}()
	addr := opstest.Addr(t, logs.String)
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK)
	stop()
	<-draining
	status, body := opstest.Get(t, addr, "/readyz")
	if status != http.StatusServiceUnavailable || body != "not ready\nrunning: shutting down\n" {
		t.Fatalf("while draining: GET /readyz = %d %q, want 503 shutting down", status, body)
	}
	if status, _ := opstest.Get(t, addr, "/metrics"); status != http.StatusOK {
		t.Fatalf("while draining: GET /metrics = %d", status)
	}
	finish.Do(func() { close(drained) })
	if err := <-done; err == nil || err.Error() != "work result" {
		t.Fatalf("RunWith = %v, want the work's error", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still listening after RunWith returned")
	}
}

func TestRunWithStopsTheWorkIfItCannotListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = New("test", zerolog.Nop()).RunWith(context.Background(), ln.Addr().String(), func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("RunWith = %v, want ErrAddrInUse", err)
	}
}

func TestRunWithoutAddressRunsOnlyTheWork(t *testing.T) {
	var logs syncbuf.Buffer
	s := New("test", zerolog.New(&logs))
	err := s.RunWith(context.Background(), "", func(context.Context) error { return errors.New("work result") })
	if err == nil || err.Error() != "work result" {
		t.Fatalf("RunWith = %v", err)
	}
	if strings.Contains(logs.String(), "ops listening") {
		t.Fatal("listened without an address")
	}
}

// TestRequireToken: with a token, /metrics and the reasons of /readyz
// answer only a request carrying it; /healthz and /readyz's status stay
// open for probes.
func TestRequireToken(t *testing.T) {
	const secret = "ops-secret-0123456789"
	s := New("test", zerolog.Nop())
	s.RequireToken([]byte(secret))
	s.AddCheck("upstream", func(context.Context) error { return errors.New("server fs unreachable") })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path, token string
		status      int
		has, hasNot string
	}{
		{"/metrics", "", http.StatusUnauthorized, "ops token", "go_goroutines"},
		{"/metrics", secret + "x", http.StatusUnauthorized, "ops token", "go_goroutines"},
		{"/metrics", secret, http.StatusOK, "go_goroutines", ""},
		{"/healthz", "", http.StatusOK, "ok", ""},
		{"/readyz", "", http.StatusServiceUnavailable, "not ready", "unreachable"},
		{"/readyz", secret, http.StatusServiceUnavailable, "server fs unreachable", ""},
	} {
		status, body := get(c.path, c.token)
		if status != c.status || !strings.Contains(body, c.has) || (c.hasNot != "" && strings.Contains(body, c.hasNot)) {
			t.Errorf("GET %s (token %q) = %d %.80q, want %d with %q and without %q", c.path, c.token, status, body, c.status, c.has, c.hasNot)
		}
	}
}
