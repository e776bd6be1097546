package fpsvc

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Results of an observation, the result label of
// mcpdrift_fingerprint_observations_total.
const (
	ResultOK           = "ok"            // fingerprinted, Fingerprint published, acked
	ResultRejected     = "rejected"      // the engine refused the surface; a Fingerprint with its code published, acked
	ResultDeadLettered = "dead_lettered" // never processable, or out of deliveries: dead-lettered and terminated
)

// Metrics are the service's Prometheus metrics (docs/metrics.md). A nil
// *Metrics records nothing. Labels are bounded sets (results and dead-letter
// codes): no tenant or server label, whose number has no bound.
type Metrics struct {
	ok, rejected, deadLettered prometheus.Counter
	retries                    prometheus.Counter
	deadLetters                *prometheus.CounterVec
	duration                   prometheus.Histogram
}

// NewMetrics registers the service's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	obs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_fingerprint_observations_total",
		Help: "Observations settled, by result: ok, rejected (the engine refused the surface; the Fingerprint carries its code) or dead_lettered.",
	}, []string{"result"})
	m := &Metrics{
		ok:           obs.WithLabelValues(ResultOK),
		rejected:     obs.WithLabelValues(ResultRejected),
		deadLettered: obs.WithLabelValues(ResultDeadLettered),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_fingerprint_retries_total",
			Help: "Deliveries handed back with a delay after a transient failure (storing the manifest or publishing).",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_fingerprint_dead_letters_total",
			Help: "Observations dead-lettered, by code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcpdrift_fingerprint_duration_seconds",
			Help:    "Time to fingerprint one observation's surface (parse, canonicalize, hash, encode; a remembered capture is fast).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	for _, code := range bus.DeadLetterCodes {
		m.deadLetters.WithLabelValues(code)
	}
	reg.MustRegister(obs, m.retries, m.deadLetters, m.duration)
	return m
}

func (m *Metrics) settled(rejected bool) {
	switch {
	case m == nil:
	case rejected:
		m.rejected.Inc()
	default:
		m.ok.Inc()
	}
}

func (m *Metrics) deadLetter(code string) {
	if m != nil {
		m.deadLettered.Inc()
		m.deadLetters.WithLabelValues(code).Inc()
	}
}

func (m *Metrics) retry() {
	if m != nil {
		m.retries.Inc()
	}
}

func (m *Metrics) fingerprinted(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}
