package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const routerService = "routertest"

// routerRig is a Router on a real server with one consumer of the
// observations of acme/s1 (and acme/s2), and what its Settler told.
type routerRig struct {
	b        *natstest.Bus
	router   *bus.Router
	cons     string
	mu       sync.Mutex
	outcomes []string
	stop     func() error // cancels Run and returns its error
}

func (r *routerRig) told() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

// runRouter runs router until the test ends, and returns the function that
// stops it (once) and returns what Run returned; the end of the test
// stops it too and reports an error of Run, naming name.
func runRouter(t *testing.T, name string, router *bus.Router) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("Run did not return 30s after cancel")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%sRun: %v", name, err)
		}
	})
	return stop
}

func startRouter(t *testing.T, drain time.Duration, p func(*routerRig) bus.Processor) *routerRig {
	t.Helper()
	r := &routerRig{b: natstest.StartBus(t), cons: "routertest"}
	router, err := bus.NewRouter(bus.RouterConfig{
		Settle: bus.SettleConfig{Service: routerService, MaxDeliver: 5, Timeout: 5 * time.Second,
			Backoff: bus.Backoff(300*time.Millisecond, time.Second)},
		Routes: []bus.Route{{Stream: bus.StreamObservations, Prefetch: 16, Consumer: jetstream.ConsumerConfig{
			Durable: r.cons, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5,
			FilterSubject: bus.ListObservationSubject("acme", "*"),
		}}},
		DrainTimeout:  drain,
		RecreateDelay: 20 * time.Millisecond,
	}, bus.SettleDeps{JS: r.b.JS, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Metrics: func(o bus.Outcome, code string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.outcomes = append(r.outcomes, o.String()+code)
		}}, p(r))
	if err != nil {
		t.Fatal(err)
	}
	r.router = router
	r.stop = runRouter(t, "", router)
	// Run has created the consumer once it exists.
	poll.Eventually(t, 10*time.Second, func() error {
		_, err := r.b.JS.Consumer(context.Background(), bus.StreamObservations, r.cons)
		return err
	})
	return r
}

func (r *routerRig) publish(t *testing.T, server string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := bus.Publish(context.Background(), r.b.JS, bus.ListObservationSubject("acme", server), []byte(id), id); err != nil {
			t.Fatal(err)
		}
	}
}

// settledAll polls until the consumer has nothing pending or unacked.
func (r *routerRig) settledAll(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	poll.Eventually(t, 15*time.Second, func() error {
		cons, err := r.b.JS.Consumer(context.Background(), bus.StreamObservations, r.cons)
		if err != nil {
			return err
		}
		if info, err = cons.Info(context.Background()); err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("consumer has %d pending and %d unacked; want none", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	return info
}

// seen records the payloads a handler was given, in order.
type seen struct {
	mu   sync.Mutex
	msgs []string
}

func (s *seen) add(msg jetstream.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, string(msg.Data()))
}

func (s *seen) has(ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !slices.Contains(s.msgs, id) {
			return fmt.Errorf("handled %q, want %q among them", s.msgs, id)
		}
	}
	return nil
}

// TestRouterRecreatesDeletedConsumer: a consumer deleted under a running
// Router is created again, and messages published after the deletion are
// handled, without Run returning.
func TestRouterRecreatesDeletedConsumer(t *testing.T) {
	var got seen
	r := startRouter(t, 5*time.Second, func(*routerRig) bus.Processor {
		return bus.Workers(2, bus.Settling(func(_ context.Context, msg jetstream.Msg) error { got.add(msg); return nil }))
	})
	r.publish(t, "s1", "before")
	poll.Eventually(t, 10*time.Second, func() error { return got.has("before") })

	for round := range 2 { // deleted during a pull, and again soon after being created again
		if err := r.b.JS.DeleteConsumer(context.Background(), bus.StreamObservations, r.cons); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 20*time.Second, func() error {
			if n := r.router.Recreated(); n < int64(round+1) {
				return fmt.Errorf("consumer created again %d times, want %d", n, round+1)
			}
			return nil
		})
		after := "after-" + strconv.Itoa(round)
		r.publish(t, "s1", after)
		poll.Eventually(t, 20*time.Second, func() error { return got.has(after) })
	}
	r.settledAll(t)
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRouterDrainSettlesInFlight: at shutdown the messages in hand and
// those already pulled are handled and acked before Run returns.
func TestRouterDrainSettlesInFlight(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	var got seen
	r := startRouter(t, 20*time.Second, func(*routerRig) bus.Processor {
		return bus.Workers(2, bus.Settling(func(_ context.Context, msg jetstream.Msg) error {
			started.Add(1)
			<-release
			got.add(msg)
			return nil
		}))
	})
	var ids []string
	for i := range 10 {
		ids = append(ids, "m"+strconv.Itoa(i))
	}
	r.publish(t, "s1", ids...)
	poll.Eventually(t, 10*time.Second, func() error {
		if n := started.Load(); n < 2 {
			return fmt.Errorf("%d messages in hand, want 2", n)
		}
		return nil
	})
	// Every message delivered to the client before the drain begins: two in
	// hand, the rest buffered (a message still on its way from the server
	// when the drain begins is not the router's yet, and is delivered
	// again later, as it should be).
	poll.Eventually(t, 10*time.Second, func() error {
		cons, err := r.b.JS.Consumer(context.Background(), bus.StreamObservations, r.cons)
		if err != nil {
			return err
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != len(ids) {
			return fmt.Errorf("%d messages delivered and not acked, want all %d", info.NumAckPending, len(ids))
		}
		return nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := got.has(ids...); err != nil {
		t.Fatal(err)
	}
	if n := r.router.Unsettled(); n != 0 {
		t.Errorf("%d deliveries unsettled after Run", n)
	}
	info := r.settledAll(t)
	if info.NumRedelivered != 0 {
		t.Errorf("%d messages redelivered; want every one acked on its first delivery", info.NumRedelivered)
	}
}

// TestRouterDrainDeadline: a handler that does not finish makes Run return
// at the drain deadline, its message settled as a retry.
func TestRouterDrainDeadline(t *testing.T) {
	var started atomic.Int32
	r := startRouter(t, 300*time.Millisecond, func(*routerRig) bus.Processor {
		return bus.Workers(1, bus.Settling(func(ctx context.Context, _ jetstream.Msg) error {
			started.Add(1)
			<-ctx.Done() // the work context: ends at the drain deadline
			return ctx.Err()
		}))
	})
	r.publish(t, "s1", "stuck")
	poll.Eventually(t, 10*time.Second, func() error {
		if started.Load() == 0 {
			return errors.New("the message is not in hand yet")
		}
		return nil
	})
	began := time.Now()
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Run took %v to return after cancel with a 300ms drain deadline", took)
	}
	if got := r.told(); !slices.Equal(got, []string{"retried"}) {
		t.Errorf("settlements %q, want one retry", got)
	}
	if n := r.router.Unsettled(); n != 0 {
		t.Errorf("%d deliveries unsettled after Run", n)
	}
}

// TestRouterPoisonDeadLetteredOnce: a poison message is dead-lettered once
// and terminated, never delivered again.
func TestRouterPoisonDeadLetteredOnce(t *testing.T) {
	var calls atomic.Int32
	r := startRouter(t, 5*time.Second, func(*routerRig) bus.Processor {
		return bus.Workers(2, bus.Settling(func(_ context.Context, msg jetstream.Msg) error {
			calls.Add(1)
			if string(msg.Data()) == "poison" {
				return bus.Poisonf(bus.CodeMalformedEvent, "not an event")
			}
			return nil
		}))
	})
	r.publish(t, "s1", "poison", "fine")
	info := r.settledAll(t)
	if info.NumRedelivered != 0 {
		t.Errorf("%d messages redelivered, want none", info.NumRedelivered)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2 (one per message)", n)
	}
	st, err := r.b.JS.Stream(context.Background(), bus.StreamAdmin)
	if err != nil {
		t.Fatal(err)
	}
	subj := bus.DeadLetterSubject(routerService)
	si, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := si.State.Subjects[subj]; n != 1 {
		t.Errorf("%d dead letters on %s, want 1", n, subj)
	}
	got := r.told()
	slices.Sort(got)
	if want := []string{"acked", "dead_lettered" + bus.CodeMalformedEvent}; !slices.Equal(got, want) {
		t.Errorf("settlements %q, want %q", got, want)
	}
}

// TestRouterTransientNaksWithDelay: a transient failure is retried after
// the Settler's backoff, and then acked.
func TestRouterTransientNaksWithDelay(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	r := startRouter(t, 5*time.Second, func(*routerRig) bus.Processor {
		return bus.Workers(1, bus.Settling(func(_ context.Context, _ jetstream.Msg) error {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Now())
			if len(at) == 1 {
				return errTransient
			}
			return nil
		}))
	})
	r.publish(t, "s1", "flaky")
	r.settledAll(t)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("handled %d times, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 300*time.Millisecond {
		t.Errorf("redelivered %v after the failure, want at least the 300ms backoff", gap)
	}
	if got, want := r.told(), []string{"retried", "acked"}; !slices.Equal(got, want) {
		t.Errorf("settlements %q, want %q", got, want)
	}
}

// TestLanesKeepASubjectInOrder: Lanes hands one subject's messages to its
// handler in the order published, one at a time, while another subject's
// go on.
func TestLanesKeepASubjectInOrder(t *testing.T) {
	var mu sync.Mutex
	bySubject := map[string][]string{}
	var busy sync.Map
	var overlap atomic.Bool
	r := startRouter(t, 5*time.Second, func(*routerRig) bus.Processor {
		return bus.Lanes(4, bus.Settling(func(_ context.Context, msg jetstream.Msg) error {
			if _, loaded := busy.LoadOrStore(msg.Subject(), true); loaded {
				overlap.Store(true)
			}
			defer busy.Delete(msg.Subject())
			mu.Lock()
			defer mu.Unlock()
			bySubject[msg.Subject()] = append(bySubject[msg.Subject()], string(msg.Data()))
			return nil
		}))
	})
	var want []string
	for i := range 50 {
		want = append(want, strconv.Itoa(i))
	}
	for _, id := range want {
		r.publish(t, "s1", "s1-"+id)
		r.publish(t, "s2", "s2-"+id)
	}
	r.settledAll(t)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []string{"s1", "s2"} {
		got := bySubject[bus.ListObservationSubject("acme", s)]
		var w []string
		for _, id := range want {
			w = append(w, s+"-"+id)
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s handled in order %q, want %q", s, got, w)
		}
	}
	if overlap.Load() {
		t.Error("two messages of one subject were handled at once")
	}
}

// TestDeliverySettledOnce: a second settlement of a delivery is ignored.
func TestDeliverySettledOnce(t *testing.T) {
	r := startRouter(t, 5*time.Second, func(*routerRig) bus.Processor {
		return bus.Workers(1, func(ctx context.Context, d *bus.Delivery) {
			d.Settle(ctx, nil)
			if o := d.Settle(ctx, errTransient); o != bus.Unsettled {
				t.Errorf("second settlement: %v, want unsettled", o)
			}
		})
	})
	r.publish(t, "s1", "once")
	r.settledAll(t)
	poll.Eventually(t, 5*time.Second, func() error {
		if got := r.told(); !slices.Equal(got, []string{"acked"}) {
			return fmt.Errorf("settlements %q, want one ack", got)
		}
		return nil
	})
}
