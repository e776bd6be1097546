package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// dist summarises latencies in milliseconds.
type dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// summarize returns the nearest-rank percentiles of ds.
func summarize(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return ms(s[max(i, 0)])
	}
	return dist{N: len(s), P50: at(0.50), P99: at(0.99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// streamState is a stream's size at one moment.
type streamState struct {
	Bytes, Msgs uint64
}

// growth is a stream's growth over a phase, scaled to a day.
type growth struct {
	Msgs           uint64  `json:"msgs"`
	Bytes          uint64  `json:"bytes"`
	AvgMsgBytes    float64 `json:"avg_msg_bytes"`
	GiBPerDay      float64 `json:"gib_per_day"` // one replica; the cluster stores 3
	MsgsPerDayMill float64 `json:"million_msgs_per_day"`
}

var measuredStreams = []string{bus.StreamObservations, bus.StreamFingerprints, bus.StreamVerdicts, bus.StreamAdmin,
	"KV_" + bus.BucketStatus, "KV_" + bus.BucketBaselines, "OBJ_" + bus.BucketManifests}

func streamStates(ctx context.Context, js jetstream.JetStream) map[string]streamState {
	out := map[string]streamState{}
	for _, name := range measuredStreams {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(c, name)
		cancel()
		if err != nil {
			continue
		}
		st := s.CachedInfo().State
		out[name] = streamState{Bytes: st.Bytes, Msgs: st.Msgs}
	}
	return out
}

func growthOver(a, b map[string]streamState, d time.Duration) map[string]growth {
	out := map[string]growth{}
	perDay := float64(24*time.Hour) / float64(d)
	for name, sb := range b {
		sa := a[name]
		g := growth{Msgs: sb.Msgs - min(sa.Msgs, sb.Msgs), Bytes: sb.Bytes - min(sa.Bytes, sb.Bytes)}
		if g.Msgs > 0 {
			g.AvgMsgBytes = round1(float64(g.Bytes) / float64(g.Msgs))
		}
		g.GiBPerDay = round2(float64(g.Bytes) * perDay / (1 << 30))
		g.MsgsPerDayMill = round2(float64(g.Msgs) * perDay / 1e6)
		out[name] = g
	}
	return out
}

// steady is one steady phase: the fleet's traffic at one observation rate.
type steady struct {
	Duration      float64 `json:"steady_s"`
	ObsRateTarget float64 `json:"obs_rate_target"`
	ObsRate       float64 `json:"obs_rate_published"`
	FpRate        float64 `json:"obs_rate_fingerprinted"`
	DriftRate     float64 `json:"drift_rate"`
	CallRate      float64 `json:"call_rate"`
	ObsToFp       dist    `json:"obs_to_fingerprint"`
	ObsToVerdict  dist    `json:"obs_to_verdict_observing_proxy"`
	ObsToBus      dist    `json:"obs_to_verdict_on_bus"`
	DriftAll      dist    `json:"drift_obs_to_every_proxy"`
	KVToProxy     dist    `json:"drift_status_write_to_each_proxy"`
	DriftsMissing int     `json:"drifts_not_seen_everywhere"`
	// Pipeline CPU (fingerprint, drift and audit processes) per listing,
	// measured after the phase in two windows of re-listings only at the
	// phase's rate, each until the pipeline drained: identical re-listings
	// in the compact form (what a proxy sends for a confirmed surface), and
	// the same re-listings whole, each through fingerprint and drift (what
	// every listing cost before the compact form, and what a new listing
	// costs at least).
	PipelineCPUIdentical float64 `json:"pipeline_cpu_us_per_identical_listing"`
	PipelineCPUNew       float64 `json:"pipeline_cpu_us_per_new_listing"`
	// The same, by service (fingerprint, drift: both instances, audit).
	PipelineCPUIdenticalBy map[string]float64 `json:"pipeline_cpu_us_per_identical_listing_by_service,omitempty"`
	PipelineCPUNewBy       map[string]float64 `json:"pipeline_cpu_us_per_new_listing_by_service,omitempty"`
	Ledger                 *ledger            `json:"nothing_lost,omitempty"` // counted at the end of the phase, cumulative
	Usage                  map[string]usage   `json:"usage"`
	LoadAvg                [2]float64         `json:"machine_load_average_start_end"` // 1-minute load average of the whole machine (shared)
	Storage                map[string]growth  `json:"storage"`
}

// result is one size's figures.
type result struct {
	Servers         int     `json:"servers"`
	Proxies         int     `json:"proxies"`
	Tenants         int     `json:"tenants"`
	Fronting        int     `json:"fronting"`
	Gates           int     `json:"gates"`
	WatchesPerProxy float64 `json:"kv_watches_per_proxy"`
	KVConsumers     int     `json:"kv_status_consumers"` // on the hub's KV_mcpdrift_status
	LeafNodes       int     `json:"leaf_nodes"`
	LeafKVConsumers int     `json:"leaf_kv_status_consumers"` // on the leaf nodes' status mirrors, all sites
	// HubMirrorConsumers: the sites' status mirrors (one per site and
	// tenant), each a consumer on the hub's status stream that nats-server
	// creates as a direct consumer, not counted in kv_status_consumers.
	HubMirrorConsumers int `json:"kv_status_mirror_consumers"`
	// HubKVConsumerFilters: the filter of each consumer on the hub's
	// status stream (at most 200): the sites' mirrors, the services' and
	// the harness's own watch.
	HubKVConsumerFilters []string `json:"hub_kv_status_consumer_filters,omitempty"`
	WatchSetupSec        float64  `json:"watch_setup_s"`
	WatchSetupRate       float64  `json:"watches_set_up_per_s"`

	FirstSight           dist    `json:"first_sight_obs_to_all_proxies"`
	FirstSightSeconds    float64 `json:"first_sight_s"`
	FirstSightIncomplete int     `json:"first_sight_incomplete"`
	FirstSightLedger     *ledger `json:"first_sight_nothing_lost,omitempty"`
	// FirstSightMaxBacklog is each pipeline consumer's largest backlog
	// (pending and unacknowledged) during first sight: where it queued.
	FirstSightMaxBacklog map[string]uint64 `json:"first_sight_max_backlog,omitempty"`
	// FirstSightCPUPercent is each process group's CPU over first sight, in
	// % of one core (hub, leaf, fingerprint, drift, audit, clickhouse, fleet).
	FirstSightCPUPercent map[string]float64 `json:"first_sight_cpu_percent,omitempty"`
	// FirstSightFaults: the faults first sight ran through (--first-sight-faults).
	FirstSightFaults *faults `json:"first_sight_faults,omitempty"`
	// FleetProcesses is how many processes ran the simulated proxies.
	FleetProcesses int `json:"fleet_processes,omitempty"`

	Steady                 []*steady `json:"steady"`
	FleetHeapKiBPerGate    float64   `json:"fleet_heap_kib_per_gate"`
	FleetRSSMiBPerProxy    float64   `json:"fleet_rss_mib_per_proxy"`
	FleetGoroutinesPerGate float64   `json:"fleet_goroutines_per_gate"`
	Warnings               int64     `json:"fleet_warn_lines"`
	Violations             int       `json:"nats_permission_violations"`
	Recovery               *recovery `json:"recovery,omitempty"`
	Error                  string    `json:"error,omitempty"` // the size did not complete: why
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// csvColumns are the flat figures of each size, one row per size.
func writeCSV(path string, rs []*result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	head := []string{"servers", "proxies", "tenants", "fronting", "gates", "kv_watches_per_proxy", "kv_status_consumers", "watch_setup_s", "leaf_nodes", "leaf_kv_status_consumers",
		"obs_rate_target", "obs_rate_published", "obs_rate_fingerprinted", "drift_rate", "call_rate",
		"obs_to_fp_p50_ms", "obs_to_fp_p99_ms", "obs_to_verdict_p50_ms", "obs_to_verdict_p99_ms",
		"drift_every_proxy_p50_ms", "drift_every_proxy_p99_ms", "status_write_to_proxy_p50_ms", "status_write_to_proxy_p99_ms",
		"nats_cpu_pct", "nats_rss_mib", "fingerprint_cpu_pct", "fingerprint_rss_mib", "drift_cpu_pct", "drift_rss_mib",
		"audit_cpu_pct", "audit_rss_mib", "clickhouse_cpu_pct", "clickhouse_rss_mib", "fleet_cpu_pct", "fleet_rss_mib",
		"fleet_rss_mib_per_proxy", "fleet_heap_kib_per_gate", "obs_gib_per_day", "fp_gib_per_day", "verdict_gib_per_day", "kv_status_gib_per_day",
		"leaf_cpu_pct", "leaf_rss_mib", "first_sight_p50_ms", "first_sight_p99_ms", "first_sight_incomplete", "drifts_not_seen_everywhere",
		"pipeline_cpu_us_per_identical_listing", "pipeline_cpu_us_per_new_listing", "listings_issued", "audit_list_rows", "calls_issued", "audit_call_rows"}
	if err := w.Write(head); err != nil {
		return err
	}
	for _, r := range rs {
		for _, st := range r.Steady {
			if err := w.Write(csvRow(r, st)); err != nil {
				return err
			}
		}
	}
	w.Flush()
	return w.Error()
}

func csvRow(r *result, st *steady) []string {
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	nats, fp, dr, au, ch, fl := st.sum("nats-"), st.sum("fingerprint"), st.sum("drift-"), st.sum("audit"), st.sum("clickhouse"), st.sum("fleet")
	lf := st.sum("leaf-")
	lg := st.Ledger
	if lg == nil {
		lg = &ledger{}
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{strconv.Itoa(r.Servers), strconv.Itoa(r.Proxies), strconv.Itoa(r.Tenants), strconv.Itoa(r.Fronting), strconv.Itoa(r.Gates),
		f2(r.WatchesPerProxy), strconv.Itoa(r.KVConsumers), f2(r.WatchSetupSec), strconv.Itoa(r.LeafNodes), strconv.Itoa(r.LeafKVConsumers),
		f2(st.ObsRateTarget), f2(st.ObsRate), f2(st.FpRate), f2(st.DriftRate), f2(st.CallRate),
		f2(st.ObsToFp.P50), f2(st.ObsToFp.P99), f2(st.ObsToVerdict.P50), f2(st.ObsToVerdict.P99),
		f2(st.DriftAll.P50), f2(st.DriftAll.P99), f2(st.KVToProxy.P50), f2(st.KVToProxy.P99),
		f2(nats.CPUPercent), f2(nats.RSSMiB), f2(fp.CPUPercent), f2(fp.RSSMiB), f2(dr.CPUPercent), f2(dr.RSSMiB),
		f2(au.CPUPercent), f2(au.RSSMiB), f2(ch.CPUPercent), f2(ch.RSSMiB), f2(fl.CPUPercent), f2(fl.RSSMiB),
		f2(r.FleetRSSMiBPerProxy), f2(r.FleetHeapKiBPerGate),
		f2(st.Storage[bus.StreamObservations].GiBPerDay), f2(st.Storage[bus.StreamFingerprints].GiBPerDay),
		f2(st.Storage[bus.StreamVerdicts].GiBPerDay), f2(st.Storage["KV_"+bus.BucketStatus].GiBPerDay),
		f2(lf.CPUPercent), f2(lf.RSSMiB), f2(r.FirstSight.P50), f2(r.FirstSight.P99), strconv.Itoa(r.FirstSightIncomplete), strconv.Itoa(st.DriftsMissing),
		f2(st.PipelineCPUIdentical), f2(st.PipelineCPUNew), i64(lg.ListingsIssued), strconv.FormatUint(lg.AuditListRows, 10),
		i64(lg.CallsIssued), strconv.FormatUint(lg.AuditCallRows, 10)}
}

// sum adds the usage of every process whose name starts with prefix.
func (st *steady) sum(prefix string) usage {
	var u usage
	for name, v := range st.Usage {
		if len(name) >= len(prefix) && name[:len(prefix)] == prefix {
			u.CPUPercent += v.CPUPercent
			u.RSSMiB += v.RSSMiB
		}
	}
	u.CPUPercent, u.RSSMiB = round1(u.CPUPercent), round1(u.RSSMiB)
	return u
}

func (d dist) String() string {
	return fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms (n=%d)", d.P50, d.P99, d.Max, d.N)
}
