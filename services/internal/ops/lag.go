package ops

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Lag polling bounds: a scrape asks NATS for a consumer's info at most once
// per LagMaxAge (later scrapes reuse the answer), and waits at most
// LagTimeout for it.
const (
	LagMaxAge  = 5 * time.Second
	LagTimeout = time.Second
)

var (
	descPending = prometheus.NewDesc(Namespace+"_consumer_pending",
		"Messages of the stream the durable consumer has not delivered yet (NumPending).", []string{"consumer"}, nil)
	descAckPending = prometheus.NewDesc(Namespace+"_consumer_ack_pending",
		"Messages delivered by the durable consumer and not acknowledged yet (NumAckPending).", []string{"consumer"}, nil)
	descInfoErrors = prometheus.NewDesc(Namespace+"_consumer_info_errors_total",
		"Failed requests for the durable consumer's info (its lag is not reported until one succeeds).", []string{"consumer"}, nil)
)

// AddConsumerLag reports the lag of a durable consumer on a stream as
// mcpdrift_consumer_pending and mcpdrift_consumer_ack_pending, labelled by
// the consumer's name. The first call registers the collector; later calls
// add consumers to it.
func (s *Server) AddConsumerLag(js jetstream.JetStream, stream, consumer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lag == nil {
		s.lag = &lagCollector{maxAge: LagMaxAge}
		s.reg.MustRegister(s.lag)
	}
	s.lag.add(js, stream, consumer)
}

// lagCollector asks NATS for consumer info when scraped, at most once per
// LagMaxAge, and reports what it last learned. A consumer whose info could
// not be had has no pending samples (stale rather than wrong) and its error
// counter moves.
type lagCollector struct {
	mu        sync.Mutex
	consumers []*lagEntry
	fetched   time.Time
	maxAge    time.Duration // LagMaxAge; tests change it
}

type lagEntry struct {
	js               jetstream.JetStream
	stream, consumer string
	ok               bool
	pending          uint64
	ackPending       int
	errors           uint64
}

func (c *lagCollector) add(js jetstream.JetStream, stream, consumer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumers = append(c.consumers, &lagEntry{js: js, stream: stream, consumer: consumer})
	c.fetched = time.Time{}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descAckPending
	ch <- descInfoErrors
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.fetched) >= c.maxAge {
		c.refresh()
		c.fetched = time.Now()
	}
	for _, e := range c.consumers {
		if e.ok {
			ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(e.pending), e.consumer)
			ch <- prometheus.MustNewConstMetric(descAckPending, prometheus.GaugeValue, float64(e.ackPending), e.consumer)
		}
		ch <- prometheus.MustNewConstMetric(descInfoErrors, prometheus.CounterValue, float64(e.errors), e.consumer)
	}
}

// refresh asks for every consumer's info at once, each bounded by LagTimeout.
func (c *lagCollector) refresh() {
	var wg sync.WaitGroup
	for _, e := range c.consumers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), LagTimeout)
			defer cancel()
			cons, err := e.js.Consumer(ctx, e.stream, e.consumer)
			if err != nil {
				e.ok = false
				// Not created yet (a service registers its lag before it
				// starts consuming): no lag to report, and nothing failed.
				if !errors.Is(err, jetstream.ErrConsumerNotFound) {
					e.errors++
				}
				return
			}
			info := cons.CachedInfo()
			e.ok, e.pending, e.ackPending = true, info.NumPending, info.NumAckPending
		})
	}
	wg.Wait()
}
