package driftsvc

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

// allTenants asks a sweep of every record in the status bucket.
const allTenants = "*"

// sweeps queues the tenants whose records are to be judged again by their
// policy (sweep); requests made while one runs are coalesced.
type sweeps struct {
	mu      sync.Mutex
	tenants map[string]bool // allTenants: every one
	wake    chan struct{}   // capacity 1
}

func newSweeps() *sweeps {
	return &sweeps{tenants: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// add asks a sweep of tenant's records (allTenants: every record). It
// never blocks: it is the policy watch's callback.
func (q *sweeps) add(tenant string) {
	q.mu.Lock()
	q.tenants[tenant] = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the tenants asked so far, only allTenants when every one
// was, and empties the queue.
func (q *sweeps) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.tenants) == 0 {
		return nil
	}
	var out []string
	if q.tenants[allTenants] {
		out = []string{allTenants}
	} else {
		for t := range q.tenants {
			out = append(out, t)
		}
	}
	clear(q.tenants)
	return out
}

// sweepRetry is how long a sweep that failed (NATS away) waits before it
// is tried again.
const sweepRetry = 2 * time.Second

// runSweeps sweeps what is asked until ctx ends.
func (s *Service) runSweeps(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sweeps.wake:
		}
		for _, tenant := range s.sweeps.take() {
			err := s.sweep(ctx, tenant)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.m.swept(false, 0, 0)
				s.log.Warn().Err(err).Str("tenant", tenant).Dur("retry_in", sweepRetry).
					Msg("applying the policy to existing records failed; trying again")
				time.AfterFunc(sweepRetry, func() { s.sweeps.add(tenant) })
			}
		}
	}
}

// sweep applies the drift settings and risk modes that tenant's policy
// resolves now (allTenants: every tenant's) to each of its records, so that
// a policy change reaches an idle server at once rather than at its next
// observation: every variant record is resettled (state.Resettle: a change
// of the action on drift is announced when it changes what is served),
// and every rated server's mode is tightened when the policy maps its band
// to a stricter one (state.Tighten; only an admin relaxes a mode). Each
// write is a compare-and-set, so a fingerprint or an admin action applied
// meanwhile is never overwritten.
func (s *Service) sweep(ctx context.Context, tenant string) error {
	start := time.Now()
	lister, err := s.h.Status.ListKeysFiltered(ctx, tenant+".*.*") // variant records; server records have two tokens
	if err != nil {
		return err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	type server struct{ tenant, server string }
	var (
		servers              []server
		seen                 = map[server]bool{}
		resettled, announced int
		tightened            int
	)
	for _, key := range keys {
		parts := strings.Split(key, ".")
		if len(parts) != 3 {
			continue
		}
		sv := server{parts[0], parts[1]}
		var out state.Outcome
		if _, err := s.transact(ctx, key, func(rec *state.Record) (state.Outcome, error) {
			out = state.Resettle(rec, s.settingsOf(sv.tenant, sv.server), s.now())
			return out, nil
		}); err != nil {
			return err
		}
		if out.Write {
			resettled++
			if out.Announce {
				announced++
			}
		}
		if !seen[sv] {
			seen[sv] = true
			servers = append(servers, sv)
		}
	}
	for _, sv := range servers {
		wrote := false
		if _, err := s.updateServer(ctx, sv.tenant, sv.server, func(cur *state.Server) (state.Server, bool, error) {
			if cur == nil || cur.Risk == nil {
				wrote = false
				return state.Server{}, false, nil
			}
			next, write := state.Tighten(cur, s.riskMode(sv.tenant, sv.server, policy.Band(cur.Risk.Band)), s.now())
			wrote = write
			return next, write, nil
		}); err != nil {
			return err
		}
		if wrote {
			tightened++
		}
	}
	s.m.swept(true, resettled, tightened)
	ev := s.log.Debug()
	if resettled > 0 || tightened > 0 {
		ev = s.log.Info()
	}
	ev.Str("tenant", tenant).Int("records", len(keys)).Int("resettled", resettled).Int("announced", announced).
		Int("risk_tightened", tightened).Dur("took", time.Since(start)).Msg("policy applied to existing records")
	return nil
}
