// Package driftsvc is the drift service: the one writer of schema status. It
// consumes fingerprint results, runs the state machine of package state over
// the status bucket with compare-and-set, keeps every baseline version,
// broadcasts verdicts, and carries out approve and quarantine for the admin
// API.
package driftsvc

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/state"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/settings"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// ServiceName names the service in dead letters.
const ServiceName = "drift"

// Config configures the service.
type Config struct {
	Policy        state.Policy
	Durable       string        // the durable consumer's name
	MaxDeliver    int           // deliveries before a message is given up (and dead-lettered)
	AckWait       time.Duration // time to settle a message before it is redelivered
	MaxAckPending int           // messages in flight
	Workers       int           // fingerprints applied at once (one server's always in order)
	DrainTimeout  time.Duration // how long shutdown waits for messages in flight
	// Partitions is how many partitions the fingerprint stream has (bus
	// Config.Partitions; 0 or 1: none). With more, the instance consumes
	// one durable consumer per partition of PartitionSet, named
	// <Durable>-p<i> and pinned by NATS to one instance at a time
	// (bus.PartitionRoutes): a server's fingerprints are applied by one
	// instance at a time, in order on its lane. MaxAckPending bounds each.
	Partitions int
	// PartitionSet is the partitions this instance takes; nil: every one.
	PartitionSet []int
	// ManifestCacheBytes bounds the parsed manifests kept for diffs and
	// variant comparisons, in bytes of their stored form; least recently
	// used go first.
	ManifestCacheBytes int
	// StatusCacheRecords bounds the decoded status records kept (see
	// statusCache).
	StatusCacheRecords int
	// BaselineKeys are the public keys a baseline lockfile must be signed
	// with to be imported (ImportBaseline); none: every import is refused.
	BaselineKeys []ed25519.PublicKey
}

// DefaultConfig holds the defaults for zero fields.
var DefaultConfig = Config{
	Policy:        state.Policy{Posture: state.Discovery, OnDrift: state.Block},
	Durable:       bus.ConsumerDrift,
	MaxDeliver:    20,
	AckWait:       30 * time.Second,
	MaxAckPending: 1024,
	Workers:       64,
	DrainTimeout:  10 * time.Second,

	ManifestCacheBytes: DefaultManifestCacheBytes,
	StatusCacheRecords: DefaultStatusCacheRecords,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.Policy.Posture != "" {
		d.Policy.Posture = c.Policy.Posture
	}
	if c.Policy.OnDrift != "" {
		d.Policy.OnDrift = c.Policy.OnDrift
	}
	d.Policy.Guard = c.Policy.Guard
	if c.Durable != "" {
		d.Durable = c.Durable
	}
	if c.MaxDeliver > 0 {
		d.MaxDeliver = c.MaxDeliver
	}
	if c.AckWait > 0 {
		d.AckWait = c.AckWait
	}
	if c.MaxAckPending > 0 {
		d.MaxAckPending = c.MaxAckPending
	}
	if c.DrainTimeout > 0 {
		d.DrainTimeout = c.DrainTimeout
	}
	if c.Workers > 0 {
		d.Workers = c.Workers
	}
	if c.ManifestCacheBytes > 0 {
		d.ManifestCacheBytes = c.ManifestCacheBytes
	}
	if c.StatusCacheRecords > 0 {
		d.StatusCacheRecords = c.StatusCacheRecords
	}
	d.Partitions, d.PartitionSet = c.Partitions, c.PartitionSet
	d.BaselineKeys = c.BaselineKeys
	return d
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var workers error
	if c.Workers < 0 || c.Workers > 4096 {
		workers = fmt.Errorf("workers %d: want 1 to 4096", c.Workers)
	}
	c = c.withDefaults()
	return errors.Join(c.Policy.Validate(), bus.CheckPartitions(c.Partitions, c.PartitionSet), workers)
}

// Deps are what the service runs on.
type Deps struct {
	JS      jetstream.JetStream
	Handles *bus.Handles
	Log     zerolog.Logger
	Now     func() time.Time
	// Metrics records what the service does; nil records nothing.
	Metrics *Metrics
	// Policy is the policy bucket (bus.Handles.Policy): each server's
	// drift settings and risk modes are resolved from its tenant's policy
	// over Config.Policy (package settings). Nil: Config.Policy for every
	// server, and every risk band allowed.
	Policy jetstream.KeyValue
}

// Service is the drift service.
type Service struct {
	cfg  Config
	js   jetstream.JetStream
	h    *bus.Handles
	log  zerolog.Logger
	now  func() time.Time
	m    *Metrics
	surf *manifestCache // parsed manifests, by surface hash
	// status keeps decoded status records for the fingerprint path.
	status *statusCache
	// items keeps item hashes already checked against their surface hash.
	items *itemsCache
	// beforeHandle, when set (by tests), is called by a worker before it
	// handles a message.
	beforeHandle func(msg jetstream.Msg)
	// pol keeps every tenant's policy (nil: Config.Policy for every server).
	pol *settings.Watch
	// rated remembers the surface each variant was last rated by, so that
	// an unchanged surface is not rated again (see rate).
	rated *ratedSet
	// markers remembers the poisoning markers of the strings rated, by
	// string: a new manifest costs scanning only the strings no manifest
	// had before (a fleet's first sight, a release that changes a few
	// descriptions).
	markers *surface.MarkerMemo
	// sweeps queues the tenants whose records a policy change reaches
	// (sweep).
	sweeps *sweeps

	router *bus.Router

	applied, redelivered, poison, conflicts atomic.Int64
	settled                                 atomic.Int64 // deliveries settled, any way
}

// New returns a Service; Run starts it.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.JS == nil || d.Handles == nil {
		return nil, errors.New("driftsvc: Deps.JS and Deps.Handles are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, js: d.JS, h: d.Handles, log: d.Log, now: d.Now, m: d.Metrics, surf: newManifestCache(cfg.ManifestCacheBytes),
		status: newStatusCache(cfg.StatusCacheRecords), items: newItemsCache(maxCheckedItems), rated: newRatedSet(maxRated),
		markers: surface.NewMarkerMemo(markerMemoBytes),
		sweeps:  newSweeps()}
	var err error
	if d.Policy != nil {
		if s.pol, err = settings.NewWatch(d.Policy, d.Log); err != nil {
			return nil, fmt.Errorf("driftsvc: %w", err)
		}
		s.pol.Notify(s.sweeps.add)
	}
	s.router, err = bus.NewRouter(bus.RouterConfig{
		Settle: bus.SettleConfig{
			Service: ServiceName, MaxDeliver: cfg.MaxDeliver, Backoff: retryDelay, Timeout: cfg.AckWait,
		},
		Routes:       cfg.Routes(),
		DrainTimeout: cfg.DrainTimeout,
	}, bus.SettleDeps{JS: d.JS, Log: d.Log, Now: d.Now, Metrics: s.count}, bus.Lanes(cfg.Workers, s.handle))
	if err != nil {
		return nil, fmt.Errorf("driftsvc: %w", err)
	}
	return s, nil
}

// PolicyWatch is the service's watch of the policy bucket, nil without
// one (for its gauges: settings.Watch.Collectors).
func (s *Service) PolicyWatch() *settings.Watch { return s.pol }

// Stats are counters for logs and metrics.
type Stats struct{ Applied, Redelivered, Poison, Conflicts int64 }

// Stats returns the counters so far.
func (s *Service) Stats() Stats {
	return Stats{s.applied.Load(), s.redelivered.Load(), s.poison.Load(), s.conflicts.Load()}
}

// Run consumes fingerprint results until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	if s.pol != nil {
		// The policies first: a server first seen before its tenant's
		// policy arrived would be recorded with the flags' settings.
		stop, err := s.pol.Start(ctx)
		if err != nil {
			return nil // asked to stop before starting
		}
		defer stop()
	}
	// Every record is judged by the settings as they are now: the policy
	// or the flags may have changed while no drift service ran; later
	// policy changes sweep their tenant (the watch's Notify).
	s.sweeps.add(allTenants)
	sweepCtx, stopSweeps := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() { defer close(swept); s.runSweeps(sweepCtx) }()
	defer func() { stopSweeps(); <-swept }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched, err := s.watchStatus(watchCtx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop before starting
		}
		return fmt.Errorf("watching %s: %w", bus.BucketStatus, err)
	}
	defer func() { stopWatch(); <-watched }()
	return s.router.Run(ctx)
}

// ConsumerConfig is the durable consumer Run creates or updates.
func (c Config) ConsumerConfig() jetstream.ConsumerConfig {
	c = c.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   "drift service: fingerprint results to schema status",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
		FilterSubject: bus.Prefix + ".fp.>",
	}
}

// PartitionFilter is the filter of one partition's consumer, the
// partition token appended (bus.PartitionRoutes).
const PartitionFilter = bus.Prefix + ".fp.*.*"

// Routes are the durable consumers Run consumes: ConsumerConfig, or one per
// partition of PartitionSet.
func (c Config) Routes() []bus.Route {
	return bus.PartitionRoutes(bus.StreamFingerprints, c.ConsumerConfig(), 0, PartitionFilter, c.withDefaults().Partitions, c.PartitionSet)
}

// handle applies one fingerprint and settles its delivery. Workers apply
// fingerprints concurrently, each server's in order on its lane
// (bus.Lanes): they never fight over one record.
func (s *Service) handle(ctx context.Context, d *bus.Delivery) {
	if s.beforeHandle != nil {
		s.beforeHandle(d.Msg)
	}
	// ctx is the router's work context: a shutdown lets the message in hand
	// finish and settle instead of leaving it half done.
	wctx, cancel := context.WithTimeout(ctx, s.cfg.AckWait)
	defer cancel()
	d.Settle(wctx, s.apply(wctx, d.Msg))
}

// apply checks and applies the fingerprint a message carries. Its error is
// a bus.Poison when the message can never be applied, and transient
// otherwise.
func (s *Service) apply(ctx context.Context, msg jetstream.Msg) error {
	var fp mcpdriftv1.Fingerprint
	if err := proto.Unmarshal(msg.Data(), &fp); err != nil {
		return bus.Poisonf(bus.CodeMalformedEvent, "%w", err)
	}
	if fp.Variant == "" {
		fp.Variant = bus.DefaultVariant
	}
	for _, id := range [][2]string{{"tenant", fp.Tenant}, {"server", fp.Server}, {"variant", fp.Variant}} {
		if err := bus.ValidID(id[0], id[1]); err != nil {
			return bus.Poison(err)
		}
	}
	if subj, _ := bus.SplitPartition(msg.Subject()); subj != bus.FingerprintSubject(fp.Tenant, fp.Server) {
		// NATS permissions apply to subjects: a body must not speak for
		// another tenant or server than its subject does (the subject as
		// published: without the partition NATS adds on storing it).
		return bus.Poisonf(bus.CodeSubjectMismatch, "the fingerprint for %s/%s came on %s", fp.Tenant, fp.Server, msg.Subject())
	}
	if fp.EventId == "" || (fp.SurfaceHash == "" && fp.ErrorCode == "") {
		return bus.Poisonf(bus.CodeMalformedEvent, "a fingerprint needs an event_id and a surface_hash or an error_code")
	}
	if err := s.Observe(ctx, &fp); err != nil {
		return fmt.Errorf("applying fingerprint %s of %s/%s: %w", fp.EventId, fp.Tenant, fp.Server, err)
	}
	if fp.ObservedAtUnixMs > 0 {
		s.m.observed(time.UnixMilli(fp.ObservedAtUnixMs), s.now())
	}
	return nil
}

// count is told of every settlement by the Settler.
func (s *Service) count(o bus.Outcome, code string) {
	s.settled.Add(1)
	switch o {
	case bus.Acked:
		s.m.fingerprint(ResultOK)
	case bus.Retried:
		s.m.fingerprint(ResultRetried)
	case bus.DeadLettered:
		s.poison.Add(1)
		s.m.deadLetter(code)
	}
}

// retryDelay is the NakWithDelay delay after the given delivery (1-based)
// failed: a second per delivery, at most 30.
func retryDelay(delivered uint64) time.Duration {
	return min(time.Duration(max(delivered, 1))*time.Second, 30*time.Second)
}

// itemsOf returns the item hashes the fingerprint carries, checked against
// its surface hash; nil when it carries none that make it up (then no
// baseline set from it is served: status.Record.Serve).
func (s *Service) itemsOf(fp *mcpdriftv1.Fingerprint) *state.Items {
	if fp.ErrorCode != "" || fp.SurfaceHash == "" {
		return nil
	}
	if its := s.items.get(fp); its != nil {
		return its
	}
	items := make([]state.Item, len(fp.Items))
	for i, it := range fp.Items {
		items[i] = state.Item{Kind: it.Kind, Name: it.Name, Hash: it.Hash}
	}
	its, err := status.NewItems(fp.SurfaceHash, items)
	if err == nil {
		s.items.put(its)
	}
	if err != nil {
		s.log.Error().Err(err).Str("event_id", fp.EventId).Str("tenant", fp.Tenant).Str("server", fp.Server).
			Str("variant", fp.Variant).Msg("fingerprint items do not make up its surface hash; keeping none")
		return nil
	}
	return its
}

// errClaimPending: another variant claimed the server's trust on first use
// a moment ago and its record is not there yet; the fingerprint is retried
// so that it is compared with that variant's baseline.
var errClaimPending = errors.New("another variant's first sight is being applied")

// claimPatience is how long a variant waits for the variant that claimed
// the server's first sight to have a baseline; after it, it is withheld.
const claimPatience = 30 * time.Second

// compare compares a manifest with the current baselines of the server's
// other variants (those not quarantined). A manifest that cannot be read
// is compared as matching nothing.
func (s *Service) compare(ctx context.Context, tenant, server, variant, hash string) (state.Comparison, error) {
	recs, err := s.variants(ctx, tenant, server)
	if err != nil {
		return state.Comparison{}, err
	}
	var approved []state.ApprovedVariant
	var unreadable error
	for _, r := range recs {
		if r.Variant == variant || r.BaselineHash == "" || r.Status == state.Quarantined {
			continue
		}
		sf, err := s.surfaceOf(ctx, r.BaselineHash)
		if err != nil {
			unreadable = err
			approved = append(approved, state.ApprovedVariant{Variant: r.Variant, Hash: r.BaselineHash})
			continue
		}
		approved = append(approved, state.ApprovedVariant{Variant: r.Variant, Hash: r.BaselineHash, Items: itemsOf(sf)})
	}
	if len(approved) == 0 {
		return state.Comparison{}, nil
	}
	live, err := s.surfaceOf(ctx, hash)
	if err != nil {
		unreadable = err
	}
	if unreadable != nil {
		s.log.Warn().Err(unreadable).Str("tenant", tenant).Str("server", server).Str("variant", variant).
			Msg("comparing a new variant without its manifests; withholding it")
		return state.Comparison{Approved: true, Severity: surface.SeverityCritical.String(),
			Unmatched: []string{"every item (a manifest could not be read)"}}, nil
	}
	cmp := state.CompareVariant(itemsOf(live), approved)
	if ref, err := s.surfaceOf(ctx, cmp.ReferenceHash); err == nil {
		cmp.Severity = surface.Diff(ref, live).Severity.String()
	}
	return cmp, nil
}

func itemsOf(sf *surface.Surface) []state.Item {
	out := make([]state.Item, len(sf.Items))
	for i, it := range sf.Items {
		out[i] = state.Item{Kind: it.Kind.String(), Name: it.Name, Hash: it.Hash.String()}
	}
	return out
}

func diffItems(items []surface.ItemDiff, hashOf func(surface.ItemDiff) *surface.Digest) []state.Item {
	out := make([]state.Item, 0, len(items))
	for _, it := range items {
		h := ""
		if d := hashOf(it); d != nil {
			h = d.String()
		}
		out = append(out, state.Item{Kind: it.Kind, Name: it.Name, Hash: h})
	}
	return out
}

// assess classifies the drift from a baseline. A change the diff calls
// benign is looked up in the server's baseline history (every version of
// every variant): an item that comes back after it was removed, or that
// ever had another approved definition, is not benign.
func (s *Service) assess(ctx context.Context, tenant, server, base, live string) state.Assessment {
	b, err := s.surfaceOf(ctx, base)
	var l *surface.Surface
	if err == nil {
		l, err = s.surfaceOf(ctx, live)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("baseline", base).Str("live", live).Msg("assessing drift without manifests; treating it as critical")
		return state.Assessment{Severity: surface.SeverityCritical.String()}
	}
	rep := surface.Diff(b, l)
	a := state.Assessment{Severity: rep.Severity.String(), Benign: rep.Benign, InstructionsSame: sameInstructions(b, l)}
	if !a.Benign {
		return a
	}
	history, err := s.approvedItems(ctx, tenant, server)
	if err != nil {
		s.log.Warn().Err(err).Str("tenant", tenant).Str("server", server).Msg("reading baseline history; the change is not taken as benign")
		a.Benign, a.Note = false, "the baseline history could not be read"
		return a
	}
	newHash := func(d surface.ItemDiff) *surface.Digest { return d.NewHash }
	if note := state.HistoryNote(diffItems(rep.Added, newHash), diffItems(rep.Changed, newHash), itemsOf(b), history); note != "" {
		a.Benign, a.Note = false, note
	}
	return a
}

// sameInstructions reports whether two surfaces carry the same
// instructions: none in either, or one item of the same hash in both.
func sameInstructions(a, b *surface.Surface) bool {
	x, y := a.Of(surface.KindInstructions), b.Of(surface.KindInstructions)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Hash != y[i].Hash {
			return false
		}
	}
	return true
}

// approvedItems returns every item of every baseline version of the
// server, all variants: versions 1 to each variant record's baseline
// version, read by key (the drift role may read baselines by key, not list
// them; deploy/nats/auth.conf).
func (s *Service) approvedItems(ctx context.Context, tenant, server string) ([]state.Item, error) {
	recs, err := s.variants(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	var out []state.Item
	seen := map[string]bool{}
	for _, r := range recs {
		for v := int64(1); v <= r.BaselineVersion; v++ {
			key := bus.BaselineKey(tenant, server, r.Variant, v)
			e, err := s.h.Baselines.Get(ctx, key)
			if err != nil {
				return nil, fmt.Errorf("reading baseline %s: %w", key, err)
			}
			var b state.Baseline
			if err := json.Unmarshal(e.Value(), &b); err != nil {
				return nil, fmt.Errorf("decoding baseline %s: %w", key, err)
			}
			if seen[b.Hash] {
				continue
			}
			seen[b.Hash] = true
			sf, err := s.surfaceOf(ctx, b.Hash)
			if err != nil {
				return nil, err
			}
			out = append(out, itemsOf(sf)...)
		}
	}
	return out, nil
}

// errConflict: another writer changed the record between read and write.
var errConflict = errors.New("conflict")

// maxConflicts bounds the compare-and-set attempts of one change.
const maxConflicts = 20

// again reports whether a compare-and-set that failed with err on the
// given attempt is tried again (another writer was first), counting it.
func (s *Service) again(err error, attempt int) bool {
	if !errors.Is(err, errConflict) || attempt >= maxConflicts {
		return false
	}
	s.conflicts.Add(1)
	s.m.conflict()
	return true
}

// transact reads a record, decides with f (which does no I/O), and
// commits the outcome with compare-and-set, reading again and deciding
// again on a conflict: the admin actions' and the sweep's path (a
// fingerprint takes Observe's). gatherThen does the same for a decision
// that needs more than the record.
func (s *Service) transact(ctx context.Context, key string, f func(*state.Record) (state.Outcome, error)) (*state.Record, error) {
	return gatherThen(ctx, s, key,
		func(context.Context, *state.Record) (struct{}, error) { return struct{}{}, nil },
		func(rec *state.Record, _ struct{}) (state.Outcome, error) { return f(rec) })
}

// gatherThen reads a record, gathers what the decision needs beside it
// (gather, the only I/O), decides (decide, none), and commits the outcome
// with compare-and-set; on a conflict it does all three again, at most
// maxConflicts times.
func gatherThen[G any](ctx context.Context, s *Service, key string, gather func(context.Context, *state.Record) (G, error),
	decide func(*state.Record, G) (state.Outcome, error)) (*state.Record, error) {
	for attempt := 0; ; attempt++ {
		rec, rev, err := s.get(ctx, key)
		if err != nil {
			return nil, err
		}
		s.status.put(key, rev, rec)
		g, err := gather(ctx, rec)
		if err != nil {
			return rec, err
		}
		out, err := decide(rec, g)
		if err != nil {
			return rec, err
		}
		got, err := s.commit(ctx, key, rec, rev, transition{out: out})
		if s.again(err, attempt) {
			continue
		}
		return got, err
	}
}

func (s *Service) get(ctx context.Context, key string) (*state.Record, uint64, error) {
	return getJSON[state.Record](ctx, s.h.Status, key, "status")
}

// getJSON reads and decodes the JSON record at key of kv, with its
// revision; nil and 0 when there is none. what names it in errors.
func getJSON[T any](ctx context.Context, kv jetstream.KeyValue, key, what string) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s %s: %w", what, key, err)
	}
	v := new(T)
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return nil, 0, fmt.Errorf("decoding %s %s: %w", what, key, err)
	}
	return v, e.Revision(), nil
}

func (s *Service) put(ctx context.Context, key string, create bool, rev uint64, rec any) (uint64, error) {
	var data []byte
	var err error
	if r, ok := rec.(*state.Record); ok {
		data, err = status.Encode(r) // within the bucket's value size: items left out when they do not fit
		if r.ItemsOmitted {
			s.log.Error().Str("key", key).Msg("status record too large with its item hashes; left out, the variant is not served")
		}
	} else {
		data, err = json.Marshal(rec)
	}
	if err != nil {
		return 0, err
	}
	var newRev uint64
	if create {
		newRev, err = s.h.Status.Create(ctx, key, data)
	} else {
		newRev, err = s.h.Status.Update(ctx, key, data, rev)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return 0, errConflict
	case err != nil:
		return 0, fmt.Errorf("writing status %s: %w", key, err)
	}
	return newRev, nil
}

// keepBaseline stores a baseline version, with its item hashes, before the
// record that names it is written: a proxy that learns of the record finds
// them. Versions are created, never overwritten: finding the same version
// with another hash means another writer got there first.
func (s *Service) keepBaseline(ctx context.Context, rec *state.Record, b *state.Baseline) error {
	key := bus.BaselineKey(rec.Tenant, rec.Server, rec.Variant, b.Version)
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if _, err := s.h.Baselines.Create(ctx, key, data); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("keeping baseline %s: %w", key, err)
	}
	e, err := s.h.Baselines.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading baseline %s: %w", key, err)
	}
	var have state.Baseline
	if err := json.Unmarshal(e.Value(), &have); err != nil {
		return fmt.Errorf("decoding baseline %s: %w", key, err)
	}
	if have.Hash != b.Hash {
		return errConflict
	}
	if !have.Items.Of(b.Hash) {
		// The version was kept without its items (before versions held
		// them): the record holds them itself.
		rec.BaselineItemsVersion = 0
	}
	return nil
}

// announce publishes the verdict for a record at a revision. The message id
// is the key and revision, so announcing a revision twice stores it once.
func (s *Service) announce(ctx context.Context, rec *state.Record, rev uint64, prev state.Status) error {
	v := Verdict(rec, prev)
	v.EventId = fmt.Sprintf("verdict-%s.%s.%s-%d", rec.Tenant, rec.Server, rec.Variant, rev)
	v.AtUnixMs = rec.UpdatedAtMs
	data, err := bus.MarshalJSON(v)
	if err != nil {
		return err
	}
	ack, err := bus.Publish(ctx, s.js, bus.VerdictSubject(rec.Tenant, rec.Server), data, v.EventId)
	if err != nil {
		return err
	}
	if !ack.Duplicate {
		s.m.verdict(rec.Status)
	}
	return nil
}

var statusOf = map[state.Status]mcpdriftv1.Status{
	state.Unknown: mcpdriftv1.Status_STATUS_UNKNOWN, state.Verified: mcpdriftv1.Status_STATUS_VERIFIED,
	state.Changed: mcpdriftv1.Status_STATUS_CHANGED, state.Pending: mcpdriftv1.Status_STATUS_PENDING,
	state.Quarantined: mcpdriftv1.Status_STATUS_QUARANTINED,
}

// Verdict is the bus form of a record.
func Verdict(rec *state.Record, prev state.Status) *mcpdriftv1.Verdict {
	return &mcpdriftv1.Verdict{
		Tenant: rec.Tenant, Server: rec.Server, Variant: rec.Variant,
		Status: statusOf[rec.Status], PreviousStatus: statusOf[prev], Serve: rec.Serve(),
		Posture: rec.Policy.Posture, OnDrift: rec.Policy.OnDrift,
		BaselineVersion: rec.BaselineVersion, BaselineHash: rec.BaselineHash, LiveHash: rec.LiveHash,
		Severity: rec.Severity, Benign: rec.Benign, ReasonCode: rec.Reason, Reason: rec.ReasonText,
		Actor: rec.Actor, AtUnixMs: rec.UpdatedAtMs,
	}
}

// surfaceOf loads and parses a stored manifest, checked against its name:
// parsed with the settings its hash was made with (the algorithm of its
// tag; annotations covered, or else not, and form v2 or v1, whichever
// makes up the hash: the surface document names its form, so one does).
func (s *Service) surfaceOf(ctx context.Context, hash string) (*surface.Surface, error) {
	if sf, ok := s.surf.get(hash); ok {
		return sf, nil
	}
	raw, err := s.manifestBytes(ctx, hash)
	if err != nil {
		return nil, err
	}
	var last error
	for _, form := range []string{status.FormLatest, status.FormV1} {
		for _, annotations := range []bool{true, false} {
			h, err := status.HashingOf(hash, annotations, form)
			if err != nil {
				return nil, fmt.Errorf("manifest %s: %w", hash, err)
			}
			sf, err := parseWith(raw, h)
			if err != nil {
				return nil, fmt.Errorf("parsing manifest %s: %w", hash, err)
			}
			if sf.Hash.String() == hash {
				s.surf.put(hash, sf, len(raw))
				return sf, nil
			}
			last = fmt.Errorf("manifest stored as %s hashes to %s", hash, sf.Hash)
		}
	}
	return nil, last
}

// manifestBytes reads the manifest stored under hash.
func (s *Service) manifestBytes(ctx context.Context, hash string) ([]byte, error) {
	name := bus.ManifestName(hash)
	raw, err := bus.ReadObject(ctx, s.js, s.h.Manifests, bus.BucketManifests, name)
	if err == nil {
		return raw, nil
	}
	// The leader's own consumer, the way an object store reads: the direct
	// get may have been answered by a replica that does not hold a manifest
	// written a moment ago yet, or direct gets are not allowed.
	r, err := s.h.Manifests.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", hash, err)
	}
	defer r.Close()
	if raw, err = io.ReadAll(r); err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", hash, err)
	}
	return raw, nil
}

func parseWith(raw []byte, h status.Hashing) (*surface.Surface, error) {
	opt, err := h.Options()
	if err != nil {
		return nil, err
	}
	return surface.Parse(raw, opt)
}

func (s *Service) diffHashes(ctx context.Context, base, live string) (*surface.Report, error) {
	b, err := s.surfaceOf(ctx, base)
	if err != nil {
		return nil, err
	}
	l, err := s.surfaceOf(ctx, live)
	if err != nil {
		return nil, err
	}
	return surface.Diff(b, l), nil
}

// Errors of admin actions beside those of package state: sentinels of
// their stable codes (package coded), which errors.Is matches to every
// error with the code.
var (
	// ErrNoBaseline: a diff was asked of a variant without a baseline.
	ErrNoBaseline = coded.New("no_baseline", "")
	// ErrVariantAmbiguous: the action needs one listing variant and the
	// server has several it could mean (see AmbiguousError).
	ErrVariantAmbiguous = coded.New("variant_ambiguous", "")
	// ErrHeldAgain: the server was quarantined again while an approve
	// lifted its hold.
	ErrHeldAgain = coded.New("held_again", "")
)

// AmbiguousError names the variants an action could mean.
type AmbiguousError struct {
	Tenant, Server, Action string
	Candidates             []string // "variant (status, live sha256:…)"
	Variants               []string // the candidates' names
}

func (e *AmbiguousError) Error() string { return e.ErrorCode() + ": " + e.ErrorMessage() }

// ErrorCode returns variant_ambiguous (package coded's Coder).
func (e *AmbiguousError) ErrorCode() string { return ErrVariantAmbiguous.Code }

// ErrorMessage names the candidates, without the code.
func (e *AmbiguousError) ErrorMessage() string {
	return fmt.Sprintf("%s/%s has %d listing variants that %s could mean; name one as the variant: %s",
		e.Tenant, e.Server, len(e.Candidates), e.Action, strings.Join(e.Candidates, "; "))
}

// Is matches ErrVariantAmbiguous.
func (e *AmbiguousError) Is(target error) bool { return target == ErrVariantAmbiguous }

func ambiguous(tenant, server, action string, recs []state.Record) error {
	e := &AmbiguousError{Tenant: tenant, Server: server, Action: action}
	for _, r := range recs {
		live := r.LiveHash
		if r.LiveError != "" {
			live = "error " + r.LiveError
		}
		e.Variants = append(e.Variants, r.Variant)
		e.Candidates = append(e.Candidates, fmt.Sprintf("%s (%s, live %s)", r.Variant, r.Status, live))
	}
	return e
}

func (s *Service) getServer(ctx context.Context, tenant, server string) (*state.Server, uint64, error) {
	return getJSON[state.Server](ctx, s.h.Status, bus.ServerKey(tenant, server), "server record")
}

// putServer writes the server record with compare-and-set (create when
// create is set); errConflict when another writer was first.
func (s *Service) putServer(ctx context.Context, tenant, server string, create bool, rev uint64, srv *state.Server) error {
	if _, err := s.put(ctx, bus.ServerKey(tenant, server), create, rev, srv); err != nil {
		return err
	}
	s.m.write()
	return nil
}

// updateServer applies f to the server record with compare-and-set until
// it holds; f returns false when there is nothing to write.
func (s *Service) updateServer(ctx context.Context, tenant, server string, f func(*state.Server) (state.Server, bool, error)) (*state.Server, error) {
	for attempt := 0; ; attempt++ {
		srv, rev, err := s.getServer(ctx, tenant, server)
		if err != nil {
			return nil, err
		}
		next, write, err := f(srv)
		if err != nil || !write {
			return srv, err
		}
		err = s.putServer(ctx, tenant, server, srv == nil, rev, &next)
		if s.again(err, attempt) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &next, nil
	}
}

// variants returns the records of every listing variant of a server,
// ordered by variant, read in one batch direct get (bus.LastPerSubject: no
// consumer is created for it, which on a cluster is a proposal of the meta
// group, for every first sight); where the bucket does not allow direct
// gets, by a listing and a read per key.
func (s *Service) variants(ctx context.Context, tenant, server string) ([]state.Record, error) {
	prefix := "$KV." + bus.BucketStatus + "."
	msgs, err := bus.LastPerSubject(ctx, s.js, "KV_"+bus.BucketStatus, prefix+bus.StatusKey(tenant, server, "*"))
	if errors.Is(err, bus.ErrDirectGetUnavailable) {
		return s.listVariants(ctx, tenant, server)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the variants of %s/%s: %w", tenant, server, err)
	}
	out := make([]state.Record, 0, len(msgs))
	for _, m := range msgs {
		if m.Header.Get("KV-Operation") != "" {
			continue // deleted or purged
		}
		var rec state.Record
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			return nil, fmt.Errorf("decoding status %s: %w", strings.TrimPrefix(m.Subject, prefix), err)
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b state.Record) int { return strings.Compare(a.Variant, b.Variant) })
	return out, nil
}

// listVariants is variants by a listing of the keys and a read of each.
func (s *Service) listVariants(ctx context.Context, tenant, server string) ([]state.Record, error) {
	lister, err := s.h.Status.ListKeysFiltered(ctx, bus.StatusKey(tenant, server, "*"))
	if err != nil {
		return nil, fmt.Errorf("listing the variants of %s/%s: %w", tenant, server, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]state.Record, 0, len(keys))
	for _, k := range keys {
		rec, _, err := s.get(ctx, k)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			out = append(out, *rec)
		}
	}
	return out, nil
}

// Get returns the record of one listing variant.
func (s *Service) Get(ctx context.Context, tenant, server, variant string) (*state.Record, error) {
	rec, _, err := s.get(ctx, bus.StatusKey(tenant, server, variant))
	if err == nil && rec == nil {
		err = coded.Errorf(state.ErrNotFound.Code, "no status for %s/%s variant %s", tenant, server, variant)
	}
	return rec, err
}

// Server returns a server with its hold and every variant's record; a
// server with neither is not_found.
func (s *Service) Server(ctx context.Context, tenant, server string) (*state.View, error) {
	srv, _, err := s.getServer(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	recs, err := s.variants(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	if srv == nil && len(recs) == 0 {
		return nil, coded.Errorf(state.ErrNotFound.Code, "server %s/%s has never been observed or quarantined (driftctl status lists the servers there are)", tenant, server)
	}
	return &state.View{Tenant: tenant, Server: server, Hold: srv, Variants: recs}, nil
}

// pick resolves the variant an action on a server means. A named variant
// must exist. Otherwise the server's only variant, or the only one among
// candidates (when candidates is not nil), is meant; anything else is
// ambiguous, naming the candidates.
func (s *Service) pick(v *state.View, variant, action string, candidate func(*state.Record) bool) (*state.Record, error) {
	if variant != "" {
		for i := range v.Variants {
			if v.Variants[i].Variant == variant {
				return &v.Variants[i], nil
			}
		}
		return nil, coded.Errorf(state.ErrNotFound.Code, "%s/%s has no listing variant %s (it has: %s)", v.Tenant, v.Server, variant, names(v.Variants))
	}
	switch len(v.Variants) {
	case 0:
		return nil, coded.Errorf(state.ErrNotFound.Code, "no listing of %s/%s has been observed yet", v.Tenant, v.Server)
	case 1:
		return &v.Variants[0], nil
	}
	var cands []state.Record
	for i := range v.Variants {
		if candidate != nil && candidate(&v.Variants[i]) {
			cands = append(cands, v.Variants[i])
		}
	}
	if len(cands) == 1 {
		for i := range v.Variants {
			if v.Variants[i].Variant == cands[0].Variant {
				return &v.Variants[i], nil
			}
		}
	}
	if len(cands) == 0 {
		cands = v.Variants
	}
	return nil, ambiguous(v.Tenant, v.Server, action, cands)
}

func names(recs []state.Record) string {
	if len(recs) == 0 {
		return "none"
	}
	var n []string
	for _, r := range recs {
		n = append(n, r.Variant)
	}
	return strings.Join(n, ", ")
}

// diffable: a variant whose live manifest differs from what it is
// compared with (its baseline, or for a new variant its reference).
func diffable(r *state.Record) bool {
	base := r.BaselineHash
	if base == "" {
		base = r.ReferenceHash
	}
	return base != "" && r.LiveError == "" && r.LiveHash != "" && r.LiveHash != base
}

// History returns every baseline version of the server's variants (of one
// variant when it is named), oldest first.
func (s *Service) History(ctx context.Context, tenant, server, variant string) ([]state.History, error) {
	v, err := s.Server(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	recs := v.Variants
	if variant != "" {
		rec, err := s.pick(v, variant, "history", nil)
		if err != nil {
			return nil, err
		}
		recs = []state.Record{*rec}
	}
	out := make([]state.History, 0, len(recs))
	for _, rec := range recs {
		h := state.History{Variant: rec.Variant, Baselines: []state.Baseline{}}
		for ver := int64(1); ver <= rec.BaselineVersion; ver++ {
			e, err := s.h.Baselines.Get(ctx, bus.BaselineKey(tenant, server, rec.Variant, ver))
			if err != nil {
				return nil, fmt.Errorf("reading baseline v%d of variant %s: %w", ver, rec.Variant, err)
			}
			var b state.Baseline
			if err := json.Unmarshal(e.Value(), &b); err != nil {
				return nil, fmt.Errorf("decoding baseline v%d of variant %s: %w", ver, rec.Variant, err)
			}
			h.Baselines = append(h.Baselines, b)
		}
		out = append(out, h)
	}
	return out, nil
}

// Diff classifies the live manifest of a variant against its baseline (a
// new variant without one: against the approved variant it was compared
// with). With no variant named it is the variant whose live manifest
// differs, when only one does; it returns the variant it diffed.
func (s *Service) Diff(ctx context.Context, tenant, server, variant string) (string, *surface.Report, error) {
	v, err := s.Server(ctx, tenant, server)
	if err != nil {
		return "", nil, err
	}
	rec, err := s.pick(v, variant, "diff", diffable)
	if err != nil {
		return "", nil, err
	}
	rep, err := s.diffRecord(ctx, rec)
	return rec.Variant, rep, err
}

func (s *Service) diffRecord(ctx context.Context, rec *state.Record) (*surface.Report, error) {
	base := rec.BaselineHash
	if base == "" {
		base = rec.ReferenceHash
	}
	if base == "" {
		return nil, coded.Errorf(ErrNoBaseline.Code, "variant %s of %s/%s has never been approved", rec.Variant, rec.Tenant, rec.Server)
	}
	if rec.LiveError != "" {
		return nil, coded.Errorf(state.ErrUnfingerprinted.Code, "the live manifest could not be fingerprinted (%s)", rec.LiveError)
	}
	return s.diffHashes(ctx, base, rec.LiveHash)
}

// DiffRecord is the diff shown with a variant's record: its live manifest
// against its baseline or reference, when they differ (nil otherwise).
func (s *Service) DiffRecord(ctx context.Context, rec *state.Record) (*surface.Report, error) {
	if !diffable(rec) {
		return nil, nil
	}
	return s.diffRecord(ctx, rec)
}

// Approve re-baselines variants of a server to their live manifest, which
// must be hash: the named variant, or else every variant whose live
// manifest is hash (the same manifest, reviewed once). It lifts the
// server's hold. It returns the server after, and the variants approved.
func (s *Service) Approve(ctx context.Context, tenant, server, variant, hash, actor string) (*state.View, []string, error) {
	v, targets, err := s.approveTargets(ctx, tenant, server, variant, hash)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range targets {
		if _, err := gatherThen(ctx, s, bus.StatusKey(tenant, server, t),
			func(ctx context.Context, rec *state.Record) (*state.Items, error) {
				return s.upgradeItems(ctx, rec, hash), nil
			},
			func(rec *state.Record, items *state.Items) (state.Outcome, error) {
				return state.Approve(rec, hash, actor, items, s.now())
			}); err != nil {
			return nil, nil, err
		}
	}
	// The approved variants are verified; now the server's hold (if any)
	// is lifted, unless it was placed after this approve began.
	if err := s.releaseAfterApprove(ctx, tenant, server, actor, v.Hold); err != nil {
		return nil, nil, err
	}
	v, err = s.Server(ctx, tenant, server)
	return v, targets, err
}

// approveTargets returns the server and the variants an approve of hash
// means: the named variant, the server's only one, or else every variant
// live at hash.
func (s *Service) approveTargets(ctx context.Context, tenant, server, variant, hash string) (*state.View, []string, error) {
	v, err := s.Server(ctx, tenant, server)
	if err != nil {
		return nil, nil, err
	}
	if variant != "" || len(v.Variants) == 1 {
		rec, err := s.pick(v, variant, "approve", nil)
		if err != nil {
			return nil, nil, err
		}
		return v, []string{rec.Variant}, nil
	}
	var targets, live []string
	for _, r := range v.Variants {
		if r.LiveHash == hash && r.LiveError == "" {
			targets = append(targets, r.Variant)
		}
		l := r.LiveHash
		if r.LiveError != "" {
			l = "error " + r.LiveError
		}
		live = append(live, r.Variant+" "+l)
	}
	if len(targets) == 0 {
		if len(v.Variants) == 0 {
			return nil, nil, coded.Errorf(state.ErrNothingToApprove.Code, "no listing of %s/%s has been observed yet; there is nothing to approve", tenant, server)
		}
		return nil, nil, coded.Errorf(state.ErrStaleHash.Code, "no variant of %s/%s is live at %s; review what is live now and approve that hash (%s)", tenant, server, hash, strings.Join(live, "; "))
	}
	return v, targets, nil
}

// releaseAfterApprove lifts the server's hold (if any) after an approve
// that, as it began, read the server record seen (nil: none) verified its
// variants, unless the hold is not the one it saw: the server was held
// again since. The holds are compared, not their times: the times of a
// hold and of an approve may come from the clocks of two instances.
func (s *Service) releaseAfterApprove(ctx context.Context, tenant, server, actor string, seen *state.Server) error {
	_, err := s.updateServer(ctx, tenant, server, func(srv *state.Server) (state.Server, bool, error) {
		if srv != nil && srv.Held && (seen == nil || !seen.Held || seen.HeldAtMs != srv.HeldAtMs || seen.HeldBy != srv.HeldBy || seen.HeldReason != srv.HeldReason) {
			return state.Server{}, false, coded.Errorf(ErrHeldAgain.Code, "%s quarantined %s/%s again while you approved; approve again to lift that hold", srv.HeldBy, tenant, server)
		}
		next, write := state.Release(srv, actor, s.now())
		return next, write, nil
	})
	return err
}

// upgradeItems returns the item hashes of the manifest an approve makes the
// baseline when the record does not hold them (it was written before they
// were kept), read from the stored manifest; nil otherwise, or when it
// cannot be read (the baseline is then not served until a listing of it
// fills them in).
func (s *Service) upgradeItems(ctx context.Context, rec *state.Record, hash string) *state.Items {
	if rec == nil || state.ItemsFor(rec, hash) != nil {
		return nil
	}
	sf, err := s.surfaceOf(ctx, hash)
	if err != nil {
		s.log.Warn().Err(err).Str("tenant", rec.Tenant).Str("server", rec.Server).Str("variant", rec.Variant).
			Msg("approving without item hashes; the variant is served once a listing fills them in")
		return nil
	}
	return status.ItemsOf(sf)
}

// Quarantine holds a server, every listing variant present and future,
// until an explicit approve. A server never observed is not_found unless
// preemptive is set: then it is held before its first listing.
func (s *Service) Quarantine(ctx context.Context, tenant, server, actor, reason string, preemptive bool) (*state.View, error) {
	if !preemptive {
		if _, err := s.Server(ctx, tenant, server); err != nil {
			if errors.Is(err, state.ErrNotFound) {
				err = coded.Errorf(state.ErrNotFound.Code, "server %s/%s has never been observed; to hold it before its first listing, quarantine it pre-emptively (driftctl quarantine --preemptive, API \"preemptive\": true)", tenant, server)
			}
			return nil, err
		}
	}
	// The hold first: from now on a variant seen for the first time comes
	// up quarantined. Then every variant already known, with
	// compare-and-set, so that each record says so too (and proxies
	// released before the hold existed withhold it).
	if _, err := s.updateServer(ctx, tenant, server, func(srv *state.Server) (state.Server, bool, error) {
		next, write := state.Hold(srv, tenant, server, actor, reason, s.now())
		return next, write, nil
	}); err != nil {
		return nil, err
	}
	recs, err := s.variants(ctx, tenant, server)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if _, err := s.quarantineVariant(ctx, tenant, server, r.Variant, actor, reason); err != nil {
			return nil, err
		}
	}
	return s.Server(ctx, tenant, server)
}

func (s *Service) quarantineVariant(ctx context.Context, tenant, server, variant, actor, reason string) (*state.Record, error) {
	return s.transact(ctx, bus.StatusKey(tenant, server, variant), func(rec *state.Record) (state.Outcome, error) {
		return state.Quarantine(rec, actor, reason, s.now()), nil
	})
}

// Code returns the stable code of an error of the service: the code it
// carries (coded.CodeOf: this package's, package state's, package bus's,
// the engine's), not_found for a missing key or object, or "internal".
func Code(err error) string {
	if c := coded.CodeOf(err); c != "" {
		return c
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return "not_found"
	}
	return "internal"
}

// CandidateVariants names the variants (for the API's error body).
func (e *AmbiguousError) CandidateVariants() []string { return e.Variants }
