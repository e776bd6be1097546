package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// recovery is what the failure scenarios measured.
type recovery struct {
	Error      string       `json:"error,omitempty"`
	NATS       natsKill     `json:"nats_node_killed"`
	Drift      serviceKill  `json:"drift_instance_killed"`
	Audit      *serviceKill `json:"audit_sink_killed,omitempty"`
	Accounting accounting   `json:"accounting"`
}

// natsKill: a NATS node (the leader of the status bucket) killed under load.
type natsKill struct {
	Node string `json:"node"`
	// Probes: right after the kill, one rug pull behind every proxy (on one
	// of its servers): each must reach every proxy that fronts its server.
	Probes            int     `json:"probes"`
	ProbesCompleted   int     `json:"probes_completed"`
	FirstVerdictS     float64 `json:"kill_to_first_verdict_at_a_proxy_s"`   // verdicts flow again
	AllProbesS        float64 `json:"kill_to_every_probe_at_every_proxy_s"` // every proxy's watch delivers again
	FirstStatusWriteS float64 `json:"kill_to_first_status_write_s"`         // the pipeline writes again
	GatesWatchDown    int     `json:"gates_that_logged_watch_down"`
	LastWatchResumedS float64 `json:"kill_to_last_watch_resumed_s"`
	ProbeObsToAll     dist    `json:"drifts_after_kill_obs_to_every_proxy"`
	Restarted         float64 `json:"node_back_healthy_s"`
}

// serviceKill: a service process killed (SIGKILL) under load, restarted later.
type serviceKill struct {
	Process       string  `json:"process"`
	DownS         float64 `json:"down_s"`
	Drifts        int     `json:"drifts_during"`
	DriftsMissing int     `json:"drifts_not_seen_everywhere"`
	DriftObsToAll dist    `json:"drift_obs_to_every_proxy"`
	Note          string  `json:"note,omitempty"`
}

// accounting compares what was published with what each stage holds.
type accounting struct {
	ListingsIssued int               `json:"listings_issued"`
	CallsIssued    int               `json:"calls_issued"`
	Published      uint64            `json:"publisher_published"`
	Spooled        uint64            `json:"publisher_spooled"`
	Dropped        uint64            `json:"publisher_dropped"`
	Rejected       uint64            `json:"publisher_rejected"`
	OutboxLeft     int               `json:"outbox_left"`
	ListMsgs       uint64            `json:"stream_list_observations"`
	Fingerprints   uint64            `json:"stream_fingerprints"`
	Verdicts       uint64            `json:"stream_verdicts"`
	DriftPending   uint64            `json:"drift_consumer_unprocessed"`
	StatusChanged  int               `json:"status_records_changed"`
	ServersDrifted int               `json:"servers_drifted"`
	AuditRows      map[string]uint64 `json:"audit_rows,omitempty"`
	AuditPending   uint64            `json:"audit_consumers_unprocessed"`
}

// runRecovery runs the three failure scenarios on a running deployment,
// each under the steady load, then counts.
func runRecovery(ctx context.Context, c Config, e *env, rec *recorder, log zerolog.Logger) (*recovery, error) {
	rc := &recovery{}
	spec := loadSpec{obs: c.Rates[0], drifts: c.DriftRate, calls: c.CallRate}
	background := func(d time.Duration) func() {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			drive(lctx, e.f, spec, d)
		}()
		return func() { cancel(); <-done }
	}

	// 1. A NATS node dies: the leader of the status bucket every gate watches.
	rec.take()
	stop := background(90 * time.Second)
	time.Sleep(3 * time.Second)
	kvStream := "KV_" + bus.BucketStatus
	leader := streamLeader(ctx, e.js, kvStream)
	if leader == "" {
		leader = "nats-1"
	}
	rc.NATS.Node = leader
	tKill := time.Now()
	if err := e.c.kill(leader); err != nil {
		stop()
		return nil, err
	}
	log.Info().Str("node", leader).Msg("killed the status bucket's leader")
	rng := rand.New(rand.NewPCG(uint64(tKill.UnixNano()), 11))
	for _, p := range e.f.proxies {
		for _, i := range rng.Perm(len(p.servers)) {
			srv := p.servers[i]
			srv.mu.Lock()
			if srv.drifted || rec.pending(srv.key()) {
				srv.mu.Unlock()
				continue
			}
			srv.drifted = true
			srv.manifest = rugPull(srv.manifest)
			m := srv.manifest
			srv.mu.Unlock()
			now := time.Now()
			rec.expectChange(srv.key(), "changed", p.id, srv.fronts, now)
			e.f.list(p, srv, m, now)
			rc.NATS.Probes++
			break
		}
	}
	waitFor(60*time.Second, func() bool { return rec.pendingCount() == 0 })
	missing := rec.dropExpectations()
	s := rec.take()
	rc.NATS.ProbesCompleted = rc.NATS.Probes - min(missing, rc.NATS.Probes)
	var first, all time.Time
	var probe []time.Duration
	for _, d := range s.done {
		if d.t0.Before(tKill) {
			continue
		}
		if first.IsZero() || d.observer.Before(first) {
			first = d.observer
		}
		if d.all.After(all) {
			all = d.all
		}
		probe = append(probe, d.all.Sub(d.t0))
	}
	if !first.IsZero() {
		rc.NATS.FirstVerdictS = round2(first.Sub(tKill).Seconds())
		rc.NATS.AllProbesS = round2(all.Sub(tKill).Seconds())
	}
	rc.NATS.ProbeObsToAll = summarize(probe)
	if w := firstWriteAfter(s, tKill); w > 0 {
		rc.NATS.FirstStatusWriteS = round2(w.Seconds())
	}
	downs, ups := rec.watchEvents(tKill)
	rc.NATS.GatesWatchDown = len(downs)
	if len(ups) > 0 {
		rc.NATS.LastWatchResumedS = round2(ups[len(ups)-1].Sub(tKill).Seconds())
	}
	tr := time.Now()
	if err := e.c.restart(leader); err != nil {
		stop()
		return nil, err
	}
	if err := e.c.waitHealthy(60 * time.Second); err != nil {
		stop()
		return nil, err
	}
	rc.NATS.Restarted = round2(time.Since(tr).Seconds())
	stop()
	log.Info().Interface("nats", rc.NATS).Msg("nats node killed")

	// 2. A drift instance dies (two run): its unacknowledged fingerprints
	// come back to the other after the consumer's ack wait (30 s).
	rc.Drift = killService(ctx, e, rec, "drift-1", 10*time.Second, 45*time.Second, background)
	rc.Drift.Note = "fingerprints the killed instance held unacknowledged are redelivered after the drift consumer's ack wait (30 s)"
	log.Info().Interface("drift", rc.Drift).Msg("drift instance killed")

	// 3. The audit sink dies for a while: its consumers keep the events.
	if c.Audit {
		a := killService(ctx, e, rec, "audit", 10*time.Second, 15*time.Second, background)
		rc.Audit = &a
		log.Info().Interface("audit", a).Msg("audit sink killed")
	}

	// Count: everything published reached each stage.
	waitFor(60*time.Second, func() bool {
		st := e.f.pubStats()
		return st.Queued == 0 && st.OutboxDepth == 0 && consumerBacklog(ctx, e.js, bus.StreamFingerprints, bus.ConsumerDrift) == 0 &&
			consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerFingerprint) == 0
	})
	a := &rc.Accounting
	a.CallsIssued = int(e.f.calls.Load())
	a.ListingsIssued = int(e.f.listings.Load())
	st := e.f.pubStats()
	a.Published, a.Spooled, a.Dropped, a.Rejected, a.OutboxLeft = st.Published, st.Spooled, st.Dropped, st.Rejected, st.OutboxDepth
	a.ListMsgs = subjectCount(ctx, e.js, bus.StreamObservations, bus.Prefix+".obs.list.>")
	a.Fingerprints = subjectCount(ctx, e.js, bus.StreamFingerprints, bus.Prefix+".fp.>")
	a.Verdicts = subjectCount(ctx, e.js, bus.StreamVerdicts, bus.Prefix+".drift.>")
	a.DriftPending = consumerBacklog(ctx, e.js, bus.StreamFingerprints, bus.ConsumerDrift)
	for _, srv := range e.f.servers {
		if srv.drifted {
			a.ServersDrifted++
		}
	}
	a.StatusChanged = countChanged(ctx, e.js)
	if c.Audit {
		waitFor(90*time.Second, func() bool {
			return consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerAuditObservations) == 0 &&
				consumerBacklog(ctx, e.js, bus.StreamVerdicts, bus.ConsumerAuditVerdicts) == 0
		})
		a.AuditPending = consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerAuditObservations) +
			consumerBacklog(ctx, e.js, bus.StreamVerdicts, bus.ConsumerAuditVerdicts)
		// The sink acks once ClickHouse has the rows: read them after.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rows, err := e.ch.counts(cctx)
		cancel()
		if err != nil {
			return nil, err
		}
		a.AuditRows = rows
	}
	log.Info().Interface("accounting", a).Msg("counted")
	return rc, nil
}

// killService kills a service under load, restarts it after down, and
// waits up to settle for every rug pull issued meanwhile to reach every
// proxy.
func killService(ctx context.Context, e *env, rec *recorder, name string, down, settle time.Duration, background func(time.Duration) func()) serviceKill {
	rec.take()
	k := serviceKill{Process: name, DownS: down.Seconds()}
	stop := background(down + 5*time.Second)
	time.Sleep(2 * time.Second)
	e.svc.kill(name)
	time.Sleep(down)
	if err := e.svc.start(name); err != nil {
		k.Note = "restart: " + err.Error()
	}
	stop()
	waitFor(settle, func() bool { return rec.pendingCount() == 0 })
	k.DriftsMissing = rec.dropExpectations()
	s := rec.take()
	k.Drifts = len(s.done) + k.DriftsMissing
	k.DriftObsToAll = summarize(s.allProxies)
	return k
}

func firstWriteAfter(s samples, t time.Time) time.Duration {
	// A completion's observer time bounds its status write from above; the
	// status write itself is the kvToProxy base, not kept per event here.
	var best time.Duration
	for _, d := range s.done {
		if d.t0.Before(t) {
			continue
		}
		if w := d.observer.Sub(t); best == 0 || w < best {
			best = w
		}
	}
	return best
}

func streamLeader(ctx context.Context, js jetstream.JetStream, name string) string {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(c, name)
	if err != nil {
		return ""
	}
	if cl := s.CachedInfo().Cluster; cl != nil {
		return cl.Leader
	}
	return ""
}

// consumerBacklog is what a consumer has not settled yet.
func consumerBacklog(ctx context.Context, js jetstream.JetStream, stream, name string) uint64 {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := js.Consumer(c, stream, name)
	if err != nil {
		return 1 << 62
	}
	ci := cons.CachedInfo()
	return ci.NumPending + uint64(ci.NumAckPending)
}

// subjectCount counts a stream's messages under a subject filter.
func subjectCount(ctx context.Context, js jetstream.JetStream, stream, filter string) uint64 {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := js.Stream(c, stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(c, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0
	}
	var n uint64
	for _, v := range info.State.Subjects {
		n += v
	}
	return n
}

// countChanged counts the status records whose status is changed.
func countChanged(ctx context.Context, js jetstream.JetStream) int {
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	kv, err := js.KeyValue(c, bus.BucketStatus)
	if err != nil {
		return -1
	}
	w, err := kv.WatchAll(c, jetstream.IgnoreDeletes())
	if err != nil {
		return -1
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if _, ok := shortKey(e.Key()); ok && containsChanged(e.Value()) {
			n++
		}
	}
	return n
}

func containsChanged(b []byte) bool {
	return bytes.Contains(b, []byte(`"status":"changed"`))
}
