package bus

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// A site is a NATS leaf node in a JetStream domain of its own
// (deploy/nats/leaf): its proxies connect to it and read the status from
// mirrors of the hub's buckets, kept by NATS over the leaf connection and
// filtered to one tenant. Each mirror is a key-value bucket of the same
// name as the hub's, so that a proxy binds and watches it exactly as it
// would on the hub (nats.go maps a mirrored bucket to the origin's key
// prefix, $KV.<bucket>., which is also this one's). docs/deployment.md,
// "Sites", describes the setup.

// HubDomain is the JetStream domain of the hub in deploy/nats/cluster.
const HubDomain = "hub"

// Codes of SetupSite's errors.
const (
	// CodeSiteMirrorMismatch: a bucket of the site exists but does not
	// mirror what the setup would (another tenant, hub or origin, or no
	// mirror at all). A mirror cannot be changed; it must be deleted first.
	CodeSiteMirrorMismatch = "site_mirror_mismatch"
)

// SiteConfig describes the mirrors of a site's leaf node.
type SiteConfig struct {
	// HubDomain is the hub's JetStream domain (default HubDomain): the
	// mirrors reach the hub's buckets through $JS.<HubDomain>.API.
	HubDomain string
	// Tenant is the tenant whose keys the mirrors hold (bus.ValidID). The
	// site's leaf user on the hub may create consumers of this tenant's
	// keys only (deploy/nats/auth.conf, LEAF_DEFAULT).
	Tenant string
	// Replicas of the mirrors: 1 on a single leaf node (the default).
	Replicas int
}

// Validate reports a configuration that cannot work.
func (c SiteConfig) Validate() error {
	var errs []error
	if err := ValidID("tenant", c.Tenant); err != nil {
		errs = append(errs, err)
	}
	if c.HubDomain != "" {
		if err := ValidID("hub domain", c.HubDomain); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", c.Replicas))
	}
	return errors.Join(errs...)
}

// MirrorDeliverPrefix is where the hub delivers a site's mirrors of
// tenant's keys: the only deliveries the tenant's leaf user may receive
// (deploy/nats/auth.conf).
func MirrorDeliverPrefix(tenant string) string { return Prefix + ".mirror." + tenant }

// SiteObjects are the buckets a site holds, in SetupSite's order: what a
// proxy reads (status, the baseline versions whose item hashes the
// records name, policy, approvals), never what only the services read.
func SiteObjects() []Object { return []Object{Status, Baselines, Policy, Approvals} }

// SiteBuckets returns the configuration of each mirror of a site, in
// SiteObjects' order (replicas and storage are SetupSite's).
func SiteBuckets(cfg SiteConfig) []jetstream.KeyValueConfig {
	hub := cfg.HubDomain
	if hub == "" {
		hub = HubDomain
	}
	ext := &jetstream.ExternalStream{APIPrefix: "$JS." + hub + ".API", DeliverPrefix: MirrorDeliverPrefix(cfg.Tenant)}
	mirror := func(bucket, filter string) *jetstream.StreamSource {
		return &jetstream.StreamSource{Name: "KV_" + bucket, FilterSubject: "$KV." + bucket + "." + filter, External: ext}
	}
	return []jetstream.KeyValueConfig{
		{Bucket: BucketStatus, Description: "mirror of the hub's status, tenant " + cfg.Tenant,
			History: 16, MaxValueSize: 1 << 20, Mirror: mirror(BucketStatus, cfg.Tenant+".>")},
		{Bucket: BucketBaselines, Description: "mirror of the hub's baseline versions, tenant " + cfg.Tenant,
			History: 1, MaxValueSize: 1 << 20, Mirror: mirror(BucketBaselines, cfg.Tenant+".>")},
		{Bucket: BucketPolicy, Description: "mirror of the hub's per-call policy, tenant " + cfg.Tenant,
			History: 16, MaxValueSize: 8 << 20, Mirror: mirror(BucketPolicy, cfg.Tenant)},
		{Bucket: BucketApprovals, Description: "mirror of the hub's approval requests, tenant " + cfg.Tenant,
			History: 1, MaxValueSize: 1 << 20, TTL: approvalsMaxAge, Mirror: mirror(BucketApprovals, cfg.Tenant+".*")},
	}
}

// SetupSite creates the mirrors of a site's leaf node, connected to it with
// the site administrator's rights (js in the leaf's own domain). Running it
// again changes nothing; a bucket that exists with another mirror (or none)
// is an error with code site_mirror_mismatch, since NATS cannot change a
// stream's mirror: delete the bucket and run it again.
func SetupSite(ctx context.Context, js jetstream.JetStream, cfg SiteConfig) (*Handles, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := new(Handles)
	for _, kc := range SiteBuckets(cfg) {
		kc.Replicas, kc.Storage = max(cfg.Replicas, 1), jetstream.FileStorage
		kv, err := ensureMirror(ctx, js, kc)
		if err != nil {
			return nil, fmt.Errorf("creating mirror %s: %w", kc.Bucket, err)
		}
		switch kc.Bucket {
		case BucketStatus:
			h.Status = kv
		case BucketBaselines:
			h.Baselines = kv
		case BucketPolicy:
			h.Policy = kv
		case BucketApprovals:
			h.Approvals = kv
		}
	}
	return h, nil
}

// ensureMirror is ensureKeyValue for a mirror: created when missing, left
// alone when it mirrors what it should, updated when only its limits differ.
func ensureMirror(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	s, err := js.Stream(ctx, "KV_"+want.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return js.CreateKeyValue(ctx, want)
	case err != nil:
		return nil, err
	}
	got := s.CachedInfo().Config
	if got.Mirror == nil || !sameMirror(*got.Mirror, *want.Mirror) {
		return nil, coded.Errorf(CodeSiteMirrorMismatch, "bucket %s exists and %s, want a mirror of %s filtered to %s through %s: delete it and set up the site again",
			want.Bucket, describeMirror(got.Mirror), want.Mirror.Name, want.Mirror.FilterSubject, want.Mirror.External.APIPrefix)
	}
	kv, err := js.KeyValue(ctx, want.Bucket)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	c := st.Config()
	if c.Description == want.Description && c.History == want.History && c.MaxValueSize == want.MaxValueSize &&
		c.TTL == want.TTL && c.Replicas == want.Replicas && c.Storage == want.Storage {
		return kv, nil
	}
	return js.UpdateKeyValue(ctx, want)
}

func sameMirror(got, want jetstream.StreamSource) bool {
	return got.Name == want.Name && got.FilterSubject == want.FilterSubject && len(got.SubjectTransforms) == 0 &&
		reflect.DeepEqual(got.External, want.External)
}

func describeMirror(m *jetstream.StreamSource) string {
	if m == nil {
		return "is no mirror"
	}
	api := ""
	if m.External != nil {
		api = " through " + m.External.APIPrefix
	}
	return fmt.Sprintf("mirrors %s filtered to %q%s", m.Name, m.FilterSubject, api)
}
