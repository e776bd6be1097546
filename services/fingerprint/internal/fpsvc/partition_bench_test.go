package fpsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// benchPartitions is the P of BenchmarkPartitionedInstances.
var benchPartitions = envInt("FPSVC_BENCH_PARTITIONS", 4)

// BenchmarkPartitionedInstances measures, in one run on one in-process
// NATS server and the same observations (N of them, FPSVC_BENCH_N, over 64
// servers, every capture different so that every one is parsed and
// hashed), how fast fingerprints are stored by:
//
//   - floor: one instance on the unpartitioned stream, as without
//     partitions (the single-instance floor);
//   - p1x: one instance taking all P partitions (FPSVC_BENCH_PARTITIONS,
//     default 4);
//   - p2x: two instances, each on its own connection, taking half the
//     partitions each.
//
// It reports each rate and the ratios to the floor. The instances share
// the process, and with it the CPUs, with each other and with the server:
// on a small machine this shows what partitioning costs and whether two
// instances contend, not what two machines would add.
func BenchmarkPartitionedInstances(b *testing.B) {
	n := benchN / 4
	srv := natstest.Start(b)
	_, js := srv.Connect(b)
	h, err := bus.Setup(context.Background(), js, bus.Config{Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	fixture := readFixture(b)
	capture := func(i int) []byte {
		return bytes.Replace(fixture, []byte(`"version":"0.6.3"`), fmt.Appendf(nil, `"version":"0.6.3+%d"`, i), 1)
	}
	half := make([][]int, 2)
	for i := range benchPartitions {
		half[i%2] = append(half[i%2], i)
	}
	phases := []struct {
		name       string
		partitions int
		sets       [][]int
	}{
		{"floor", 1, [][]int{nil}},
		{"p1x", benchPartitions, [][]int{nil}},
		{"p2x", benchPartitions, half},
	}
	totals := make([]time.Duration, len(phases))
	iter := 0
	for b.Loop() {
		iter++
		for i, ph := range phases {
			b.StopTimer()
			if _, err := bus.Setup(context.Background(), js, bus.Config{Partitions: ph.partitions}); err != nil {
				b.Fatal(err)
			}
			purgePartitioned(b, js)
			publishSpread(b, js, capture, fmt.Sprintf("%d-%s", iter, ph.name), n)
			b.StartTimer()
			totals[i] += instancesConsume(b, srv, h, ph.partitions, ph.sets, n)
		}
	}
	rate := func(d time.Duration) float64 { return float64(n*iter) / d.Seconds() }
	floor := rate(totals[0])
	for i, ph := range phases {
		b.ReportMetric(rate(totals[i]), ph.name+"-msgs/s")
		if i > 0 {
			b.ReportMetric(rate(totals[i])/floor, ph.name+"-ratio")
		}
	}
}

// purgePartitioned empties both streams and deletes every consumer of the
// observations, so that each phase starts from nothing.
func purgePartitioned(b *testing.B, js jetstream.JetStream) {
	purgeStream(b, js, bus.StreamObservations)
	purgeStream(b, js, bus.StreamFingerprints)
	s, err := js.Stream(context.Background(), bus.StreamObservations)
	if err != nil {
		b.Fatal(err)
	}
	names := s.ConsumerNames(context.Background())
	for name := range names.Name() {
		if err := js.DeleteConsumer(context.Background(), bus.StreamObservations, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			b.Fatal(err)
		}
	}
}

// publishSpread publishes n observations over 64 servers.
func publishSpread(b *testing.B, js jetstream.JetStream, capture func(int) []byte, tag string, n int) {
	for i := range n {
		obs := observation(fmt.Sprintf("obs-%s-%d", tag, i), capture(i))
		obs.Server = fmt.Sprintf("s%02d", i%64)
		data, err := proto.Marshal(obs)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync(bus.ListObservationSubject(obs.Tenant, obs.Server), data, jetstream.WithMsgID(obs.EventId)); err != nil {
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

// instancesConsume times one Service per partition set, each on its own
// connection, from Run until n Fingerprint events are stored.
func instancesConsume(b *testing.B, srv *natstest.Server, h *bus.Handles, partitions int, sets [][]int, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var svcs []*Service
	var jss []jetstream.JetStream
	for _, set := range sets {
		_, js := srv.Connect(b)
		svc, err := New(Config{Partitions: partitions, PartitionSet: set},
			Deps{JS: js, Manifests: NewObjectManifests(js, h.Manifests), Log: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		svcs, jss = append(svcs, svc), append(jss, js)
	}
	errs := make(chan error, len(svcs))
	began := time.Now()
	for _, svc := range svcs {
		go func() { errs <- svc.Run(ctx) }()
	}
	for streamMsgs(b, jss[0], bus.StreamFingerprints) < uint64(n) {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(began)
	cancel()
	var processed uint64
	for range svcs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	for _, svc := range svcs {
		processed += svc.Stats().Processed
		if len(svcs) > 1 && svc.Stats().Processed == 0 {
			b.Errorf("an instance processed nothing: partitions %d, sets %v", partitions, sets)
		}
	}
	if processed != uint64(n) {
		b.Fatalf("%d processed, want %d", processed, n)
	}
	return took
}
