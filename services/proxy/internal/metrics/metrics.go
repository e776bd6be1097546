// Package metrics is the proxy's Prometheus metrics (docs/metrics.md,
// "proxy"). What the sessions do is counted as it happens: calls by
// outcome, refusals by code, calls forwarded under the alert posture by
// code, whole surfaces observed and items withheld
// (Observer and Meter). What the gates and publishers know is read when
// Prometheus scrapes: servers withheld, the status watches, the outbox and
// the events published, spooled and dropped. Labels are small fixed sets;
// there is no server or tenant label (docs/metrics.md, "Labels"), so a proxy
// fronting several upstreams reports their sum.
package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Call outcomes, the outcome label of mcpdrift_proxy_calls_total.
const (
	OutcomeForwarded = "forwarded" // passed to the server, which answered with a result
	OutcomeRefused   = "refused"   // answered by the proxy with a tool error
	OutcomeError     = "error"     // passed, and the server answered with an error or a tool error
)

// CodeOther is the code label of a refusal the proxy does not know (a
// status a newer drift service writes), or of an alert other than
// session.AlertCodes.
const CodeOther session.Code = "other"

// The code label values of mcpdrift_proxy_refused_calls_total and
// mcpdrift_proxy_alerted_calls_total: the session's codes, and CodeOther.
var (
	refusalLabels = append(slices.Clone(session.RefusalCodes), CodeOther)
	alertLabels   = append(slices.Clone(session.AlertCodes), CodeOther)
)

// Gate is what the metrics read of a server's gate (fleet.Gate).
type Gate interface {
	Watching() bool
	Serving() bool
	CopyStats() fleet.CopyStats
}

// Publisher is what the metrics read of a server's publisher
// (fleet.Publisher).
type Publisher interface {
	Stats() fleet.Stats
}

// Upstream is one server the proxy fronts.
type Upstream struct {
	Gate      Gate
	Publisher Publisher
}

// Metrics are the proxy's metrics. A nil *Metrics counts nothing.
type Metrics struct {
	forwarded, refused, errored prometheus.Counter
	refusals                    map[session.Code]prometheus.Counter
	alerts                      map[session.Code]prometheus.Counter
	listings                    prometheus.Counter
	compact                     prometheus.Counter
	withheld                    [surface.KindPromptMessages + 1]prometheus.Counter
	dropped                     map[session.Code]prometheus.Counter
	decisions, shadow           *prometheus.CounterVec // by action; nil until AddPolicy
}

// New registers the proxy's metrics on reg, reading the state of ups at
// each scrape.
func New(reg prometheus.Registerer, ups []Upstream) *Metrics {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_calls_total",
		Help: "tools/call requests the proxy handled, by outcome: forwarded (answered with a result), refused (by the proxy), error (the server answered with an error or a tool error).",
	}, []string{"outcome"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_refused_calls_total",
		Help: "tools/call requests the proxy refused, by the refusal's code.",
	}, []string{"code"})
	alerts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_alerted_calls_total",
		Help: "tools/call requests forwarded only because the server's drift policy is alert (on_drift: alert), by the code the block posture would have refused them with; also counted in mcpdrift_proxy_calls_total.",
	}, []string{"code"})
	withheld := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_withheld_items_total",
		Help: "Items taken out of what clients got, by kind: listing items not approved, and unapproved initialize instructions.",
	}, []string{"kind"})
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_dropped_messages_total",
		Help: "Messages from upstream servers the proxy did not deliver because it could not judge them, by code (session.DropCodes).",
	}, []string{"code"})
	m := &Metrics{
		dropped:   map[session.Code]prometheus.Counter{},
		forwarded: calls.WithLabelValues(OutcomeForwarded),
		refused:   calls.WithLabelValues(OutcomeRefused),
		errored:   calls.WithLabelValues(OutcomeError),
		refusals:  map[session.Code]prometheus.Counter{},
		alerts:    map[session.Code]prometheus.Counter{},
		listings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_proxy_listings_total",
			Help: "Complete surfaces (every listing the server declares, all pages) the proxy observed and handed to its publisher, whole or compact.",
		}),
		compact: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpdrift_proxy_listings_compact_total",
			Help: "Of the listings, those handed to the publisher in the compact form (a surface hash the pipeline already confirmed, no manifest).",
		}),
	}
	for _, code := range refusalLabels {
		m.refusals[code] = refusals.WithLabelValues(string(code))
	}
	for _, code := range alertLabels {
		m.alerts[code] = alerts.WithLabelValues(string(code))
	}
	for k := surface.KindTool; k <= surface.KindPromptMessages; k++ {
		m.withheld[k] = withheld.WithLabelValues(k.String())
	}
	for _, code := range session.DropCodes {
		m.dropped[code] = dropped.WithLabelValues(string(code))
	}
	reg.MustRegister(calls, refusals, alerts, withheld, dropped, m.listings, m.compact, &state{ups: ups})
	return m
}

// Observer returns an observer that counts each call and listing and then
// hands it to next.
func (m *Metrics) Observer(next session.Observer) session.Observer {
	if m == nil {
		return next
	}
	return observer{m: m, next: next}
}

type observer struct {
	m    *Metrics
	next session.Observer
}

func (o observer) Listing(l session.Listed, capture []byte) {
	o.m.listings.Inc()
	o.next.Listing(l, capture)
}

func (o observer) Seen(l session.Listed) {
	o.m.listings.Inc()
	o.m.compact.Inc()
	o.next.Seen(l)
}

func (o observer) Call(c session.Call) {
	switch {
	case c.Refused:
		o.m.refused.Inc()
		r, ok := o.m.refusals[c.RefusalCode]
		if !ok {
			r = o.m.refusals[CodeOther]
		}
		r.Inc()
	case c.Error:
		o.m.errored.Inc()
	default:
		o.m.forwarded.Inc()
	}
	if o.m.decisions != nil && c.Policy.Action != "" {
		o.m.decisions.WithLabelValues(policyLabel(c.Policy.Action)).Inc()
	}
	if o.m.shadow != nil && c.Policy.ShadowAction != "" {
		o.m.shadow.WithLabelValues(policyLabel(c.Policy.ShadowAction)).Inc()
	}
	if c.AlertCode != "" && !c.Refused {
		a, ok := o.m.alerts[c.AlertCode]
		if !ok {
			a = o.m.alerts[CodeOther]
		}
		a.Inc()
	}
	o.next.Call(c)
}

// Withheld implements session.Meter.
func (m *Metrics) Withheld(kind surface.Kind, n int) {
	if m != nil && kind >= surface.KindTool && kind <= surface.KindPromptMessages {
		m.withheld[kind].Add(float64(n))
	}
}

// Dropped implements session.Meter.
func (m *Metrics) Dropped(code session.Code) {
	if m == nil {
		return
	}
	if c, ok := m.dropped[code]; ok {
		c.Inc()
	}
}

// state reads the gates and publishers at scrape time.
type state struct{ ups []Upstream }

var (
	descServersWithheld = prometheus.NewDesc("mcpdrift_proxy_servers_withheld",
		"Servers this proxy fronts that it does not serve now: no status record yet, or a listing variant whose status does not serve.", nil, nil)
	descGateConnected = prometheus.NewDesc("mcpdrift_proxy_gate_connected",
		"1 while every upstream's gate has its status watch up (connected to NATS, the records that exist loaded); 0 while any answers from memory.", nil, nil)
	descOutboxEvents = prometheus.NewDesc("mcpdrift_proxy_outbox_events",
		"Events waiting in the on-disk outbox to be published.", nil, nil)
	descOutboxBytes = prometheus.NewDesc("mcpdrift_proxy_outbox_bytes",
		"Bytes of the events waiting in the on-disk outbox.", nil, nil)
	descQueued = prometheus.NewDesc("mcpdrift_proxy_events_queued",
		"Events in the in-memory queue, not published yet.", nil, nil)
	descCopyInUse = prometheus.NewDesc("mcpdrift_proxy_status_copy_in_use",
		"Servers whose gate answers from its on-disk status copy: started while NATS is unreachable, no status watch loaded yet.", nil, nil)
	descCopyIgnored = prometheus.NewDesc("mcpdrift_proxy_status_copies_ignored_total",
		"Status copies read at start and not used (or dropped while in use, expired), by reason: corrupt (does not parse, or its HMAC does not match), foreign (another tenant's, server's or proxy's), expired (last live longer ago than --status-cache-max-age).", []string{"reason"}, nil)
	descCopyWriteErrors = prometheus.NewDesc("mcpdrift_proxy_status_copy_write_errors_total",
		"Writes of a status copy that failed.", nil, nil)
	descEvents = prometheus.NewDesc("mcpdrift_proxy_events_total",
		"Observation events, by result: published (acknowledged by JetStream, directly or from the outbox), spooled (written to the outbox), dropped (lost to the outbox bounds or an unusable outbox), rejected (refused by JetStream for good).", []string{"result"}, nil)
)

func (s *state) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descServersWithheld, descGateConnected, descOutboxEvents, descOutboxBytes, descQueued, descEvents, descCopyInUse, descCopyIgnored, descCopyWriteErrors} {
		ch <- d
	}
}

func (s *state) Collect(ch chan<- prometheus.Metric) {
	withheld, connected, inUse := 0, 1, 0
	var st fleet.Stats
	ignored := map[string]uint64{}
	var writeErrors uint64
	for _, u := range s.ups {
		cs := u.Gate.CopyStats()
		if cs.InUse {
			inUse++
		}
		for r, n := range cs.Ignored {
			ignored[r] += n
		}
		writeErrors += cs.WriteErrors
		if !u.Gate.Serving() {
			withheld++
		}
		if !u.Gate.Watching() {
			connected = 0
		}
		st.Add(u.Publisher.Stats())
	}
	ch <- prometheus.MustNewConstMetric(descServersWithheld, prometheus.GaugeValue, float64(withheld))
	ch <- prometheus.MustNewConstMetric(descGateConnected, prometheus.GaugeValue, float64(connected))
	ch <- prometheus.MustNewConstMetric(descOutboxEvents, prometheus.GaugeValue, float64(st.OutboxDepth))
	ch <- prometheus.MustNewConstMetric(descOutboxBytes, prometheus.GaugeValue, float64(st.OutboxBytes))
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(descCopyInUse, prometheus.GaugeValue, float64(inUse))
	for _, r := range fleet.CopyReasons {
		ch <- prometheus.MustNewConstMetric(descCopyIgnored, prometheus.CounterValue, float64(ignored[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(descCopyWriteErrors, prometheus.CounterValue, float64(writeErrors))
	for _, e := range []struct {
		result string
		n      uint64
	}{{"published", st.Published}, {"spooled", st.Spooled}, {"dropped", st.Dropped}, {"rejected", st.Rejected}} {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(e.n), e.result)
	}
}

// policyActions are the action label values of the policy metrics; any
// other action is "other".
var policyActions = []string{string(policy.Allow), string(policy.Audit), string(policy.Sanitize), string(policy.Deny), string(policy.PendingApproval)}

func policyLabel(action string) string {
	if slices.Contains(policyActions, action) {
		return action
	}
	return "other"
}

// Policy is what the metrics read of a proxy's policy (fleet.Policy).
type Policy interface{ Stats() fleet.PolicyStats }

// Approvals is what the metrics read of a proxy's approvals
// (fleet.Approvals).
type Approvals interface {
	Outcomes() []uint64
	Held() (n int, oldest time.Duration)
}

// AddPolicy registers the per-call policy's metrics; pol nil (--policy
// off) registers nothing.
func (m *Metrics) AddPolicy(reg prometheus.Registerer, pol *fleet.Policy, ap *fleet.Approvals) {
	if m == nil || pol == nil {
		return
	}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_policy_decisions_total",
		Help: "tools/call requests the per-call policy decided on, by the enforced action (allow when no rule matched).",
	}, []string{"action"})
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpdrift_proxy_policy_shadow_matches_total",
		Help: "tools/call requests a shadow rule matched (recorded, not enforced), by the shadow rule's action.",
	}, []string{"action"})
	for _, a := range append(slices.Clone(policyActions), "other") {
		m.decisions.WithLabelValues(a)
		m.shadow.WithLabelValues(a)
	}
	reg.MustRegister(m.decisions, m.shadow, &policyState{pol: pol, ap: ap})
}

var (
	descPolicyVersion = prometheus.NewDesc("mcpdrift_proxy_policy_version",
		"The version of the tenant's policy the proxy enforces (0: none stored, or none known).", nil, nil)
	descPolicyKnown = prometheus.NewDesc("mcpdrift_proxy_policy_known",
		"1 while the proxy knows its tenant's policy (loaded from the bucket or its copy, or known to be absent); 0 while it refuses every call (policy_unknown, policy_invalid).", nil, nil)
	descPolicyApplied = prometheus.NewDesc("mcpdrift_proxy_policy_updates_total",
		"Stored policies the proxy received, by result: applied (compiled and enforced), rejected (undecodable, another tenant's, or not compiling; the last good policy stays).", []string{"result"}, nil)
	descApprovals = prometheus.NewDesc("mcpdrift_proxy_approvals_total",
		"Calls held for approval, by outcome: approved, denied, timeout (--approval-wait passed), unavailable (the request could not be delivered, or the client went away).", []string{"outcome"}, nil)
	descHeld = prometheus.NewDesc("mcpdrift_proxy_calls_held",
		"Calls held now, waiting for an admin's approval.", nil, nil)
	descHeldOldest = prometheus.NewDesc("mcpdrift_proxy_held_call_oldest_seconds",
		"How long the call held longest has waited so far for its approval (0 when none is held).", nil, nil)
)

type policyState struct {
	pol Policy
	ap  Approvals
}

func (s *policyState) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPolicyVersion, descPolicyKnown, descPolicyApplied, descApprovals, descHeld, descHeldOldest} {
		ch <- d
	}
}

func (s *policyState) Collect(ch chan<- prometheus.Metric) {
	st := s.pol.Stats()
	known := 0.0
	if st.Known {
		known = 1
	}
	ch <- prometheus.MustNewConstMetric(descPolicyVersion, prometheus.GaugeValue, float64(st.Version))
	ch <- prometheus.MustNewConstMetric(descPolicyKnown, prometheus.GaugeValue, known)
	ch <- prometheus.MustNewConstMetric(descPolicyApplied, prometheus.CounterValue, float64(st.Applied), "applied")
	ch <- prometheus.MustNewConstMetric(descPolicyApplied, prometheus.CounterValue, float64(st.Rejected), "rejected")
	if s.ap != nil {
		for i, n := range s.ap.Outcomes() {
			ch <- prometheus.MustNewConstMetric(descApprovals, prometheus.CounterValue, float64(n), fleet.ApprovalOutcomes[i])
		}
		n, oldest := s.ap.Held()
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(descHeldOldest, prometheus.GaugeValue, oldest.Seconds())
	}
}
