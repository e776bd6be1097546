package fpsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// benchN is how many observations each phase consumes per iteration.
var benchN = envInt("FPSVC_BENCH_N", 20_000)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkThroughput measures, in the same run and on the same messages,
// (a) the raw rate of an ack-only JetStream consumer with the service's
// consumer settings and (b) the rate of the fingerprint service (until N
// Fingerprint events are stored), and reports both and their ratio. Each
// observation carries the real 4 KB memory-server capture:
//
//   - captures=same: every observation carries the same bytes, as a fleet
//     re-listing an unchanged server does (the memo recognizes them);
//   - captures=reparse: every observation's bytes differ (in serverInfo,
//     which the fingerprint does not cover), so every one is parsed and
//     hashed, and all have the same surface hash.
//
// One iteration is one pass of N messages (FPSVC_BENCH_N, default 20000)
// through each.
func BenchmarkThroughput(b *testing.B) {
	fixture := readFixture(b)
	for _, tc := range []struct {
		name    string
		capture func(i int) []byte
	}{
		{"captures=same", func(int) []byte { return fixture }},
		{"captures=reparse", func(i int) []byte {
			return bytes.Replace(fixture, []byte(`"version":"0.6.3"`), fmt.Appendf(nil, `"version":"0.6.3+%d"`, i), 1)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if a, z := mustHash(b, tc.capture(0)), mustHash(b, tc.capture(1)); a != z || bytes.Equal(tc.capture(0), tc.capture(1)) != (tc.name == "captures=same") {
				b.Fatal("the captures do not vary as the benchmark says")
			}
			throughput(b, tc.capture)
		})
	}
}

func mustHash(b *testing.B, capture []byte) string {
	s, err := surface.Parse(capture, surface.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return s.Hash.String()
}

func throughput(b *testing.B, capture func(i int) []byte) {
	srv := natstest.Start(b)
	_, js := srv.Connect(b)
	h, err := bus.Setup(context.Background(), js, bus.Config{})
	if err != nil {
		b.Fatal(err)
	}
	// The relay republishes a real fingerprint's bytes.
	fp := (&Service{memo: newMemo(-1)}).mustFingerprint(b, observation("obs-0", capture(0)))
	var rawTotal, relayTotal, svcTotal time.Duration
	iter := 0
	for b.Loop() {
		b.StopTimer()
		iter++
		purge(b, js)
		publishMany(b, js, capture, iter, benchN)
		b.StartTimer()

		rawTotal += rawConsume(b, js, benchN)
		relayTotal += relayConsume(b, js, fp, benchN)
		b.StopTimer()
		purgeStream(b, js, bus.StreamFingerprints)
		b.StartTimer()
		svcTotal += serviceConsume(b, js, h, benchN)
	}
	n := float64(benchN * iter)
	raw := n / rawTotal.Seconds()
	relay := n / relayTotal.Seconds()
	svc := n / svcTotal.Seconds()
	b.ReportMetric(raw, "raw-msgs/s")
	b.ReportMetric(relay, "relay-msgs/s")
	b.ReportMetric(svc, "svc-msgs/s")
	b.ReportMetric(svc/raw, "ratio")
	b.ReportMetric(svc/relay, "ratio-vs-relay")
}

func (s *Service) mustFingerprint(b *testing.B, obs *mcpdriftv1.ListObservation) []byte {
	data, res, err := s.fingerprint(obs)
	if err != nil || res.errorCode != "" {
		b.Fatalf("fingerprint: %v %s", err, res.errorCode)
	}
	return data
}

func purgeStream(b *testing.B, js jetstream.JetStream, name string) {
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Purge(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func purge(b *testing.B, js jetstream.JetStream) {
	purgeStream(b, js, bus.StreamObservations)
	purgeStream(b, js, bus.StreamFingerprints)
	for _, c := range []string{"bench-raw", "bench-relay", DefaultConfig.Durable} {
		if err := js.DeleteConsumer(context.Background(), bus.StreamObservations, c); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			b.Fatal(err)
		}
	}
}

// publishMany publishes n observations asynchronously, with ids unique to
// the iteration so that the duplicate window does not drop them.
func publishMany(b *testing.B, js jetstream.JetStream, capture func(int) []byte, iter, n int) {
	subj := bus.ListObservationSubject("acme", "memory")
	for i := range n {
		id := fmt.Sprintf("obs-%d-%d", iter, i)
		data, err := proto.Marshal(observation(id, capture(i)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync(subj, data, jetstream.WithMsgID(id)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing observations took over a minute")
	}
	if got := streamMsgs(b, js, bus.StreamObservations); got != uint64(n) {
		b.Fatalf("%d observations stored, want %d", got, n)
	}
}

// rawConsume times an ack-only consumer with the service's consumer
// settings from creation until the server has every ack.
func rawConsume(b *testing.B, js jetstream.JetStream, n int) time.Duration {
	cfg := testConfig.ConsumerConfig()
	cfg.Durable, cfg.Description = "bench-raw", ""
	return natstest.AckOnly(b, js, bus.StreamObservations, cfg, n, jetstream.PullMaxMessages(DefaultConfig.Prefetch))
}

// relayConsume times the least any JetStream-to-JetStream stage pays: for
// each observation it publishes the given bytes (a real fingerprint)
// asynchronously with a message id and acks once the publish is
// acknowledged, until n are stored. The service does this plus its own work.
func relayConsume(b *testing.B, js jetstream.JetStream, payload []byte, n int) time.Duration {
	ctx := context.Background()
	cfg := testConfig.ConsumerConfig()
	cfg.Durable, cfg.Description = "bench-relay", ""
	began := time.Now()
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.StreamObservations, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var closeCh sync.Once // the settler is joined however the benchmark ends
	type pending struct {
		msg jetstream.Msg
		f   jetstream.PubAckFuture
	}
	ch := make(chan pending, DefaultConfig.Prefetch)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		for p := range ch {
			select {
			case <-p.f.Ok():
				_ = p.msg.Ack()
			case err := <-p.f.Err():
				b.Error(err)
				_ = p.msg.Nak()
			}
		}
	}()
	subj := bus.FingerprintSubject("acme", "memory")
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			b.Error(err)
			return
		}
		f, err := js.PublishAsync(subj, payload, jetstream.WithMsgID("relay-"+strconv.FormatUint(md.Sequence.Stream, 10)))
		if err != nil {
			b.Error(err)
			return
		}
		ch <- pending{msg, f}
	}, jetstream.PullMaxMessages(DefaultConfig.Prefetch))
	if err != nil {
		close(ch)
		<-settled
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Stop(); <-cc.Closed(); closeCh.Do(func() { close(ch) }); <-settled })
	for streamMsgs(b, js, bus.StreamFingerprints) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(began)
	cc.Drain()
	<-cc.Closed()
	closeCh.Do(func() { close(ch) })
	<-settled
	return took
}

// serviceConsume times a Service from Run until n Fingerprint events are
// stored.
func serviceConsume(b *testing.B, js jetstream.JetStream, h *bus.Handles, n int) time.Duration {
	svc, err := New(Config{}, Deps{JS: js, Manifests: NewObjectManifests(js, h.Manifests), Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr, exited := make(chan error, 1), make(chan struct{})
	b.Cleanup(func() { cancel(); <-exited })
	began := time.Now()
	go func() { defer close(exited); runErr <- svc.Run(ctx) }()
	for streamMsgs(b, js, bus.StreamFingerprints) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(began)
	cancel()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
	if st := svc.Stats(); st.Processed != uint64(n) || st.Retries != 0 {
		b.Fatalf("stats %+v, want %d processed and no retries", st, n)
	}
	return took
}
