package driftsvc

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// Results of a fingerprint event, the result label of
// mcpdrift_drift_fingerprints_total.
const (
	ResultOK           = "ok"            // applied to the status (or already applied) and acked
	ResultRetried      = "retried"       // applying failed; handed back with a delay
	ResultDeadLettered = "dead_lettered" // never processable, or out of deliveries
)

// Metrics are the service's Prometheus metrics (docs/metrics.md). A nil
// *Metrics records nothing. Labels are bounded sets (results, codes,
// statuses): no tenant or server label, whose number has no bound.
type Metrics struct {
	fingerprints *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	verdicts     *prometheus.CounterVec
	writes       prometheus.Counter
	conflicts    prometheus.Counter
	rehashes     prometheus.Counter
	sweeps       *prometheus.CounterVec
	resettled    prometheus.Counter
	tightened    prometheus.Counter
	lag          prometheus.Histogram
}

// LagBuckets are the buckets of mcpdrift_drift_observation_lag_seconds,
// in seconds: from a pipeline keeping up (well under a second) to one a
// backlog or an outage holds back for half an hour.
var LagBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// NewMetrics registers the service's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fingerprints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_drift_fingerprints_total",
			Help: "Fingerprint events handled, by result: ok (applied and acked), retried (handed back after a failure) or dead_lettered.",
		}, []string{"result"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_drift_dead_letters_total",
			Help: "Fingerprint events dead-lettered, by code.",
		}, []string{"code"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_drift_verdicts_total",
			Help: "Verdicts published and stored, by the status they announce (a repeated announcement the bus de-duplicates is not counted).",
		}, []string{"status"}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_drift_status_writes_total",
			Help: "Status records written with compare-and-set (fingerprints that changed a record, approvals, quarantines).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_drift_cas_conflicts_total",
			Help: "Compare-and-set conflicts: another writer changed a status record or baseline first, and the change was read and applied again.",
		}),
		rehashes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_drift_rehashes_total",
			Help: "Fingerprints made with other hashing settings than their status record's (a policy change in flight, or one waiting for a re-baseline), hashed again from the stored manifest before they were compared.",
		}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpdrift_drift_policy_sweeps_total",
			Help: "Sweeps of a tenant's status records after its policy changed (and of every record at start), by result: ok or failed (tried again).",
		}, []string{"result"}),
		resettled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_drift_policy_resettled_total",
			Help: "Status records a policy sweep rewrote with the drift settings the policy resolves now (posture, on_drift, guard, or a hashing change marked wanted).",
		}),
		tightened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_drift_policy_risk_tightened_total",
			Help: "Server risk modes a policy sweep tightened because the policy maps the server's band to a stricter mode.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcpdrift_drift_observation_lag_seconds",
			Help:    "Time from a proxy observing a surface (the observation's timestamp) to the drift service applying its fingerprint: the pipeline's lag, observation to verdict.",
			Buckets: LagBuckets,
		}),
	}
	for _, r := range []string{ResultOK, "failed"} {
		m.sweeps.WithLabelValues(r)
	}
	for _, r := range []string{ResultOK, ResultRetried, ResultDeadLettered} {
		m.fingerprints.WithLabelValues(r)
	}
	for _, c := range bus.DeadLetterCodes {
		m.deadLetters.WithLabelValues(c)
	}
	for st := range statusOf {
		m.verdicts.WithLabelValues(string(st))
	}
	reg.MustRegister(m.fingerprints, m.deadLetters, m.verdicts, m.writes, m.conflicts, m.rehashes, m.sweeps, m.resettled, m.tightened, m.lag)
	return m
}

func (m *Metrics) fingerprint(result string) {
	if m != nil {
		m.fingerprints.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) deadLetter(code string) {
	if m != nil {
		m.fingerprints.WithLabelValues(ResultDeadLettered).Inc()
		m.deadLetters.WithLabelValues(code).Inc()
	}
}

func (m *Metrics) verdict(st state.Status) {
	if m != nil {
		m.verdicts.WithLabelValues(string(st)).Inc()
	}
}

// observed records the lag of a fingerprint applied: from observedAt to
// now (0 when the observer's clock is ahead).
func (m *Metrics) observed(observedAt, now time.Time) {
	if m != nil {
		m.lag.Observe(max(now.Sub(observedAt), 0).Seconds())
	}
}

func (m *Metrics) write() {
	if m != nil {
		m.writes.Inc()
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

func (m *Metrics) rehashed() {
	if m != nil {
		m.rehashes.Inc()
	}
}

// swept counts one sweep: ok with what it rewrote, or failed.
func (m *Metrics) swept(ok bool, resettled, tightened int) {
	if m == nil {
		return
	}
	if !ok {
		m.sweeps.WithLabelValues("failed").Inc()
		return
	}
	m.sweeps.WithLabelValues(ResultOK).Inc()
	m.resettled.Add(float64(resettled))
	m.tightened.Add(float64(tightened))
}
