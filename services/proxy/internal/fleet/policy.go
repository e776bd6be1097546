package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// The policy copy: the last good policy of a proxy's tenant, kept on disk
// beside the status copies, with their key.
const (
	policyCopyFormat = "mcpdrift-policy-copy/1"
	policyCopySuffix = ".policy"
)

var _ session.Policy = (*Policy)(nil)

// Policy is a proxy's copy of its tenant's per-call policy (session.Policy):
// a watch of the tenant's key in the policy bucket, each value compiled as
// it arrives. What it enforces:
//
//   - the key does not exist (or was deleted): no rules, every call is
//     allowed (the risk modes still apply);
//   - a value that cannot be decoded or compiled never replaces a good one:
//     it is counted (Stats.Rejected) and logged, and the last good policy
//     stays; when there is none, every call is refused (policy_invalid);
//   - before the first watch delivered the key, the policy copy on disk
//     (UseCopies) answers, else a call waits at most the session's bound
//     while the watch can still load, and is refused (policy_unknown)
//     when it did not: NATS unreachable since the start and no copy.
//
// Create it with NewPolicy and run it with Run.
type Policy struct {
	js     jetstream.JetStream
	tenant string
	key    string
	log    zerolog.Logger
	wait   time.Duration // how long a call waits for the first load

	state  atomic.Pointer[policyState] // nil until known
	loaded chan struct{}               // closed at the first load (or a watch failure)
	once   sync.Once

	copies *StatusCopies
	copyMu lockorder.Mutex[lockorder.PolicyCopyMu]

	watching atomic.Bool
	applied  atomic.Uint64
	rejected atomic.Uint64
}

// policyState is what a Policy enforces now.
type policyState struct {
	set      *policy.Set  // nil: no rules
	code     session.Code // not "": refuse every call with it
	version  int64
	revision uint64
	value    []byte // as stored (nil: no key), for the copy
	fromCopy bool
}

// PolicyStats are a Policy's counters, for the proxy's metrics.
type PolicyStats struct {
	Applied  uint64 // values compiled and enforced
	Rejected uint64 // values refused (undecodable, another tenant's, or not compiling)
	Version  int64  // the version enforced (0: none)
	Known    bool   // a policy (or its absence) is known
}

// NewPolicy returns the policy watcher of tenant; wait bounds how long a
// call waits for the first load. It does no I/O.
func NewPolicy(js jetstream.JetStream, tenant string, wait time.Duration, log zerolog.Logger) (*Policy, error) {
	if js == nil {
		return nil, errors.New("fleet policy: jetstream is nil")
	}
	if err := bus.ValidID("tenant", tenant); err != nil {
		return nil, fmt.Errorf("fleet policy: %w", err)
	}
	return &Policy{js: js, tenant: tenant, key: policy.Key(tenant), wait: wait,
		log: log.With().Str("tenant", tenant).Logger(), loaded: make(chan struct{})}, nil
}

// UseCopies keeps the last good policy in copies' directory, and starts
// from the copy there when it checks out (its MAC, its tenant and proxy,
// its age). Call it before Run.
func (p *Policy) UseCopies(copies *StatusCopies) {
	p.copies = copies
	st, err := p.readCopy()
	switch {
	case errors.Is(err, errNoCopy):
	case err != nil:
		p.log.Warn().Err(err).Msg("policy copy ignored")
	default:
		p.state.Store(st)
		p.log.Info().Int64("version", st.version).Msg("policy copy loaded: enforced until the policy watch loads")
	}
}

// Evaluate implements session.Policy.
func (p *Policy) Evaluate(ctx context.Context, c *policy.Call) (policy.Decision, session.Code) {
	st := p.state.Load()
	if st == nil {
		st = p.awaitLoad(ctx)
		if st == nil {
			return policy.Decision{}, session.PolicyUnknown
		}
	}
	if st.code != "" {
		return policy.Decision{}, st.code
	}
	return st.set.Evaluate(c), ""
}

// OnDrift implements session.DriftPolicy: the action on drift the
// tenant's live policy names for server ("" when it names none or is not
// known: the record's stands).
func (p *Policy) OnDrift(server string) string {
	st := p.state.Load()
	if st == nil || st.set == nil {
		return ""
	}
	return st.set.Drift(server).OnDrift
}

// awaitLoad waits for the first load while one can come (NATS connected),
// at most p.wait.
func (p *Policy) awaitLoad(ctx context.Context) *policyState {
	if nc := p.js.Conn(); nc == nil || nc.Status() != nats.CONNECTED {
		return nil
	}
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case <-p.loaded:
	case <-t.C:
	case <-ctx.Done():
	}
	return p.state.Load()
}

// Stats returns the counters.
func (p *Policy) Stats() PolicyStats {
	st := p.state.Load()
	s := PolicyStats{Applied: p.applied.Load(), Rejected: p.rejected.Load(), Known: st != nil && st.code == ""}
	if st != nil {
		s.Version = st.version
	}
	return s
}

// Watching reports whether the policy watch is up and has loaded the key.
func (p *Policy) Watching() bool { return p.watching.Load() }

// Run watches the tenant's policy key until ctx ends, watching again when
// the watch breaks or NATS reconnects. It returns nil when ctx ends.
func (p *Policy) Run(ctx context.Context) error {
	nc := p.js.Conn()
	if nc == nil {
		return errors.New("fleet policy: jetstream has no connection")
	}
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	return rewatch(ctx, reconnected, p.log, "policy", "enforcing the last good policy", func(failing *bool) error {
		err := p.watch(ctx, reconnected, failing)
		p.watching.Store(false)
		p.once.Do(func() { close(p.loaded) }) // nothing more will come soon
		return err
	})
}

func (p *Policy) watch(ctx context.Context, reconnected <-chan nats.Status, failing *bool) error {
	bindCtx, cancel := context.WithTimeout(ctx, defaultBindTimeout)
	defer cancel()
	kv, err := p.js.KeyValue(bindCtx, policy.Bucket)
	if err != nil {
		return fmt.Errorf("binding bucket %s: %w", policy.Bucket, err)
	}
	w, stopWatch, err := startWatch(ctx, kv, p.key, defaultBindTimeout)
	if err != nil {
		return err
	}
	defer stopWatch()
	// While the watch is live the copy is rewritten now and then, so that
	// its live time stays fresh (a restart during an outage trusts it for
	// MaxAge from then).
	var refresh <-chan time.Time
	if p.copies != nil {
		t := time.NewTicker(p.copies.cfg.Refresh)
		defer t.Stop()
		refresh = t.C
	}
	initial, seen := true, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			return errReconnected
		case <-refresh:
			if st := p.state.Load(); st != nil && !initial && st.code == "" && !st.fromCopy {
				if err := p.writeCopy(st); err != nil {
					p.log.Warn().Err(err).Msg("writing the policy copy")
				}
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errWatchClosed
			case e == nil:
				if initial && !seen {
					p.apply(nil, 0) // no key: no rules
				}
				initial = false
				if *failing {
					*failing = false
					p.log.Info().Msg("policy watch resumed")
				}
				p.watching.Store(true)
				p.once.Do(func() { close(p.loaded) })
			case e.Operation() != jetstream.KeyValuePut:
				seen = true
				p.apply(nil, e.Revision())
			default:
				seen = true
				p.apply(e.Value(), e.Revision())
			}
		}
	}
}

// apply compiles a stored value (nil: no key) and enforces it, or keeps
// what is enforced when it is bad.
func (p *Policy) apply(value []byte, revision uint64) {
	st, err := p.compile(value)
	if err != nil {
		p.rejected.Add(1)
		ev := p.log.Error().Err(err).Uint64("revision", revision)
		if cur := p.state.Load(); cur != nil && cur.code == "" {
			ev.Int64("kept_version", cur.version).Msg("stored policy refused, keeping the last good one")
			return
		}
		ev.Msg("stored policy refused and no good one known: refusing every call")
		p.state.Store(&policyState{code: session.PolicyInvalid, revision: revision})
		return
	}
	st.revision = revision
	cur := p.state.Load()
	p.state.Store(st)
	p.applied.Add(1)
	if cur == nil || cur.version != st.version || cur.fromCopy || cur.code != "" {
		p.log.Info().Int64("version", st.version).Uint64("revision", revision).Bool("rules", st.set != nil).Msg("policy applied")
	}
	if err := p.writeCopy(st); err != nil {
		p.log.Warn().Err(err).Msg("writing the policy copy")
	}
}

// compile makes the state of a stored value (nil: no rules).
func (p *Policy) compile(value []byte) (*policyState, error) {
	if value == nil {
		return &policyState{}, nil
	}
	var stored policy.Stored
	if err := json.Unmarshal(value, &stored); err != nil {
		return nil, fmt.Errorf("decoding the stored policy: %w", err)
	}
	if stored.Tenant != p.tenant {
		return nil, fmt.Errorf("the stored policy is tenant %q's", stored.Tenant)
	}
	set, err := policy.Compile(p.tenant, &stored.Document)
	if err != nil {
		return nil, fmt.Errorf("compiling policy version %d: %w", stored.Version, err)
	}
	return &policyState{set: set, version: stored.Version, value: value}, nil
}

// policyCopyDoc is the content of a policy copy.
type policyCopyDoc struct {
	Tenant   string `json:"tenant"`
	Proxy    string `json:"proxy"`
	LiveAtMs int64  `json:"live_at_ms"`
	Revision uint64 `json:"revision"`
	Value    []byte `json:"value,omitempty"` // the stored policy; none: no rules
}

func (p *Policy) copyPath() string {
	return filepath.Join(p.copies.cfg.Dir, p.tenant+policyCopySuffix)
}

// writeCopy keeps st, a policy the watch delivered, on disk.
func (p *Policy) writeCopy(st *policyState) error {
	if p.copies == nil {
		return nil
	}
	p.copyMu.Lock()
	defer p.copyMu.Unlock()
	body, err := json.Marshal(policyCopyDoc{Tenant: p.tenant, Proxy: p.copies.cfg.Proxy,
		LiveAtMs: p.copies.cfg.Now().UnixMilli(), Revision: st.revision, Value: st.value})
	if err != nil {
		return fmt.Errorf("encoding the policy copy: %w", err)
	}
	return p.copies.writeSigned(p.copyPath(), "."+p.tenant+"-policy-*"+tmpSuffix, policyCopyFormat, p.tenant, "", body)
}

// readCopy reads and compiles the policy copy.
func (p *Policy) readCopy() (*policyState, error) {
	body, macOK, err := p.copies.readSigned(p.copyPath(), policyCopyFormat, p.tenant, "")
	if err != nil {
		return nil, err
	}
	if !macOK {
		return nil, ignored(CopyCorrupt, "its hmac does not match its content (changed, moved, or written with another key)")
	}
	var doc policyCopyDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, ignored(CopyCorrupt, "decoding: %v", err)
	}
	if doc.Tenant != p.tenant || doc.Proxy != p.copies.cfg.Proxy {
		return nil, ignored(CopyForeign, "it is the policy copy of tenant %q proxy %q", doc.Tenant, doc.Proxy)
	}
	if err := p.copies.fresh(doc.LiveAtMs); err != nil {
		return nil, err
	}
	st, err := p.compile(doc.Value)
	if err != nil {
		return nil, ignored(CopyCorrupt, "%v", err)
	}
	st.revision, st.fromCopy = doc.Revision, true
	return st, nil
}
