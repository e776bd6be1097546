package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	mcpdriftv1 "github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/lockorder"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

var _ session.Approvals = (*Approvals)(nil)

// askEvery is how long one delivery of a request waits for the drift
// service's answer before it is sent again (same id: the drift service
// keeps the first).
const askEvery = 2 * time.Second

// ApprovalsConfig configures a proxy's approval requests.
type ApprovalsConfig struct {
	Tenant, Proxy string
	// Wait bounds how long a held call waits for its resolution; then it
	// is refused (policy_approval_timeout).
	Wait time.Duration
	Now  func() time.Time // time.Now when nil
}

// Approvals asks the drift service to have held calls approved
// (session.Approvals): each request goes out on
// mcpdrift.approval.request.<tenant>.<server> (core NATS request-reply,
// sent again until the drift service acknowledges it, which it does once
// it stored it), then the proxy watches the request's key in the approvals
// bucket for the admin's resolution. A watch delivers the key's last value
// first, so a resolution written while the proxy was reconnecting is read
// by the watch it starts again, never missed.
type Approvals struct {
	js  jetstream.JetStream
	cfg ApprovalsConfig
	log zerolog.Logger

	outcomes [4]atomic.Uint64 // by ApprovalOutcomes

	mu      lockorder.Mutex[lockorder.ApprovalsMu]
	nextID  uint64
	holding map[uint64]time.Time // calls held now, by when they were held
}

// ApprovalOutcomes are the outcomes counted, in a stable order.
var ApprovalOutcomes = []string{session.ApprovalApproved, session.ApprovalDenied, session.ApprovalTimeout, session.ApprovalUnavailable}

// NewApprovals returns the approvals of a proxy. It does no I/O.
func NewApprovals(js jetstream.JetStream, cfg ApprovalsConfig, log zerolog.Logger) (*Approvals, error) {
	if js == nil || js.Conn() == nil {
		return nil, errors.New("fleet approvals: no NATS connection")
	}
	if err := errors.Join(bus.ValidID("tenant", cfg.Tenant), bus.ValidID("proxy", cfg.Proxy)); err != nil {
		return nil, fmt.Errorf("fleet approvals: %w", err)
	}
	if cfg.Wait <= 0 {
		return nil, errors.New("fleet approvals: the wait must be positive")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Approvals{js: js, cfg: cfg, log: log.With().Str("tenant", cfg.Tenant).Logger(), holding: map[uint64]time.Time{}}, nil
}

// Outcomes returns how many held calls ended in each of ApprovalOutcomes.
func (a *Approvals) Outcomes() []uint64 {
	out := make([]uint64, len(a.outcomes))
	for i := range a.outcomes {
		out[i] = a.outcomes[i].Load()
	}
	return out
}

// Held returns how many calls are held now, waiting for their approval,
// and how long the one held longest has waited (0 when none is).
func (a *Approvals) Held() (n int, oldest time.Duration) {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, at := range a.holding {
		oldest = max(oldest, now.Sub(at))
	}
	return len(a.holding), oldest
}

// hold counts a call as held from start until the returned func is called.
func (a *Approvals) hold(start time.Time) (release func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextID++
	id := a.nextID
	a.holding[id] = start
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.holding, id)
	}
}

// Await implements session.Approvals.
func (a *Approvals) Await(ctx context.Context, req session.ApprovalRequest) session.Approval {
	start := a.cfg.Now()
	release := a.hold(start)
	res := a.await(ctx, req, start)
	release()
	res.Wait = a.cfg.Now().Sub(start)
	for i, o := range ApprovalOutcomes {
		if o == res.Outcome {
			a.outcomes[i].Add(1)
		}
	}
	return res
}

func (a *Approvals) await(parent context.Context, req session.ApprovalRequest, start time.Time) session.Approval {
	ctx, cancel := context.WithTimeout(parent, a.cfg.Wait)
	defer cancel()
	id := approval.NewID()
	r := &mcpdriftv1.ApprovalRequest{Id: id, Tenant: a.cfg.Tenant, Server: req.Server, Proxy: a.cfg.Proxy, Tool: req.Tool,
		Agent: req.Agent, Rule: req.Rule, Reason: req.Reason, RiskMode: req.RiskMode, ArgumentsDigest: req.ArgsDigest,
		RequestedAtUnixMs: start.UnixMilli(), ExpiresAtUnixMs: start.Add(a.cfg.Wait).UnixMilli()}
	if r.ArgumentsDigest == "" {
		sum := sha256.Sum256(req.Arguments)
		r.ArgumentsDigest = "sha256:" + hex.EncodeToString(sum[:])
	}
	if len(req.Arguments) <= approval.MaxArguments {
		r.Arguments = req.Arguments
	} else {
		r.ArgumentsTruncated = true
	}
	log := a.log.With().Str("server", req.Server).Str("tool", req.Tool).Str("approval_id", id).Logger()
	if err := a.ask(ctx, r); err != nil {
		log.Warn().Err(err).Msg("approval request not delivered, refusing the call")
		return session.Approval{ID: id, Outcome: session.ApprovalUnavailable}
	}
	log.Info().Str("rule", req.Rule).Msg("call held for approval")
	res, err := a.resolution(ctx, approval.Key(a.cfg.Tenant, id))
	switch {
	case res != nil:
		log.Info().Str("outcome", res.GetOutcome()).Str("actor", res.GetActor()).Msg("held call resolved")
		outcome := session.ApprovalDenied
		if res.GetOutcome() == approval.Approved {
			outcome = session.ApprovalApproved
		}
		return session.Approval{ID: id, Outcome: outcome, Actor: res.GetActor(), Reason: res.GetReason()}
	case parent.Err() != nil:
		return session.Approval{ID: id, Outcome: session.ApprovalUnavailable} // the client went away
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		log.Info().Dur("wait", a.cfg.Wait).Msg("held call not resolved in time, refusing it")
		return session.Approval{ID: id, Outcome: session.ApprovalTimeout}
	}
	log.Warn().Err(err).Msg("waiting for the approval")
	return session.Approval{ID: id, Outcome: session.ApprovalUnavailable}
}

// ask sends r until the drift service acknowledges it, or ctx ends.
func (a *Approvals) ask(ctx context.Context, r *mcpdriftv1.ApprovalRequest) error {
	data, err := approval.Encode(r)
	if err != nil {
		return fmt.Errorf("encoding the approval request: %w", err)
	}
	subject := approval.RequestSubject(r.GetTenant(), r.GetServer())
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, askEvery)
		msg, err := a.js.Conn().RequestWithContext(actx, subject, data)
		cancel()
		if err == nil {
			var reply approval.Reply
			if err := json.Unmarshal(msg.Data, &reply); err != nil {
				return fmt.Errorf("reading the drift service's answer: %w", err)
			}
			if !reply.OK {
				return fmt.Errorf("the drift service refused the request: %s: %s", reply.Code, reply.Error)
			}
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("asking for approval: %w (last: %v)", ctx.Err(), last)
		case <-time.After(minRewatch):
		}
	}
}

// resolution watches key until it holds a resolution, or ctx ends; it
// watches again after a reconnect or a broken watch.
func (a *Approvals) resolution(ctx context.Context, key string) (*mcpdriftv1.ApprovalResolution, error) {
	nc := a.js.Conn()
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	var last error
	for {
		res, err := a.watchOnce(ctx, key, reconnected)
		if res != nil || ctx.Err() != nil {
			return res, err
		}
		if err != nil && !errors.Is(err, errReconnected) {
			last = err
			select {
			case <-ctx.Done():
				return nil, last
			case <-reconnected:
			case <-time.After(minRewatch):
			}
		}
	}
}

func (a *Approvals) watchOnce(ctx context.Context, key string, reconnected <-chan nats.Status) (*mcpdriftv1.ApprovalResolution, error) {
	kv, err := a.js.KeyValue(ctx, approval.Bucket)
	if err != nil {
		return nil, fmt.Errorf("binding bucket %s: %w", approval.Bucket, err)
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", key, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-reconnected:
			return nil, errReconnected
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errWatchClosed
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rec, err := approval.Decode(e.Value())
			if err != nil {
				a.log.Error().Err(err).Str("key", key).Msg("approval record unreadable")
				continue
			}
			if res := rec.GetResolution(); res != nil {
				return res, nil
			}
		}
	}
}
