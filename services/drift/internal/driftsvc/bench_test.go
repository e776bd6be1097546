package driftsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkThroughput measures the drift service's rate against a raw
// JetStream consume of the same messages in the same run: N fingerprints
// (MCPDRIFT_BENCH_FPS, default 20000) of S servers (MCPDRIFT_BENCH_SERVERS,
// default 500, each with a manifest of its own: a real capture with a tag
// in its first description, as a fleet's servers differ), round-robin, are
// published first; then (a) an ack-only
// consumer with the service's consumer settings takes them all, until the
// server has every ack, and (b) a new drift service applies them all, until
// its consumer has nothing pending or unacked. Reports raw-msgs/s,
// svc-msgs/s and ratio (svc/raw).
//
//   - servers=known: every server has its record already (a warm-up pass,
//     untimed, by another service instance) and every fingerprint
//     re-observes its verified manifest, as a fleet re-listing unchanged
//     servers does: the steady state.
//   - servers=new: every server's first fingerprint is its first sight (a
//     record created, a baseline kept, a verdict published; S of the N),
//     the rest re-observe it.
func BenchmarkThroughput(b *testing.B) {
	for _, known := range []bool{true, false} {
		name := "servers=new"
		if known {
			name = "servers=known"
		}
		b.Run(name, func(b *testing.B) { benchThroughput(b, known) })
	}
}

func benchThroughput(b *testing.B, known bool) {
	n, servers := benchEnv("MCPDRIFT_BENCH_FPS", 20_000), benchEnv("MCPDRIFT_BENCH_SERVERS", 500)
	raw, err := os.ReadFile("../../../internal/surface/testdata/real/memory/2025.8.4.json")
	if err != nil {
		b.Fatal(err)
	}
	nb := natstest.StartBus(b)
	ctx := context.Background()
	// Each server its own manifest, as a fleet's servers are: the capture
	// with a tag at the front of its first description.
	type served struct {
		hash  string
		items []*mcpdriftv1.ItemHash
	}
	manifests := make([]served, servers)
	for i := range servers {
		v := bytes.Replace(raw, []byte(`"description":"`), []byte(fmt.Sprintf(`"description":"[s%d] `, i)), 1)
		vsf, err := surface.Parse(v, surface.Options{Form: surface.FormLatest})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := nb.Handles.Manifests.PutBytes(ctx, bus.ManifestName(vsf.Hash.String()), v); err != nil {
			b.Fatal(err)
		}
		its := make([]*mcpdriftv1.ItemHash, len(vsf.Items))
		for j, it := range vsf.Items {
			its[j] = &mcpdriftv1.ItemHash{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
		}
		manifests[i] = served{vsf.Hash.String(), its}
	}
	// publish publishes count fingerprints of the servers of round, ids
	// unique to the pass, and waits until they are stored.
	pass := 0
	publish := func(round, count int) {
		pass++
		stream, err := nb.JS.Stream(ctx, bus.StreamFingerprints)
		if err != nil {
			b.Fatal(err)
		}
		if err := stream.Purge(ctx); err != nil {
			b.Fatal(err)
		}
		for i := range count {
			server := fmt.Sprintf("s%d-%d", round, i%servers)
			m := manifests[i%servers]
			fp := &mcpdriftv1.Fingerprint{CanonicalForm: surface.FormLatest.String(), EventId: fmt.Sprintf("fp-%d-%d", pass, i), ObservationId: fmt.Sprintf("obs-%d-%d", pass, i),
				Tenant: "acme", Server: server, Variant: "default", Proxy: "p1",
				ObservedAtUnixMs: int64(1_700_000_000_000 + pass*n + i), SurfaceHash: m.hash, Items: m.items}
			data, err := proto.Marshal(fp)
			if err != nil {
				b.Fatal(err)
			}
			subj := bus.FingerprintSubject("acme", server)
			_, err = nb.JS.PublishAsync(subj, data, jetstream.WithMsgID(fp.EventId))
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				<-nb.JS.PublishAsyncComplete() // a loaded machine: let the server catch up
				_, err = nb.JS.PublishAsync(subj, data, jetstream.WithMsgID(fp.EventId))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-nb.JS.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishing fingerprints took over a minute")
		}
	}
	var rawDur, svcDur time.Duration
	iter := 0
	for b.Loop() {
		b.StopTimer()
		iter++
		if known {
			publish(iter, servers) // one first sight per server
			benchService(b, nb, "bench-warm-"+strconv.Itoa(iter), servers)
		}
		publish(iter, n)
		b.StartTimer()

		rawDur += natstest.AckOnly(b, nb.JS, bus.StreamFingerprints, consumerConfig("bench-raw-"+strconv.Itoa(iter)), n, jetstream.PullExpiry(bus.PullExpiry))
		svcDur += benchService(b, nb, "bench-drift-"+strconv.Itoa(iter), n)
	}
	total := float64(n * iter)
	rawRate, svcRate := total/rawDur.Seconds(), total/svcDur.Seconds()
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(svcRate, "svc-msgs/s")
	b.ReportMetric(svcRate/rawRate, "ratio")
}

// consumerConfig is the consumer Run creates, under another name.
func consumerConfig(durable string) jetstream.ConsumerConfig {
	c := DefaultConfig
	return jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.AckWait,
		MaxDeliver: c.MaxDeliver, MaxAckPending: c.MaxAckPending, FilterSubject: bus.Prefix + ".fp.>"}
}

// benchService times a drift service from Run until its consumer has
// settled every message.
func benchService(b *testing.B, nb *natstest.Bus, durable string, n int) time.Duration {
	svc, err := New(Config{Durable: durable}, Deps{JS: nb.JS, Handles: nb.Handles, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	began := time.Now()
	go func() { runErr <- svc.Run(ctx) }()
	// Count settlements first, as the raw consumer counts its callbacks,
	// so that polling the server does not load it while the service works.
	for svc.settled.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	cons, err := nb.JS.Consumer(ctx, bus.StreamFingerprints, durable)
	if err != nil {
		b.Fatal(err)
	}
	natstest.Settled(b, cons)
	took := time.Since(began)
	cancel()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
	if st := svc.Stats(); st.Poison != 0 || st.Redelivered != 0 {
		b.Fatalf("stats %+v: want no poison and no redelivery", st)
	}
	return took
}
