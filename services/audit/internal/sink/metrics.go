package sink

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Tables are the audit tables rows are written to, the table label of
// mcpdrift_audit_rows_written_total.
var Tables = []string{"list_observations", "call_observations", "verdicts", "admin_actions", "dead_letters"}

// Metrics are the sink's Prometheus metrics (docs/metrics.md). A nil
// *Metrics records nothing. Labels are bounded sets (tables, codes): no
// tenant or server label, whose number has no bound.
type Metrics struct {
	rows        *prometheus.CounterVec
	batches     prometheus.Counter
	batchTime   prometheus.Histogram
	failures    prometheus.Counter
	deadLetters *prometheus.CounterVec
	held        prometheus.Gauge
}

// NewMetrics registers the sink's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_audit_rows_written_total",
			Help: "Rows written to ClickHouse and acked, by table (one per event).",
		}, []string{"table"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_audit_batches_total",
			Help: "Batches written to ClickHouse.",
		}),
		batchTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcpdrift_audit_batch_seconds",
			Help:    "Time to write one batch to ClickHouse (every table it has rows for), for the attempts that succeeded.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_audit_write_failures_total",
			Help: "Failed attempts to write a batch to ClickHouse; the batch is held and retried, nothing is acked meanwhile.",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_audit_dead_letters_total",
			Help: "Events that can never be written, dead-lettered and terminated, by code.",
		}, []string{"code"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpdrift_audit_rows_held",
			Help: "Rows decoded and not yet written: the batch being filled and the batch being written or retried.",
		}),
	}
	for _, t := range Tables {
		m.rows.WithLabelValues(t)
	}
	for _, c := range bus.DeadLetterCodes {
		m.deadLetters.WithLabelValues(c)
	}
	reg.MustRegister(m.rows, m.batches, m.batchTime, m.failures, m.deadLetters, m.held)
	return m
}

// added counts the n rows of a message taken into a batch.
func (m *Metrics) added(n int) {
	if m != nil {
		m.held.Add(float64(n))
	}
}

// written counts a batch written in d.
func (m *Metrics) written(b *batch, d time.Duration) {
	if m == nil {
		return
	}
	for _, t := range b.tables() {
		if n := t.len(); n > 0 {
			m.rows.WithLabelValues(t.name()).Add(float64(n))
		}
	}
	m.batches.Inc()
	m.batchTime.Observe(d.Seconds())
	m.held.Sub(float64(b.rows()))
}

// handedBack counts a batch's rows given back to JetStream unwritten.
func (m *Metrics) handedBack(b *batch) {
	if m != nil {
		m.held.Sub(float64(b.rows()))
	}
}

func (m *Metrics) failure() {
	if m != nil {
		m.failures.Inc()
	}
}

func (m *Metrics) deadLetter(code string) {
	if m != nil {
		m.deadLetters.WithLabelValues(code).Inc()
	}
}
