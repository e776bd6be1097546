package bus

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Partitions (docs/adr/0011-partitioned-pipeline.md). With P > 1
// partitions the observation and fingerprint streams each have a subject
// transform that NATS applies as it stores a message: the subject a proxy
// or the fingerprint service publishes on gains a last token, the
// partition, a hash of (tenant, server) modulo P computed by NATS
// ({{partition(P,…)}}):
//
//	mcpdrift.obs.<kind>.<tenant>.<server>  ->  mcpdrift.obs.<kind>.<tenant>.<server>.<p>
//	mcpdrift.fp.<tenant>.<server>          ->  mcpdrift.fp.<tenant>.<server>.<p>
//
// Both hash the same two tokens, so a server has the same partition in
// both streams. Publishers never name a partition (their permissions do not
// allow it); consumers take partitions with one durable consumer each
// (PartitionRoutes), pinned to one instance at a time. With P = 1 (the
// default) the streams have no transform and subjects are as they always
// were.

// MaxPartitions bounds the partitions of the pipeline.
const MaxPartitions = 256

// CodePartitionsMismatch is the code of the error a service gets when the
// partitions it was configured with are not those of the stream.
const CodePartitionsMismatch = "partitions_mismatch"

// PinnedTTL is how long a partition's consumer stays pinned to an instance
// that stopped pulling (a crash) before NATS pins another instance of the
// group; an instance that shuts down unpins at once (Router).
const PinnedTTL = 30 * time.Second

// partitionTransform is the subject transform of a partitioned stream, nil
// for one partition or a stream that is not partitioned.
func partitionTransform(stream string, p int) *jetstream.SubjectTransformConfig {
	if p <= 1 {
		return nil
	}
	switch stream {
	case StreamObservations:
		return &jetstream.SubjectTransformConfig{
			Source:      Prefix + ".obs.*.*.*",
			Destination: fmt.Sprintf("%s.obs.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(%d,2,3)}}", Prefix, p),
		}
	case StreamFingerprints:
		return &jetstream.SubjectTransformConfig{
			Source:      Prefix + ".fp.*.*",
			Destination: fmt.Sprintf("%s.fp.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(%d,1,2)}}", Prefix, p),
		}
	}
	return nil
}

func partitioned(stream string) bool {
	return stream == StreamObservations || stream == StreamFingerprints
}

var partitionArg = regexp.MustCompile(`\{\{\s*partition\(\s*(\d+)`)

// PartitionsOf returns the partitions of a stream with this configuration:
// the P of its transform's {{partition(P,…)}}, 1 without one.
func PartitionsOf(cfg jetstream.StreamConfig) int {
	if cfg.SubjectTransform == nil {
		return 1
	}
	m := partitionArg.FindStringSubmatch(cfg.SubjectTransform.Destination)
	if m == nil {
		return 1
	}
	p, err := strconv.Atoi(m[1])
	if err != nil || p < 1 {
		return 1
	}
	return p
}

// StreamPartitions returns the partitions of a stream as it is on the
// server, and checks them against want (0: any): a consumer configured
// for other partitions than the stream's would leave some unconsumed.
func StreamPartitions(ctx context.Context, js jetstream.JetStream, stream string, want int) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", stream, err)
	}
	p := PartitionsOf(s.CachedInfo().Config)
	if want != 0 && want != p {
		return 0, coded.Errorf(CodePartitionsMismatch,
			"stream %s has %d partitions, this service was told %d (set the same --partitions on the bus setup and every fingerprint and drift instance)",
			stream, p, want)
	}
	return p, nil
}

// SplitPartition returns an observation or fingerprint subject as it was
// published, without the partition token NATS added on storing it, and
// that partition; -1 when it has none (one partition, or a subject of
// another kind).
func SplitPartition(subject string) (string, int) {
	var tokens int
	switch {
	case strings.HasPrefix(subject, Prefix+".obs."):
		tokens = 6 // mcpdrift.obs.<kind>.<tenant>.<server>.<p>
	case strings.HasPrefix(subject, Prefix+".fp."):
		tokens = 5 // mcpdrift.fp.<tenant>.<server>.<p>
	default:
		return subject, -1
	}
	if strings.Count(subject, ".") != tokens-1 {
		return subject, -1
	}
	i := strings.LastIndexByte(subject, '.')
	p, err := strconv.Atoi(subject[i+1:])
	if err != nil || p < 0 || p >= MaxPartitions || strconv.Itoa(p) != subject[i+1:] {
		return subject, -1
	}
	return subject[:i], p
}

// PartitionDurable names partition i's durable consumer of a service whose
// one consumer, without partitions, is durable.
func PartitionDurable(durable string, i int) string { return fmt.Sprintf("%s-p%d", durable, i) }

// ParsePartitionSet reads a --partition-set: partition numbers and ranges
// ("0,2-3"); empty means every partition. It checks each against p.
func ParsePartitionSet(s string, p int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := make(map[int]bool)
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("partition set %q: %q is not a partition or a range of them (0-3)", s, part)
		}
		if b >= p {
			return nil, fmt.Errorf("partition set %q: partition %d does not exist: there are %d (0 to %d)", s, b, p, p-1)
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	return out, nil
}

// CheckPartitions reports partitions p or a partition set that cannot
// work: p from 0 (as 1, none) to MaxPartitions, and each partition of the
// set (nil: every partition) below p.
func CheckPartitions(p int, set []int) error {
	if p < 0 || p > MaxPartitions {
		return fmt.Errorf("partitions %d: want 1 to %d", p, MaxPartitions)
	}
	for _, i := range set {
		if i < 0 || i >= max(p, 1) {
			return fmt.Errorf("partition %d of the partition set: there are %d partitions (0 to %d)", i, max(p, 1), max(p, 1)-1)
		}
	}
	return nil
}

// PartitionRoutes returns the routes of a service consuming stream through
// cc with p partitions; prefetch is the instance's, split among its
// routes. With one partition it is cc itself, shared by every instance as
// always. With more, it is one durable consumer per
// partition in set (nil: every partition): PartitionDurable(cc.Durable, i)
// filtered on perPartition with the partition token appended, in a
// priority group named cc.Durable with the pinned-client policy, so that
// NATS delivers a partition to one instance at a time however many
// instances consume it; another instance of the group takes it over when
// the pinned one unpins (a shutdown) or stops pulling for PinnedTTL (a
// crash).
func PartitionRoutes(stream string, cc jetstream.ConsumerConfig, prefetch int, perPartition string, p int, set []int) []Route {
	if p <= 1 {
		return []Route{{Stream: stream, Consumer: cc, Prefetch: prefetch}}
	}
	if len(set) == 0 {
		set = make([]int, p)
		for i := range set {
			set[i] = i
		}
	}
	prefetch = max(prefetch/len(set), min(prefetch, 1))
	routes := make([]Route, 0, len(set))
	for _, i := range set {
		c := cc
		c.Durable = PartitionDurable(cc.Durable, i)
		c.Description = fmt.Sprintf("%s (partition %d of %d)", cc.Description, i, p)
		c.FilterSubject = perPartition + "." + strconv.Itoa(i)
		c.FilterSubjects = nil
		c.PriorityGroups = []string{cc.Durable}
		c.PriorityPolicy = jetstream.PriorityPolicyPinned
		c.PinnedTTL = PinnedTTL
		routes = append(routes, Route{Stream: stream, Consumer: c, Prefetch: prefetch})
	}
	return routes
}
