package natstest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AckOnly times an ack-only consumer of stream made with cfg, from its
// creation until the server has every one of n acks: the floor of the bus
// that a service's benchmark measures itself against in the same run.
func AckOnly(tb testing.TB, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, n int, opts ...jetstream.PullConsumeOpt) time.Duration {
	tb.Helper()
	began := time.Now()
	cons, err := js.CreateOrUpdateConsumer(context.Background(), stream, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		_ = msg.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	}, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	<-done
	Settled(tb, cons)
	took := time.Since(began)
	cc.Stop()
	<-cc.Closed()
	return took
}

// Settled waits until cons has nothing pending and nothing unacked. It
// polls every millisecond, not at poll.Interval: benchmarks time it.
func Settled(tb testing.TB, cons jetstream.Consumer) {
	tb.Helper()
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
