package sink

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// BenchmarkSink measures sustained events per second from JetStream into
// ClickHouse: N call observations are published first, one message each
// (the single form), then a sink drains them (decode, batch, insert, ack)
// until its consumer has acked all of them. The baseline, in the same run
// on the same servers, is a raw clickhouse-go batch insert of the same rows
// (decoded ahead, outside the timing) into a copy of the table. Reports
// events/s, raw-events/s and ratio. MCPDRIFT_BENCH_EVENTS sets N (default
// 200000).
func BenchmarkSink(b *testing.B) { benchSink(b, 1) }

// BenchmarkCallBatchSink is BenchmarkSink with the calls published as
// CallObservations of MCPDRIFT_BENCH_BATCH calls each (default 100), as
// proxies publish them under load: one JetStream message, delivery and ack
// per batch instead of per call. Events are calls, as in BenchmarkSink.
func BenchmarkCallBatchSink(b *testing.B) {
	per := 100
	if v, err := strconv.Atoi(os.Getenv("MCPDRIFT_BENCH_BATCH")); err == nil && v > 0 {
		per = v
	}
	benchSink(b, per)
}

// benchSink publishes the calls per to a message: singles on obs.call when
// per is 1, CallObservations on obs.calls otherwise.
func benchSink(b *testing.B, per int) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("MCPDRIFT_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	ch := chtest.Shared(b)
	nb := natstest.StartBus(b)
	db := ch.Database(b)
	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	if _, err := schema.Migrate(ctx, conn, schema.Options{Database: db}); err != nil {
		b.Fatal(err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE "+db+".call_raw AS "+db+".call_observations"); err != nil {
		b.Fatal(err)
	}

	// Publish N call observations (asynchronously, outside the timing), and
	// decode each message ahead into the rows of the raw insert.
	decoded := &batch{}
	svcForDecode := &Service{cfg: DefaultConfig}
	var seq uint64
	for from := 0; from < n; from += per {
		var calls []*mcpdriftv1.CallObservation
		for i := from; i < min(from+per, n); i++ {
			ev := callEvent(i)
			ev.EventId = fmt.Sprintf("bench-%d", i)
			ev.Server = callEvent(from).Server // one server per message
			calls = append(calls, ev)
		}
		var subj, msgID string
		var data []byte
		if per == 1 {
			subj, msgID = bus.CallObservationSubject(calls[0].Tenant, calls[0].Server), calls[0].EventId
			data, err = proto.Marshal(calls[0])
		} else {
			subj, msgID = bus.CallObservationsSubject(calls[0].Tenant, calls[0].Server), batchMsgID(calls)
			data, err = proto.Marshal(&mcpdriftv1.CallObservations{Calls: calls})
		}
		if err != nil {
			b.Fatal(err)
		}
		if _, err := nb.JS.PublishAsync(subj, data, jetstream.WithMsgID(msgID)); err != nil {
			b.Fatal(err)
		}
		seq++
		if p := svcForDecode.decode(envelope{subject: subj, seq: seq, stamp: time.Now()}, data, decoded); p != nil {
			b.Fatal(p)
		}
	}
	raw := &decoded.calls
	select {
	case <-nb.JS.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publishing did not complete")
	}
	cfg := DefaultConfig
	cfg.Database = db

	b.ResetTimer()
	var sinkDur, rawDur, consumeDur time.Duration
	for range b.N {
		// The sink, from a fresh consumer each round.
		for _, k := range Consumers {
			_ = nb.JS.DeleteConsumer(ctx, k.Stream, k.Durable)
		}
		if err := conn.Exec(ctx, "TRUNCATE TABLE "+db+".call_observations"); err != nil {
			b.Fatal(err)
		}
		svc, err := New(cfg, Deps{JS: nb.JS, Conn: conn, Log: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done, exited := make(chan error, 1), make(chan struct{})
		b.Cleanup(func() { cancel(); <-exited })
		start := time.Now()
		go func() { defer close(exited); done <- svc.Run(runCtx) }()
		for svc.Stats().Written < uint64(n) {
			time.Sleep(2 * time.Millisecond)
		}
		sinkDur += time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}

		// The raw insert of the same rows, in batches of the same size.
		if err := conn.Exec(ctx, "TRUNCATE TABLE "+db+".call_raw"); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for from := 0; from < n; from += cfg.BatchSize {
			to := min(from+cfg.BatchSize, n)
			part := sliceCalls(raw, from, to)
			bt, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".call_raw ("+part.columns()+")")
			if err != nil {
				b.Fatal(err)
			}
			if err := part.appendTo(bt); err != nil {
				b.Fatal(err)
			}
			if err := bt.Send(); err != nil {
				b.Fatal(err)
			}
		}
		rawDur += time.Since(start)

		// The floor from the bus side: an ack-only consumer of the same
		// messages with the sink's consumer settings, until the server has
		// every ack.
		consumeDur += rawConsume(b, nb.JS, cfg, (n+per-1)/per)
	}
	b.StopTimer()
	var got uint64
	if err := conn.QueryRow(ctx, "SELECT uniqExact(event_id) FROM "+db+".call_observations").Scan(&got); err != nil || got != uint64(n) {
		b.Fatalf("sink wrote %d distinct events (%v), want %d", got, err, n)
	}
	rate := float64(n*b.N) / sinkDur.Seconds()
	rawRate := float64(n*b.N) / rawDur.Seconds()
	b.ReportMetric(rate, "events/s")
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(rate/rawRate, "ratio")
	// consume-ratio is what the bus alone allows, as a ratio of the raw
	// insert: the sink consumes and acks every message as well as inserting
	// its rows, on the same CPUs.
	consumeRate := float64(n*b.N) / consumeDur.Seconds()
	b.ReportMetric(consumeRate, "consume-events/s")
	b.ReportMetric(consumeRate/rawRate, "consume-ratio")
}

// rawConsume times an ack-only consumer of the observations stream with the
// sink's consumer settings, from its creation until the server has every
// one of msgs acks.
func rawConsume(b *testing.B, js jetstream.JetStream, cfg Config, msgs int) time.Duration {
	cc := cfg.ConsumerConfig(Consumers[0])
	cc.Durable, cc.Description = "bench-raw", ""
	_ = js.DeleteConsumer(context.Background(), Consumers[0].Stream, cc.Durable)
	return natstest.AckOnly(b, js, Consumers[0].Stream, cc, msgs, jetstream.PullMaxMessages(cfg.Prefetch), jetstream.PullExpiry(bus.PullExpiry))
}

func sliceCalls(r *callRows, from, to int) *callRows {
	part := &callRows{
		common: common{eventID: r.eventID[from:to], at: r.at[from:to], atMs: r.atMs[from:to], seq: r.seq[from:to]},
		tenant: r.tenant[from:to], server: r.server[from:to], proxy: r.proxy[from:to], tool: r.tool[from:to],
		outcome: r.outcome[from:to], refusal: r.refusal[from:to], alert: r.alert[from:to], digest: r.digest[from:to],
		args: r.args[from:to], latency: r.latency[from:to],
	}
	for i := range r.policy {
		part.policy[i] = r.policy[i][from:to]
	}
	return part
}
