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

	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// BenchmarkSink measures sustained events per second from JetStream into
// ClickHouse: N call observations are published first, then a sink drains
// them (decode, batch, insert, ack) until its consumer has acked all of
// them. The baseline, in the same run on the same servers, is a raw
// clickhouse-go batch insert of the same rows (decoded ahead, outside the
// timing) into a copy of the table. Reports events/s, raw-events/s and
// ratio. MCPDRIFT_BENCH_EVENTS sets N (default 200000).
func BenchmarkSink(b *testing.B) {
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

	// Publish N call observations (asynchronously, outside the timing).
	raw := &callRows{}
	svcForDecode := &Service{cfg: DefaultConfig}
	for i := range n {
		ev := callEvent(i)
		ev.EventId = fmt.Sprintf("bench-%d", i)
		data, _ := proto.Marshal(ev)
		subj := bus.CallObservationSubject(ev.Tenant, ev.Server)
		if _, err := nb.JS.PublishAsync(subj, data, jetstream.WithMsgID(ev.EventId)); err != nil {
			b.Fatal(err)
		}
		bb := &batch{}
		if p := svcForDecode.decode(envelope{subject: subj, seq: uint64(i + 1), stamp: time.Now()}, data, bb); p != nil {
			b.Fatal(p.text)
		}
		raw.common.add(bb.calls.eventID[0], bb.calls.atMs[0], uint64(i+1))
		raw.tenant, raw.server, raw.proxy = append(raw.tenant, bb.calls.tenant[0]), append(raw.server, bb.calls.server[0]), append(raw.proxy, bb.calls.proxy[0])
		raw.tool, raw.outcome, raw.refusal = append(raw.tool, bb.calls.tool[0]), append(raw.outcome, bb.calls.outcome[0]), append(raw.refusal, bb.calls.refusal[0])
		raw.latency, raw.digest, raw.args = append(raw.latency, bb.calls.latency[0]), append(raw.digest, bb.calls.digest[0]), append(raw.args, bb.calls.args[0])
	}
	select {
	case <-nb.JS.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publishing did not complete")
	}
	cfg := DefaultConfig
	cfg.Database = db

	b.ResetTimer()
	var sinkDur, rawDur time.Duration
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
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- svc.Run(runCtx) }()
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
}

func sliceCalls(r *callRows, from, to int) *callRows {
	return &callRows{
		common: common{eventID: r.eventID[from:to], at: r.at[from:to], atMs: r.atMs[from:to], seq: r.seq[from:to]},
		tenant: r.tenant[from:to], server: r.server[from:to], proxy: r.proxy[from:to], tool: r.tool[from:to],
		outcome: r.outcome[from:to], refusal: r.refusal[from:to], digest: r.digest[from:to], args: r.args[from:to],
		latency: r.latency[from:to],
	}
}
