// Package bus is the mcpdrift side of NATS JetStream: subject names, the
// streams, key-value buckets and object store every service relies on
// (created or updated idempotently at start), the mirrors of them a site's
// leaf node holds (SetupSite), the encodings of events, and
// the one way a service settles a message it consumed (Settler: ack, nak
// with backoff, dead letter and term) with the one list of dead-letter
// codes, and the one consume loop of every service (Router: consume,
// settle, drain, and a deleted consumer created again; a service supplies
// only its Processor). docs/bus.md is the reference for operators and
// subscribers.
package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Prefix starts every subject.
const Prefix = "mcpdrift"

// Stream, bucket and consumer names.
const (
	StreamObservations = "MCPDRIFT_OBS"
	StreamFingerprints = "MCPDRIFT_FP"
	StreamVerdicts     = "MCPDRIFT_DRIFT"
	StreamAdmin        = "MCPDRIFT_ADMIN"

	BucketStatus    = "mcpdrift_status"
	BucketBaselines = "mcpdrift_baselines"
	BucketManifests = "mcpdrift_manifests"
	// BucketApprovals holds the per-call policy's approval requests
	// (package approval): one key per held call, written by the drift
	// service only.
	BucketApprovals = "mcpdrift_approvals"
	// BucketPolicy holds each tenant's per-call policy (policy.Stored under
	// the key <tenant>): written by the drift service only, watched by
	// proxies (docs/policy.md).
	BucketPolicy = "mcpdrift_policy"
	// BucketSessions holds the review console's login sessions: one key
	// per session, the SHA-256 of its cookie (never the cookie itself),
	// written and read by every drift instance, so that one login serves
	// them all and a logout ends it everywhere. Keys expire after
	// SessionsMaxAge.
	BucketSessions = "mcpdrift_sessions"

	ConsumerFingerprint = "fingerprint"
	ConsumerDrift       = "drift"

	// The audit sink's consumers, one per stream it writes to ClickHouse.
	ConsumerAuditObservations = "audit-obs"
	ConsumerAuditVerdicts     = "audit-drift"
	ConsumerAuditAdmin        = "audit-admin"

	// ConsumerNotifyPrefix starts the names of the notify service's
	// consumers, two per destination: notify-<destination> on the
	// verdicts, notify-<destination>-approvals on the approvals bucket.
	ConsumerNotifyPrefix = "notify-"
)

// PullExpiry is how long each pull request of the services' consumers
// lasts (jetstream.PullExpiry). A pull the server cannot take at once (a
// "no responders" status, as while another instance updates the durable
// consumer, or during a leader change) is only followed by a new one when
// the pull's heartbeats stop, after twice the heartbeat of half the
// expiry: with nats.go's default of 30 s a consumer could stand still for
// half a minute. With this, for 5 s at most.
const PullExpiry = 5 * time.Second

// DefaultVariant names the listing variant of an observation that names none.
const DefaultVariant = "default"

// ErrInvalidID is the sentinel of the errors ValidID returns (code
// invalid_id) for a tenant, server or variant that cannot be a subject
// token or key part: errors.Is(err, ErrInvalidID) matches them.
var ErrInvalidID = coded.New(CodeInvalidID, "")

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID checks a tenant, server or variant id: 1 to 64 of A-Z a-z 0-9 _ -,
// so that it is one subject token and one key segment.
func ValidID(kind, id string) error {
	if !idPattern.MatchString(id) {
		return coded.Errorf(CodeInvalidID, "%s %q must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", kind, clip(id))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 70 {
		return s[:70] + "..."
	}
	return s
}

// approvalsMaxAge is how long the approvals bucket keeps a request
// (approval.MaxAge).
const approvalsMaxAge = 7 * 24 * time.Hour

// SessionsMaxAge is how long the sessions bucket keeps a review console
// login: the longest a session can last (the console's default).
const SessionsMaxAge = 12 * time.Hour

// Subjects. Tenant and server are single tokens (see ValidID).
func ListObservationSubject(tenant, server string) string {
	return Prefix + ".obs.list." + tenant + "." + server
}

// CallObservationsSubject carries CallObservations batches: what proxies
// publish.
func CallObservationsSubject(tenant, server string) string {
	return Prefix + ".obs.calls." + tenant + "." + server
}

// ListingsSeenSubject carries ListingsSeen batches: the compact form of
// listings whose surface the pipeline already confirmed. It is in the
// observations stream; the fingerprint service's filter
// (mcpdrift.obs.list.>) leaves it to the audit sink.
func ListingsSeenSubject(tenant, server string) string {
	return Prefix + ".obs.seen." + tenant + "." + server
}

// CallObservationSubject carries single CallObservation events, the form
// proxies published before the batch; subscribers still accept it.
func CallObservationSubject(tenant, server string) string {
	return Prefix + ".obs.call." + tenant + "." + server
}

// FingerprintSubject carries Fingerprint events.
func FingerprintSubject(tenant, server string) string { return Prefix + ".fp." + tenant + "." + server }

// VerdictSubject carries Verdict events, as JSON.
func VerdictSubject(tenant, server string) string { return Prefix + ".drift." + tenant + "." + server }

// AdminSubject carries AdminAction events, as JSON.
func AdminSubject(tenant, server string) string { return Prefix + ".admin." + tenant + "." + server }

// DeadLetterSubject carries DeadLetter events of one service, as JSON.
func DeadLetterSubject(service string) string { return Prefix + ".dead." + service }

// StatusKey is the key of a server's status record for one listing variant.
func StatusKey(tenant, server, variant string) string { return tenant + "." + server + "." + variant }

// ServerKey is the key of a server's own record in the status bucket,
// beside its variants' records: the hold that quarantines every variant of
// the server (docs/bus.md).
func ServerKey(tenant, server string) string { return tenant + "." + server }

// BaselineKey is the key of one baseline version of a server and variant.
func BaselineKey(tenant, server, variant string, version int64) string {
	return fmt.Sprintf("%s.%s.%s.v%d", tenant, server, variant, version)
}

// Config sets the retention of what Setup creates.
type Config struct {
	Replicas          int           // 1 on a single node, 3 in a cluster
	ObservationMaxAge time.Duration // how long raw observations are kept
	VerdictMaxAge     time.Duration // how long verdicts and fingerprints are kept
	AdminMaxAge       time.Duration // how long admin actions and dead letters are kept
	DuplicateWindow   time.Duration // JetStream de-duplication of message ids
	MaxMsgBytes       int32         // largest event (an observation carries a whole manifest)
	// Partitions splits the observation and fingerprint streams into this
	// many partitions by (tenant, server) (partition.go); 1 is none. 0
	// leaves a stream's partitions as they are (none for a stream it
	// creates), so that a service that does not consume partitions (the
	// proxy, the audit sink) never undoes them.
	Partitions int
}

// DefaultConfig is used for zero fields.
var DefaultConfig = Config{
	Replicas:          1,
	ObservationMaxAge: 7 * 24 * time.Hour,
	VerdictMaxAge:     30 * 24 * time.Hour,
	AdminMaxAge:       365 * 24 * time.Hour,
	DuplicateWindow:   10 * time.Minute,
	MaxMsgBytes:       16 << 20,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.Replicas > 0 {
		d.Replicas = c.Replicas
	}
	if c.ObservationMaxAge > 0 {
		d.ObservationMaxAge = c.ObservationMaxAge
	}
	if c.VerdictMaxAge > 0 {
		d.VerdictMaxAge = c.VerdictMaxAge
	}
	if c.AdminMaxAge > 0 {
		d.AdminMaxAge = c.AdminMaxAge
	}
	if c.DuplicateWindow > 0 {
		d.DuplicateWindow = c.DuplicateWindow
	}
	if c.MaxMsgBytes > 0 {
		d.MaxMsgBytes = c.MaxMsgBytes
	}
	d.Partitions = c.Partitions
	return d
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Replicas != 0 && (c.Replicas < 1 || c.Replicas > 5) {
		errs = append(errs, fmt.Errorf("replicas %d: want 1 to 5", c.Replicas))
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("partitions %d: want 1 to %d (0: as the streams are)", c.Partitions, MaxPartitions))
	}
	if c.DuplicateWindow < 0 || c.ObservationMaxAge < 0 || c.VerdictMaxAge < 0 || c.AdminMaxAge < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	return errors.Join(errs...)
}

// Handles are the key-value buckets and object store Setup made ready.
type Handles struct {
	Status    jetstream.KeyValue
	Baselines jetstream.KeyValue
	Manifests jetstream.ObjectStore
	Approvals jetstream.KeyValue
	Policy    jetstream.KeyValue
	Sessions  jetstream.KeyValue
}

// Setup creates or updates every stream and bucket; running it again, or
// from several services at once, changes nothing. An object already as
// wanted is left alone rather than updated to the same configuration: a
// stream update is a write every running consumer of the stream sees, and
// services start on a bus that is usually set up already.
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) (*Handles, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	streams := []jetstream.StreamConfig{
		{Name: StreamObservations, Subjects: []string{Prefix + ".obs.>"}, MaxAge: c.ObservationMaxAge,
			Description: "proxy observations: tools/list surfaces and tools/call outcomes"},
		{Name: StreamFingerprints, Subjects: []string{Prefix + ".fp.>"}, MaxAge: c.VerdictMaxAge,
			Description: "fingerprint service results"},
		{Name: StreamVerdicts, Subjects: []string{Prefix + ".drift.>"}, MaxAge: c.VerdictMaxAge,
			Description: "schema status changes (JSON)"},
		{Name: StreamAdmin, Subjects: []string{Prefix + ".admin.>", Prefix + ".dead.>"}, MaxAge: c.AdminMaxAge,
			Description: "admin actions and dead letters (JSON)"},
	}
	for _, sc := range streams {
		sc.Retention = jetstream.LimitsPolicy
		sc.Storage = jetstream.FileStorage
		sc.Replicas = c.Replicas
		sc.Duplicates = c.DuplicateWindow
		sc.MaxMsgSize = c.MaxMsgBytes
		sc.Discard = jetstream.DiscardOld
		keep := false
		if partitioned(sc.Name) {
			sc.SubjectTransform = partitionTransform(sc.Name, c.Partitions)
			keep = c.Partitions == 0
		}
		if err := ensureStream(ctx, js, sc, keep); err != nil {
			return nil, fmt.Errorf("creating stream %s: %w", sc.Name, err)
		}
	}
	buckets := []jetstream.KeyValueConfig{
		{Bucket: BucketStatus, Description: "schema status per tenant, server and listing variant",
			History: 16, MaxValueSize: 1 << 20},
		{Bucket: BucketBaselines, Description: "every baseline version of every server and variant",
			History: 1, MaxValueSize: 1 << 20},
		{Bucket: BucketPolicy, Description: "per-call policy per tenant (rules, drift and risk settings), versioned",
			History: 16, MaxValueSize: 8 << 20},
		{Bucket: BucketApprovals, Description: "approval requests of held tools/call requests, and their resolutions",
			History: 1, MaxValueSize: 1 << 20, TTL: approvalsMaxAge},
		{Bucket: BucketSessions, Description: "review console sessions, keyed by the SHA-256 of the session cookie",
			History: 1, MaxValueSize: 4 << 10, TTL: SessionsMaxAge},
	}
	kvs := make([]jetstream.KeyValue, len(buckets))
	for i, kc := range buckets {
		kc.Replicas, kc.Storage = c.Replicas, jetstream.FileStorage
		kv, err := ensureKeyValue(ctx, js, kc)
		if err != nil {
			return nil, fmt.Errorf("creating bucket %s: %w", kc.Bucket, err)
		}
		kvs[i] = kv
	}
	manifests, err := ensureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket: BucketManifests, Description: "observed manifests (capture format), content-addressed by surface hash",
		Replicas: c.Replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("creating object store %s: %w", BucketManifests, err)
	}
	return &Handles{Status: kvs[0], Baselines: kvs[1], Policy: kvs[2], Approvals: kvs[3], Sessions: kvs[4], Manifests: manifests}, nil
}

// ensureStream creates or updates the stream unless it already has every
// setting Setup chooses. With keepTransform an existing stream keeps its
// subject transform (its partitions) whatever want says.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, keepTransform bool) error {
	if s, err := js.Stream(ctx, want.Name); err == nil {
		got := s.CachedInfo().Config
		if keepTransform {
			want.SubjectTransform = got.SubjectTransform
		}
		if slices.Equal(got.Subjects, want.Subjects) && got.MaxAge == want.MaxAge && got.Description == want.Description &&
			got.Retention == want.Retention && got.Storage == want.Storage && got.Replicas == want.Replicas &&
			got.Duplicates == want.Duplicates && got.MaxMsgSize == want.MaxMsgSize && got.Discard == want.Discard &&
			sameTransform(got.SubjectTransform, want.SubjectTransform) {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := js.CreateOrUpdateStream(ctx, want)
	return err
}

func sameTransform(a, b *jetstream.SubjectTransformConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ensureKeyValue is ensureStream for a key-value bucket.
func ensureKeyValue(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if err == nil {
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, err
		}
		got := st.Config()
		if got.Description == want.Description && got.History == want.History && got.MaxValueSize == want.MaxValueSize &&
			got.TTL == want.TTL && got.Replicas == want.Replicas && got.Storage == want.Storage {
			return kv, nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, want)
}

// ensureObjectStore is ensureStream for an object store.
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, want.Bucket)
	if err == nil {
		st, err := obs.Status(ctx)
		if err != nil {
			return nil, err
		}
		if st.Description() == want.Description && st.Replicas() == want.Replicas && st.Storage() == want.Storage &&
			st.TTL() == want.TTL {
			return obs, nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	return js.CreateOrUpdateObjectStore(ctx, want)
}

// ManifestName is the object name of a manifest with the given surface hash
// ("sha256:<hex>" becomes "sha256-<hex>").
func ManifestName(surfaceHash string) string {
	b := []byte(surfaceHash)
	return string(bytes.Replace(b, []byte(":"), []byte("-"), 1))
}

var jsonOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// MarshalJSON encodes an event for a JSON subject: proto field names, every
// field present, compact and stable.
func MarshalJSON(m proto.Message) ([]byte, error) {
	raw, err := jsonOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose; compact it so that the
	// same event always has the same bytes.
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// UnmarshalJSON decodes an event from a JSON subject, ignoring unknown
// fields so that older subscribers read newer events.
func UnmarshalJSON(b []byte, m proto.Message) error {
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// Publish publishes with a message id, so that a retry within the duplicate
// window is stored once.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) (*jetstream.PubAck, error) {
	ack, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	if err != nil {
		return nil, fmt.Errorf("publishing %s: %w", subject, err)
	}
	return ack, nil
}

// StopConsuming begins the end of a consumer at shutdown: it drains (stops
// fetching and lets the buffered messages be handled) while the connection
// is up, and stops at once when it is not. A drain needs the server to
// answer; without a connection it waits out the client library's own drain
// timeout, and a later Stop cannot cut it short. Wait for cc.Closed()
// afterwards either way.
func StopConsuming(js jetstream.JetStream, cc jetstream.ConsumeContext) {
	if nc := js.Conn(); nc != nil && nc.IsConnected() {
		cc.Drain()
		return
	}
	cc.Stop()
}
