// Package approvals is the drift service's side of held tools/call
// approvals: it answers the proxies' requests (mcpdrift.approval.request.
// <tenant>.<server>) by storing each in the approvals bucket, lists them
// for the admin API and the review console, and writes an admin's
// resolution into the request's key (compare-and-set), where the waiting
// proxy's watch reads it. The bucket is JetStream storage: pending requests
// survive a restart of the drift service.
package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Error codes of Resolve and the request handler.
const (
	CodeNotFound  = "not_found"         // no request with this id
	CodeResolved  = "approval_resolved" // already approved or denied
	CodeExpired   = "approval_expired"  // its proxy stopped waiting
	CodeConflict  = "approval_conflict" // resolved by someone else meanwhile
	CodeInvalid   = "approval_invalid"  // a request that does not check out
	CodeBadID     = "invalid_id"        // not an approval id
	queueGroup    = "drift-approvals"   // every drift instance answers, once per request
	maxListed     = 1000                // the newest requests listed
	recentListed  = 100                 // of which resolved or expired
	drainDeadline = 5 * time.Second
)

// Deps are what a Service needs.
type Deps struct {
	NC  *nats.Conn
	KV  jetstream.KeyValue // the approvals bucket
	Log zerolog.Logger
	Now func() time.Time
}

// Service answers approval requests and resolves them.
type Service struct {
	d Deps
}

// New returns the service.
func New(d Deps) (*Service, error) {
	if d.NC == nil || d.KV == nil {
		return nil, errors.New("approvals: no NATS connection or bucket")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Service{d: d}, nil
}

// Run answers requests until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	sub, err := s.d.NC.QueueSubscribe(approval.RequestSubjects, queueGroup, func(m *nats.Msg) {
		reply := s.store(ctx, m.Subject, m.Data)
		if m.Reply == "" {
			return
		}
		data, _ := json.Marshal(reply)
		if err := m.Respond(data); err != nil {
			s.d.Log.Warn().Err(err).Msg("answering an approval request")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", approval.RequestSubjects, err)
	}
	<-ctx.Done()
	if err := sub.Drain(); err == nil {
		deadline := time.Now().Add(drainDeadline)
		for sub.IsValid() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// store keeps one request: created once (a request sent again is the same
// key, which keeps whatever it holds).
func (s *Service) store(ctx context.Context, subject string, data []byte) approval.Reply {
	r, err := approval.DecodeRequest(data)
	if err == nil {
		err = approval.ValidRequest(r, subject)
	}
	if err != nil {
		s.d.Log.Warn().Err(err).Str("subject", subject).Msg("approval request refused")
		return approval.Reply{Code: CodeInvalid, Error: err.Error()}
	}
	value, err := approval.Encode(&mcpdriftv1.Approval{Request: r})
	if err != nil {
		return approval.Reply{Code: "internal", Error: err.Error()}
	}
	key := approval.Key(r.GetTenant(), r.GetId())
	if _, err := s.d.KV.Create(ctx, key, value); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		s.d.Log.Error().Err(err).Str("key", key).Msg("storing an approval request")
		return approval.Reply{Code: "unavailable", Error: "storing the request: " + err.Error()}
	}
	s.d.Log.Info().Str("tenant", r.GetTenant()).Str("server", r.GetServer()).Str("tool", r.GetTool()).
		Str("approval_id", r.GetId()).Str("rule", r.GetRule()).Msg("call held for approval")
	return approval.Reply{OK: true}
}

// List is the pending requests, oldest first, then the most recent
// resolved or expired ones, newest first.
func (s *Service) List(ctx context.Context) (pending, recent []approval.Show, err error) {
	lister, err := s.d.KV.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing approvals: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	now := s.d.Now()
	for _, k := range keys {
		e, err := s.d.KV.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading approval %s: %w", k, err)
		}
		a, err := approval.Decode(e.Value())
		if err != nil {
			s.d.Log.Error().Err(err).Str("key", k).Msg("approval record unreadable")
			continue
		}
		sh := approval.ShowOf(a, now)
		if sh.State == approval.Pending {
			pending = append(pending, sh)
		} else {
			recent = append(recent, sh)
		}
	}
	slices.SortFunc(pending, func(a, b approval.Show) int { return int(a.RequestedAtMs - b.RequestedAtMs) })
	slices.SortFunc(recent, func(a, b approval.Show) int { return int(b.RequestedAtMs - a.RequestedAtMs) })
	if len(pending) > maxListed {
		pending = pending[:maxListed]
	}
	if len(recent) > recentListed {
		recent = recent[:recentListed]
	}
	return pending, recent, nil
}

// Resolve approves (or denies) the pending request id as actor.
func (s *Service) Resolve(ctx context.Context, id string, approve bool, actor, reason string) (approval.Show, error) {
	if err := approval.ValidID(id); err != nil {
		return approval.Show{}, coded.Errorf(CodeBadID, "%w", err)
	}
	e, err := s.find(ctx, id)
	if err != nil {
		return approval.Show{}, err
	}
	a, err := approval.Decode(e.Value())
	if err != nil {
		return approval.Show{}, fmt.Errorf("reading approval %s: %w", id, err)
	}
	now := s.d.Now()
	switch approval.State(a, now) {
	case approval.Approved, approval.Denied:
		return approval.ShowOf(a, now), coded.Errorf(CodeResolved, "approval %s was already %s by %s", id, a.GetResolution().GetOutcome(), a.GetResolution().GetActor())
	case approval.Expired:
		return approval.ShowOf(a, now), coded.Errorf(CodeExpired, "approval %s expired: its proxy stopped waiting and refused the call", id)
	}
	outcome := approval.Denied
	if approve {
		outcome = approval.Approved
	}
	a.Resolution = &mcpdriftv1.ApprovalResolution{Id: id, Tenant: a.GetRequest().GetTenant(), Outcome: outcome, Actor: actor,
		Reason: reason, ResolvedAtUnixMs: now.UnixMilli()}
	value, err := approval.Encode(a)
	if err != nil {
		return approval.Show{}, err
	}
	if _, err := s.d.KV.Update(ctx, e.Key(), value, e.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return approval.Show{}, coded.Errorf(CodeConflict, "approval %s changed while it was resolved; look again", id)
		}
		return approval.Show{}, fmt.Errorf("writing the resolution of %s: %w", id, err)
	}
	return approval.ShowOf(a, now), nil
}

// find returns the entry of request id, whichever its tenant.
func (s *Service) find(ctx context.Context, id string) (jetstream.KeyValueEntry, error) {
	lister, err := s.d.KV.ListKeysFiltered(ctx, "*."+id)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, coded.Errorf(CodeNotFound, "no approval request %s", id)
	}
	if err != nil {
		return nil, fmt.Errorf("finding approval %s: %w", id, err)
	}
	var key string
	for k := range lister.Keys() {
		if strings.HasSuffix(k, "."+id) {
			key = k
		}
	}
	if key == "" {
		return nil, coded.Errorf(CodeNotFound, "no approval request %s", id)
	}
	e, err := s.d.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, coded.Errorf(CodeNotFound, "no approval request %s", id)
	}
	if err != nil {
		return nil, fmt.Errorf("reading approval %s: %w", id, err)
	}
	return e, nil
}
