package notifysvc

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Metrics are the service's Prometheus metrics (docs/metrics.md). A nil
// *Metrics records nothing. The destination label takes the names of the
// configured destinations (a few); there is no tenant or server label.
type Metrics struct {
	events      *prometheus.CounterVec
	failures    *prometheus.CounterVec
	retries     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	duration    *prometheus.HistogramVec
}

// Results of an event at a destination, the result label of
// mcpdrift_notify_events_total.
const (
	ResultDelivered    = "delivered"     // the destination answered 2xx; acked
	ResultFiltered     = "filtered"      // its filter left it out (or a deleted approval); acked, not sent
	ResultDeadLettered = "dead_lettered" // out of deliveries, or not an event: dead-lettered and terminated
)

// NewMetrics registers the service's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_notify_events_total",
			Help: "Events settled per destination, by result: delivered (a 2xx answer), filtered (left out by the destination's filter) or dead_lettered.",
		}, []string{"destination", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_notify_delivery_failures_total",
			Help: "Failed attempts to deliver an event, per destination and reason: connect, timeout, http_3xx, http_4xx, http_5xx.",
		}, []string{"destination", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_notify_retries_total",
			Help: "Events handed back with a delay after a failed attempt, per destination.",
		}, []string{"destination"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_notify_dead_letters_total",
			Help: "Events a destination gave up on, dead-lettered on mcpdrift.dead.notify-<destination>, by code.",
		}, []string{"destination", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcpdrift_notify_delivery_seconds",
			Help:    "Time of the requests a destination accepted.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"destination"}),
	}
	reg.MustRegister(m.events, m.failures, m.retries, m.deadLetters, m.duration)
	return m
}

// destMetrics are one destination's series, every one exported from the
// start.
type destMetrics struct {
	nDelivered, nFiltered, deadLettered, retries prometheus.Counter
	failures                                     map[string]prometheus.Counter
	deadLetters                                  *prometheus.CounterVec
	name                                         string
	duration                                     prometheus.Observer
}

func (m *Metrics) destination(name string) *destMetrics {
	if m == nil {
		return nil
	}
	d := &destMetrics{
		nDelivered:   m.events.WithLabelValues(name, ResultDelivered),
		nFiltered:    m.events.WithLabelValues(name, ResultFiltered),
		deadLettered: m.events.WithLabelValues(name, ResultDeadLettered),
		retries:      m.retries.WithLabelValues(name),
		failures:     map[string]prometheus.Counter{},
		deadLetters:  m.deadLetters,
		name:         name,
		duration:     m.duration.WithLabelValues(name),
	}
	for _, r := range FailureReasons {
		d.failures[r] = m.failures.WithLabelValues(name, r)
	}
	for _, code := range bus.DeadLetterCodes {
		m.deadLetters.WithLabelValues(name, code)
	}
	return d
}

func (d *destMetrics) delivered(took time.Duration) {
	if d != nil {
		d.nDelivered.Inc()
		d.duration.Observe(took.Seconds())
	}
}

func (d *destMetrics) filtered() {
	if d != nil {
		d.nFiltered.Inc()
	}
}

func (d *destMetrics) failure(reason string) {
	if d != nil {
		d.failures[reason].Inc()
	}
}

func (d *destMetrics) retry() {
	if d != nil {
		d.retries.Inc()
	}
}

func (d *destMetrics) deadLetter(code string) {
	if d != nil {
		d.deadLettered.Inc()
		d.deadLetters.WithLabelValues(d.name, code).Inc()
	}
}
