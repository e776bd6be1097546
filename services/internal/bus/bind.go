package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Bus setup modes of a service (--bus-setup).
const (
	SetupCreate = "create" // create or update every stream and bucket (Setup)
	SetupCheck  = "check"  // only check that what it needs exists: a least-privilege role
)

// Kinds of bus objects.
const (
	KindStream      = "stream"
	KindKV          = "kv"
	KindObjectStore = "object-store"
)

// Object is one stream, key-value bucket or object store that Setup makes.
type Object struct {
	Name, Kind string
	Stream     string // the JetStream stream that holds it (KV_<bucket>, OBJ_<bucket>)
}

// The objects Setup makes, for Bind and Survey.
var (
	Observations = Object{StreamObservations, KindStream, StreamObservations}
	Fingerprints = Object{StreamFingerprints, KindStream, StreamFingerprints}
	Verdicts     = Object{StreamVerdicts, KindStream, StreamVerdicts}
	Admin        = Object{StreamAdmin, KindStream, StreamAdmin}
	Status       = Object{BucketStatus, KindKV, "KV_" + BucketStatus}
	Baselines    = Object{BucketBaselines, KindKV, "KV_" + BucketBaselines}
	Manifests    = Object{BucketManifests, KindObjectStore, "OBJ_" + BucketManifests}
	Approvals    = Object{BucketApprovals, KindKV, "KV_" + BucketApprovals}
	Policy       = Object{BucketPolicy, KindKV, "KV_" + BucketPolicy}
	Sessions     = Object{BucketSessions, KindKV, "KV_" + BucketSessions}
)

// Objects returns everything Setup makes, in its order.
func Objects() []Object {
	return []Object{Observations, Fingerprints, Verdicts, Admin, Status, Baselines, Manifests, Approvals, Policy, Sessions}
}

func (o Object) String() string { return o.Kind + " " + o.Name }

// CodeMissing is the code of the error Bind returns in check mode when an
// object it needs does not exist.
const CodeMissing = "bus_incomplete"

// ErrMissing is the sentinel of that error: errors.Is(err, ErrMissing)
// matches it.
var ErrMissing = coded.New(CodeMissing, "")

// Bind makes the bus ready for a service and returns the handles of the
// buckets it needs: with SetupCreate it creates or updates everything
// (Setup, the NATS administrator's rights); with SetupCheck it changes
// nothing and checks that each object in need exists, naming every missing
// one (a service role's rights suffice: the administrator ran the setup,
// docs/deployment.md). Only the buckets in need are bound in check mode.
func Bind(ctx context.Context, js jetstream.JetStream, mode string, cfg Config, need ...Object) (*Handles, error) {
	switch mode {
	case SetupCreate:
		return Setup(ctx, js, cfg)
	case SetupCheck:
	default:
		return nil, fmt.Errorf("bus setup %q: want %s or %s", mode, SetupCreate, SetupCheck)
	}
	found, err := Survey(ctx, js, need)
	if err != nil {
		return nil, err
	}
	var missing []string
	for i, o := range need {
		if found[i] == nil {
			missing = append(missing, o.String())
		}
	}
	if len(missing) > 0 {
		return nil, coded.Errorf(CodeMissing, "missing %s (run the bus setup first)", strings.Join(missing, ", "))
	}
	h := new(Handles)
	for _, o := range need {
		switch o {
		case Status:
			h.Status, err = js.KeyValue(ctx, o.Name)
		case Baselines:
			h.Baselines, err = js.KeyValue(ctx, o.Name)
		case Manifests:
			h.Manifests, err = js.ObjectStore(ctx, o.Name)
		case Approvals:
			h.Approvals, err = js.KeyValue(ctx, o.Name)
		case Policy:
			h.Policy, err = js.KeyValue(ctx, o.Name)
		case Sessions:
			h.Sessions, err = js.KeyValue(ctx, o.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("binding %s: %w", o, err)
		}
	}
	return h, nil
}

// Survey returns the configuration of each object's stream, nil for one
// that does not exist; it changes nothing.
func Survey(ctx context.Context, js jetstream.JetStream, objs []Object) ([]*jetstream.StreamConfig, error) {
	out := make([]*jetstream.StreamConfig, len(objs))
	for i, o := range objs {
		s, err := js.Stream(ctx, o.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", o, err)
		}
		cfg := s.CachedInfo().Config
		out[i] = &cfg
	}
	return out, nil
}
