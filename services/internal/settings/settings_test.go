package settings

import (
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

func ptr[T any](v T) *T { return &v }

// TestDriftPrecedence: field by field, the server's override, then the
// tenant's setting, then the service's defaults.
func TestDriftPrecedence(t *testing.T) {
	set, err := policy.Compile("acme", &policy.Document{Drift: []policy.DriftSetting{
		{Tenant: "acme", Posture: status.Strict, Hash: policy.SHA512},
		{Tenant: "acme", Server: "notes", OnDrift: status.Alert, Annotations: ptr(false), Guard: ptr(true)},
		{Tenant: "acme", Server: "old", Form: policy.FormV1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defaults := status.Policy{Posture: status.Discovery, OnDrift: status.Block}
	for _, tc := range []struct {
		name   string
		set    *policy.Set
		server string
		want   status.Policy
	}{
		// The form is never the defaults': the newest unless the policy names one.
		{"no_policy", nil, "fs", status.Policy{Posture: status.Discovery, OnDrift: status.Block, Form: status.FormLatest}},
		{"tenant", set, "fs", status.Policy{Posture: status.Strict, OnDrift: status.Block, Hash: "sha512", Form: status.FormLatest}},
		{"override", set, "notes", status.Policy{Posture: status.Strict, OnDrift: status.Alert, Guard: true, Hash: "sha512", Annotations: ptr(false), Form: status.FormLatest}},
		{"form_v1", set, "old", status.Policy{Posture: status.Strict, OnDrift: status.Block, Hash: "sha512", Form: status.FormV1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Drift(tc.set, tc.server, defaults)
			if got.Posture != tc.want.Posture || got.OnDrift != tc.want.OnDrift || got.Guard != tc.want.Guard || got.Hashing() != tc.want.Hashing() || got.Hash != tc.want.Hash {
				t.Fatalf("got %+v (%s), want %+v (%s)", got, got.Hashing(), tc.want, tc.want.Hashing())
			}
		})
	}
	// The defaults leave the record's JSON as it was: no hash, no annotations.
	if got := Drift(nil, "fs", defaults); got.Hash != "" || got.Annotations != nil {
		t.Fatalf("defaults written out: %+v", got)
	}
}
