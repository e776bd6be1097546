package main

import (
	"strings"
	"sync"
	"time"
)

// recorder matches what the simulated proxies published with what came
// back: fingerprints (obs -> fingerprint), verdicts on the bus, status
// writes in the bucket, and each gate learning the new status.
type recorder struct {
	mu          sync.Mutex
	outstanding map[string]time.Time // proxy|tenant.server -> observation published
	expect      map[string]*expectation
	s           samples
	watchDowns  []time.Time
	watchUps    []time.Time
}

// expectation is a status change the simulation caused and waits to see
// reach every proxy that fronts the server.
type expectation struct {
	want     string // verified (first sight) or changed (drift)
	t0       time.Time
	observer string
	fronts   map[string]bool
	verdict  time.Time
	kv       time.Time
	gate     map[string]time.Time
}

// samples are the latencies of one phase.
type samples struct {
	fp           []time.Duration // observation -> its fingerprint published
	verdictProxy []time.Duration // observation -> the observing proxy's gate has the new status
	verdictBus   []time.Duration // observation -> the verdict on mcpdrift.drift.>
	allProxies   []time.Duration // observation -> the last proxy fronting the server has it
	kvToProxy    []time.Duration // status written (stream time) -> each fronting proxy has it
	done         []completion
	fpByObserved []time.Time // when each fingerprinted observation was published
}

// completion is one status change seen everywhere.
type completion struct {
	t0, observer, all time.Time
}

func newRecorder() *recorder {
	return &recorder{outstanding: map[string]time.Time{}, expect: map[string]*expectation{}}
}

// take returns the samples gathered since the last take and starts anew.
func (r *recorder) take() samples {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	r.s = samples{}
	return s
}

// published notes an observation; false when one of the same proxy and
// server is still awaiting its fingerprint (the caller picks another, so
// that a fingerprint names its observation unambiguously).
func (r *recorder) published(proxy, key string, t time.Time) bool {
	k := proxy + "|" + key
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.outstanding[k]; ok {
		return false
	}
	r.outstanding[k] = t
	return true
}

func (r *recorder) pending(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.expect[key]
	return ok
}

func (r *recorder) pendingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.expect)
}

// expectChange registers a status change caused by an observation of
// observer at t0, to be seen by every proxy in fronts.
func (r *recorder) expectChange(key, want, observer string, fronts []*proxy, t0 time.Time) {
	e := &expectation{want: want, t0: t0, observer: observer, fronts: map[string]bool{}, gate: map[string]time.Time{}}
	for _, p := range fronts {
		e.fronts[p.id] = true
	}
	r.mu.Lock()
	r.expect[key] = e
	r.mu.Unlock()
}

// dropExpectations forgets what never completed (returned: how many).
func (r *recorder) dropExpectations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.expect)
	r.expect = map[string]*expectation{}
	r.outstanding = map[string]time.Time{}
	return n
}

func (r *recorder) fingerprinted(proxy, key string, now time.Time) {
	k := proxy + "|" + key
	r.mu.Lock()
	defer r.mu.Unlock()
	if t0, ok := r.outstanding[k]; ok {
		delete(r.outstanding, k)
		r.s.fp = append(r.s.fp, now.Sub(t0))
		r.s.fpByObserved = append(r.s.fpByObserved, t0)
	}
}

// normStatus maps "STATUS_CHANGED" and "changed" to "changed".
func normStatus(s string) string {
	return strings.TrimPrefix(strings.ToLower(s), "status_")
}

func (r *recorder) verdictSeen(key, status string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.expect[key]; ok && e.verdict.IsZero() && normStatus(status) == e.want {
		e.verdict = now
	}
}

func (r *recorder) kvSeen(key, status string, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.expect[key]; ok && e.kv.IsZero() && normStatus(status) == e.want {
		e.kv = created
	}
}

func (r *recorder) gateSaw(proxy, key, status string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.expect[key]
	if !ok || !e.fronts[proxy] || normStatus(status) != e.want {
		return
	}
	if _, seen := e.gate[proxy]; seen {
		return
	}
	e.gate[proxy] = now
	if len(e.gate) < len(e.fronts) {
		return
	}
	delete(r.expect, key)
	var last time.Time
	for p, t := range e.gate {
		if t.After(last) {
			last = t
		}
		if !e.kv.IsZero() {
			r.s.kvToProxy = append(r.s.kvToProxy, max(t.Sub(e.kv), 0))
		}
		_ = p
	}
	r.s.verdictProxy = append(r.s.verdictProxy, e.gate[e.observer].Sub(e.t0))
	if !e.verdict.IsZero() {
		r.s.verdictBus = append(r.s.verdictBus, e.verdict.Sub(e.t0))
	}
	r.s.allProxies = append(r.s.allProxies, last.Sub(e.t0))
	r.s.done = append(r.s.done, completion{t0: e.t0, observer: e.gate[e.observer], all: last})
}

func (r *recorder) watchDown(t time.Time) {
	r.mu.Lock()
	r.watchDowns = append(r.watchDowns, t)
	r.mu.Unlock()
}

func (r *recorder) watchResumed(t time.Time) {
	r.mu.Lock()
	r.watchUps = append(r.watchUps, t)
	r.mu.Unlock()
}

// watchEvents returns the watch-down and watch-resumed times since since.
func (r *recorder) watchEvents(since time.Time) (downs, ups []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.watchDowns {
		if !t.Before(since) {
			downs = append(downs, t)
		}
	}
	for _, t := range r.watchUps {
		if !t.Before(since) {
			ups = append(ups, t)
		}
	}
	return downs, ups
}
