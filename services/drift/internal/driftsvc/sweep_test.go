package driftsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// putPolicy stores acme's policy as the admin API does and returns its
// revision in the bucket.
func (e *env) putPolicy(doc policy.Document) uint64 {
	e.t.Helper()
	data, err := json.Marshal(policy.Stored{Tenant: "acme", Version: 1, UpdatedBy: "test", Document: doc})
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := e.h.Policy.Put(context.Background(), policy.Key("acme"), data)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// startWithPolicy runs a drift service that watches the policy bucket.
func (e *env) startWithPolicy() (*Service, context.CancelFunc) {
	e.t.Helper()
	svc, err := New(Config{}, Deps{JS: e.js, Handles: e.h, Log: zerolog.Nop(), Policy: e.h.Policy})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc, e.run(svc)
}

// serverRisk returns nil once the server record's risk satisfies cond.
func (e *env) serverRisk(svc *Service, server, want string, cond func(*status.Risk) bool) func() error {
	return func() error {
		srv, _, err := svc.getServer(context.Background(), "acme", server)
		if err != nil {
			return err
		}
		if srv == nil || srv.Risk == nil || !cond(srv.Risk) {
			return fmt.Errorf("server record of %s: %+v, want %s", server, srv, want)
		}
		return nil
	}
}

// TestPolicySweep: a policy change reaches the records of an idle server
// at once, with no observation of it: on_drift alert serves its drift and
// says so in a verdict, block withholds it again, and a risk setting
// mapping its band to a stricter mode tightens the server's mode. A policy
// changed while no drift service ran is applied when one starts.
func TestPolicySweep(t *testing.T) {
	e := newEnv(t)
	svc, stop := e.startWithPolicy()
	a, b := e.manifest(fixA), e.manifest(fixB)
	t0 := time.Now()
	e.publish("mem", "f1", a, "", t0, "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "verified", func(r *state.Record) bool { return r.Status == state.Verified }))
	e.publish("mem", "f2", b, "", t0.Add(time.Second), "")
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "changed, withheld (the flags: block)", func(r *state.Record) bool {
		return r.Status == state.Changed && !r.Serve()
	}))
	poll.Eventually(t, wait, e.serverRisk(svc, "mem", "rated", func(r *status.Risk) bool { return len(r.Surfaces) == 2 }))
	srv, _, err := svc.getServer(context.Background(), "acme", "mem")
	if err != nil {
		t.Fatal(err)
	}
	band := policy.Band(srv.Risk.Band)
	if srv.Risk.Mode != string(policy.ModeAllow) {
		t.Fatalf("setup: risk %+v, want mode allow without a risk setting", srv.Risk)
	}
	verdicts := len(e.verdicts())

	rev := e.putPolicy(policy.Document{Drift: []policy.DriftSetting{{Tenant: "acme", OnDrift: status.Alert}}})
	poll.Eventually(t, wait, func() error {
		if w := svc.PolicyWatch(); w.Revision() != rev || w.Tenants() != 1 {
			return fmt.Errorf("the watch is at revision %d with %d policies, want %d and 1", w.Revision(), w.Tenants(), rev)
		}
		return nil
	})
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "served under alert, still changed at the same live hash", func(r *state.Record) bool {
		return r.Policy.OnDrift == state.Alert && r.Serve() && r.Status == state.Changed && r.LiveHash == b
	}))
	poll.Eventually(t, wait, func() error {
		if n := len(e.verdicts()); n != verdicts+1 {
			return fmt.Errorf("%d verdicts after the change to alert, want %d", n, verdicts+1)
		}
		return nil
	})

	e.putPolicy(policy.Document{
		Drift: []policy.DriftSetting{{Tenant: "acme", OnDrift: status.Block}},
		Risk:  []policy.RiskSetting{{Tenant: "acme", Modes: map[policy.Band]policy.Mode{band: policy.ModeQuarantine}}},
	})
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "withheld again under block", func(r *state.Record) bool {
		return r.Policy.OnDrift == state.Block && !r.Serve()
	}))
	poll.Eventually(t, wait, e.serverRisk(svc, "mem", "mode tightened to quarantine by the policy", func(r *status.Risk) bool {
		return r.Mode == string(policy.ModeQuarantine) && r.SetBy == state.ActorPolicy && string(band) == r.Band
	}))

	// A policy that maps the band to allow again does not relax it.
	e.putPolicy(policy.Document{Drift: []policy.DriftSetting{{Tenant: "acme", OnDrift: status.Block, Guard: new(true)}}})
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "guard recorded", func(r *state.Record) bool { return r.Policy.Guard }))
	if err := e.serverRisk(svc, "mem", "still quarantine", func(r *status.Risk) bool { return r.Mode == string(policy.ModeQuarantine) })(); err != nil {
		t.Fatal(err)
	}

	// Changed while no drift service runs: applied when one starts.
	stop()
	e.putPolicy(policy.Document{Drift: []policy.DriftSetting{{Tenant: "acme", OnDrift: status.Alert}}})
	svc, _ = e.startWithPolicy()
	poll.Eventually(t, wait, e.hasRecord(svc, "mem", "served under alert after a restart", func(r *state.Record) bool {
		return r.Policy.OnDrift == state.Alert && r.Serve() && !r.Policy.Guard
	}))
}
