package ops

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// BenchmarkScrape measures GET /metrics in the same run for a bare server
// (Go and process collectors, build info) and for one with as many mcpdrift_
// series as the audit sink has (about 20, one histogram) and three consumers'
// lag, as cached between NATS requests. It reports the ratio and the bytes
// of one scrape.
func BenchmarkScrape(b *testing.B) {
	nb := natstest.StartBus(b)
	for _, d := range []string{"c1", "c2", "c3"} {
		if _, err := nb.JS.CreateOrUpdateConsumer(context.Background(), bus.StreamObservations, jetstream.ConsumerConfig{Durable: d}); err != nil {
			b.Fatal(err)
		}
	}
	bare := New("bench", zerolog.Nop())
	full := New("bench", zerolog.Nop())
	rows := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpdrift_bench_rows_total", Help: "Rows."}, []string{"table"})
	codes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpdrift_bench_dead_letters_total", Help: "Codes."}, []string{"code"})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mcpdrift_bench_seconds", Help: "Time.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	full.Registry().MustRegister(rows, codes, hist)
	for _, t := range []string{"a", "b", "c", "d", "e"} {
		rows.WithLabelValues(t).Add(1000)
		codes.WithLabelValues(t).Inc()
	}
	hist.Observe(0.02)
	for _, d := range []string{"c1", "c2", "c3"} {
		full.AddConsumerLag(nb.JS, bus.StreamObservations, d)
	}
	full.lag.maxAge = time.Hour // the cached answer, as between NATS requests

	scrape := func(h http.Handler) (time.Duration, int) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET /metrics = %d", rec.Code)
		}
		return time.Since(start), rec.Body.Len()
	}
	hb, hf := bare.Handler(), full.Handler()
	scrape(hf) // the first scrape asks NATS
	var tb, tf time.Duration
	var size int
	for b.Loop() {
		d, _ := scrape(hb)
		tb += d
		d, size = scrape(hf)
		tf += d
	}
	b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N), "ns/scrape")
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "ns/bare-scrape")
	b.ReportMetric(float64(tf)/float64(tb), "ratio")
	b.ReportMetric(float64(size), "bytes/scrape")
}
