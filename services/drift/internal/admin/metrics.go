package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of an admin request, the result label of
// mcpdrift_drift_admin_actions_total.
const (
	ResultOK     = "ok"     // done (a tail: started)
	ResultDenied = "denied" // no valid token (401) or not the role it needs (403)
	ResultFailed = "failed" // authorized, and answered with an error (bad request, not found, stale hash, audit unavailable, ...)
)

// actions are the audited actions, one per endpoint.
var actions = []string{"status", "show", "diff", "history", "approve", "quarantine", "tail", "policy_apply", "policy_list", "policy_test"}

// Metrics are the admin API's Prometheus metrics (docs/metrics.md). A nil
// *Metrics records nothing.
type Metrics struct {
	actions *prometheus.CounterVec
}

// NewMetrics registers the admin API's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{actions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_drift_admin_actions_total",
		Help: "Admin API requests, by action and result: ok, denied (unauthenticated or forbidden) or failed.",
	}, []string{"action", "result"})}
	for _, a := range actions {
		for _, r := range []string{ResultOK, ResultDenied, ResultFailed} {
			m.actions.WithLabelValues(a, r)
		}
	}
	reg.MustRegister(m.actions)
	return m
}

// done counts a request answered with status.
func (m *Metrics) done(action string, status int) {
	if m == nil {
		return
	}
	result := ResultOK
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		result = ResultDenied
	case status >= 400:
		result = ResultFailed
	}
	m.actions.WithLabelValues(action, result).Inc()
}
