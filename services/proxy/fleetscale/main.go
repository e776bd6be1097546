// Command fleetscale is the scale simulation of issue 17 (make scale): a
// 3-node NATS cluster from deploy/nats/cluster on loopback, the real
// fingerprint, drift (two instances) and audit commands (with a private
// ClickHouse), and a fleet of simulated proxies that use the proxy's own
// fleet package (a Gate watching the status bucket and a Publisher with
// its on-disk outbox per fronted server), not mocks. For each size it
// measures observation-to-verdict latency at a stated observation rate,
// how fast a drift reaches every proxy that fronts the server, the CPU and
// memory of NATS, the services and the fleet, the KV watches, and the
// JetStream storage per day; optionally it kills a NATS node, a drift
// instance and the audit sink under load and counts that nothing is lost.
// It writes results.json, results.csv and PNG plots (docs/scale.md).
//
// It lives under services/proxy because Go lets only code there import
// services/proxy/internal/fleet; the services run as built binaries, as
// this package may not import their internal packages.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/procstat"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "fleetscale: %v\n", err)
		os.Exit(1)
	}
}

// size is one simulated deployment.
type size struct{ servers, proxies int }

// Config is the simulation's settings.
type Config struct {
	Sizes     []size
	Tenants   int       // at most; a tenant gets at least Fronting proxies
	Fronting  int       // proxies in front of each server
	Rates     []float64 // steady phases, observations per second; the first is the goal rate
	DriftRate float64
	CallRate  float64
	Duration  time.Duration
	Inflight  int // gates setting up their watches at once during the fleet's start (0: no limit)
	Recovery  int // index in Sizes of the size that runs the recovery scenarios; -1: none
	Audit     bool
	Compact   bool     // re-listings of a confirmed (unchanged) manifest go compact
	SvcEnv    []string // extra environment of the services (their flags' variables)
	Out       string   // results and plots
	Work      string   // clusters, logs, outboxes
	Bin       string   // fingerprint, drift, audit binaries
	NATS      string   // nats-server binary
	Deploy    string   // deploy/nats
	Captures  string   // the captured real manifests
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if len(c.Sizes) == 0 {
		errs = append(errs, errors.New("--sizes: at least one SERVERSxPROXIES"))
	}
	if c.Fronting < 1 || c.Tenants < 1 {
		errs = append(errs, errors.New("--fronting and --tenants: at least 1"))
	}
	if len(c.Rates) == 0 || slices.Min(c.Rates) <= 0 || c.DriftRate < 0 || c.CallRate < 0 || c.Duration <= 0 {
		errs = append(errs, errors.New("--rates and --duration must be positive, --drift-rate and --call-rate not negative"))
	}
	if c.Recovery >= len(c.Sizes) {
		errs = append(errs, fmt.Errorf("--recovery %d: no such size", c.Recovery))
	}
	return errors.Join(errs...)
}

func parseSizes(s string) ([]size, error) {
	var out []size
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "x")
		sv, err1 := strconv.Atoi(a)
		px, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || sv < 1 || px < 1 {
			return nil, fmt.Errorf("size %q: want SERVERSxPROXIES", f)
		}
		out = append(out, size{sv, px})
	}
	return out, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	sizes := fs.String("sizes", "500x20,2000x100,5000x200", "simulated deployments, SERVERSxPROXIES, comma-separated")
	fs.IntVar(&c.Tenants, "tenants", 50, "tenants (at most; each gets at least --fronting proxies)")
	fs.IntVar(&c.Fronting, "fronting", 2, "proxies in front of each server")
	rates := fs.String("rates", "1000,250", "list observations per second over the fleet (re-listings), one steady phase each; the first also paces first sight")
	fs.Float64Var(&c.DriftRate, "drift-rate", 5, "rug pulls per second (each a verified server changing behind one proxy)")
	fs.Float64Var(&c.CallRate, "call-rate", 1000, "tool calls observed per second over the fleet")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "each steady phase")
	fs.IntVar(&c.Inflight, "start-inflight", 200, "gates setting up their watches at once while the fleet starts (0: all at once)")
	fs.IntVar(&c.Recovery, "recovery", 1, "index of the size that also runs the recovery scenarios (-1: none)")
	svcEnv := fs.String("service-env", "", "extra environment of the services, comma-separated (e.g. MCPDRIFT_FINGERPRINT_WORKERS=128)")
	fs.BoolVar(&c.Audit, "audit", true, "run the audit sink with a private ClickHouse server")
	fs.BoolVar(&c.Compact, "compact", true, "steady phases send re-listings of a confirmed manifest in the compact form (ListingsSeen), as proxies do; false: whole, as before")
	fs.StringVar(&c.Out, "out", "docs/scale", "results and plots")
	fs.StringVar(&c.Work, "work", "", "working directory (default: a temporary one, removed)")
	fs.StringVar(&c.Bin, "bin", "bin", "directory of the fingerprint, drift and audit binaries")
	fs.StringVar(&c.NATS, "nats-server", ".data/bin/nats-server", "nats-server binary")
	fs.StringVar(&c.Deploy, "deploy", "deploy/nats", "deploy/nats of the repository")
	fs.StringVar(&c.Captures, "captures", "services/internal/surface/testdata/real", "captured real manifests")
	replot := fs.Bool("replot", false, "only redraw the plots from the results.json in --out")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *replot {
		b, err := os.ReadFile(filepath.Join(c.Out, "results.json"))
		if err != nil {
			return err
		}
		var saved struct{ Sizes []*result }
		if err := json.Unmarshal(b, &saved); err != nil {
			return fmt.Errorf("reading results.json: %w", err)
		}
		return plotAll(c.Out, saved.Sizes)
	}
	var err error
	if c.Sizes, err = parseSizes(*sizes); err != nil {
		return err
	}
	if *svcEnv != "" {
		c.SvcEnv = strings.Split(*svcEnv, ",")
	}
	for _, f := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return fmt.Errorf("--rates %q: %w", *rates, err)
		}
		c.Rates = append(c.Rates, v)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	if c.Work == "" {
		if c.Work, err = os.MkdirTemp("", "fleetscale-"); err != nil {
			return err
		}
		defer os.RemoveAll(c.Work)
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	manifests, names, err := loadManifests(c.Captures)
	if err != nil {
		return err
	}
	log.Info().Int("captures", len(manifests)).Strs("first", names[:min(3, len(names))]).Msg("manifests")
	var results []*result
	for i, sz := range c.Sizes {
		r, err := runSize(ctx, c, sz, i == c.Recovery, manifests, log)
		if err != nil {
			return fmt.Errorf("size %dx%d: %w", sz.servers, sz.proxies, err)
		}
		results = append(results, r)
		// Write as we go: a later size that fails leaves the earlier ones.
		if err := writeResults(c.Out, results); err != nil {
			return err
		}
	}
	return nil
}

func writeResults(out string, rs []*result) error {
	if err := writeJSON(filepath.Join(out, "results.json"), map[string]any{
		"generated": time.Now().UTC().Format(time.RFC3339), "cpus": runtime.NumCPU(), "sizes": rs}); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(out, "results.csv"), rs); err != nil {
		return err
	}
	return plotAll(out, rs)
}

// env is one size's running deployment.
type env struct {
	c   *cluster
	ch  *clickhouseServer
	svc *services
	js  jetstream.JetStream
	f   *fleetSim
}

func (e *env) pids() map[string]int {
	m := e.c.pids()
	for k, v := range e.svc.pids() {
		m[k] = v
	}
	if pid := e.chPid(); pid != 0 {
		m["clickhouse"] = pid
	}
	m["fleet"] = os.Getpid()
	return m
}

func runSize(ctx context.Context, c Config, sz size, recover bool, manifests [][]byte, log zerolog.Logger) (*result, error) {
	log = log.With().Int("servers", sz.servers).Int("proxies", sz.proxies).Logger()
	dir := filepath.Join(c.Work, fmt.Sprintf("%dx%d", sz.servers, sz.proxies))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tenants := min(c.Tenants, max(1, sz.proxies/c.Fronting))
	servers, proxies, tnames := layout(sz.servers, sz.proxies, tenants, c.Fronting, manifests)
	e := &env{}
	var err error
	t0 := time.Now()
	if e.c, err = startCluster(c.Deploy, c.NATS, dir, tnames); err != nil {
		return nil, err
	}
	defer e.c.stop()
	nc, err := bus.Connect(ctx, bus.Conn{URL: e.c.url("admin"), Name: "mcpdrift-fleetscale"}, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if e.js, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	if !waitFor(60*time.Second, func() bool {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = bus.Setup(sctx, e.js, bus.Config{Replicas: 3})
		return err == nil
	}) {
		return nil, fmt.Errorf("bus setup with 3 replicas: %w", err)
	}
	e.svc = &services{bin: c.Bin, dir: dir, c: e.c, extra: c.SvcEnv}
	if c.Audit {
		if e.ch, err = startClickHouse(filepath.Join(dir, "clickhouse")); err != nil {
			return nil, err
		}
		defer e.ch.s.Stop()
		e.svc.chAddr = e.ch.addr
	}
	if err := e.svc.startAll(); err != nil {
		return nil, err
	}
	defer e.svc.stop()
	consumers := [][2]string{{bus.StreamObservations, bus.ConsumerFingerprint}, {bus.StreamFingerprints, bus.ConsumerDrift}}
	if c.Audit {
		consumers = append(consumers, [2]string{bus.StreamObservations, bus.ConsumerAuditObservations})
	}
	for _, sc := range consumers {
		if !waitFor(60*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := e.js.Consumer(cctx, sc[0], sc[1])
			return err == nil
		}) {
			return nil, fmt.Errorf("consumer %s on %s not created within 60s (logs in %s)", sc[1], sc[0], dir)
		}
	}
	log.Info().Dur("took", time.Since(t0).Round(time.Millisecond)).Msg("cluster and services up")

	rec := newRecorder()
	if err := watchPipeline(ctx, nc, e.js, rec); err != nil {
		return nil, err
	}
	r := &result{Servers: sz.servers, Proxies: sz.proxies, Tenants: tenants, Fronting: c.Fronting}

	// The fleet: its memory is what the process grows by.
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rss0, _ := procstat.RSSBytes(os.Getpid())
	g0 := runtime.NumGoroutine()
	fctx, fcancel := context.WithCancel(ctx)
	e.f = &fleetSim{proxies: proxies, servers: servers, rec: rec}
	defer func() { fcancel(); e.f.close() }()
	t1 := time.Now()
	if err := e.f.start(fctx, e.c, filepath.Join(dir, "outbox"), c.Inflight); err != nil {
		return nil, err
	}
	if !waitFor(5*time.Minute, func() bool { up, total := e.f.watching(); return up == total }) {
		up, total := e.f.watching()
		return nil, fmt.Errorf("%d of %d gates watching after 5 minutes", up, total)
	}
	r.WatchSetupSec = round2(time.Since(t1).Seconds())
	r.WatchSetupRate = round1(float64(sz.proxies) / r.WatchSetupSec) // one status watch per proxy (ADR 0010)
	_, r.Gates = e.f.watching()
	r.WatchesPerProxy = 1
	runtime.GC()
	runtime.ReadMemStats(&m1)
	rss1, _ := procstat.RSSBytes(os.Getpid())
	r.FleetHeapKiBPerGate = round2(float64(m1.HeapInuse-min(m0.HeapInuse, m1.HeapInuse)) / 1024 / float64(r.Gates))
	r.FleetRSSMiBPerProxy = round2(float64(rss1-min(rss0, rss1)) / (1 << 20) / float64(sz.proxies))
	r.FleetGoroutinesPerGate = round1(float64(runtime.NumGoroutine()-g0) / float64(r.Gates))
	if s, err := e.js.Stream(ctx, "KV_"+bus.BucketStatus); err == nil {
		r.KVConsumers = s.CachedInfo().State.Consumers
	}
	log.Info().Int("gates", r.Gates).Float64("watch_setup_s", r.WatchSetupSec).Int("kv_consumers", r.KVConsumers).
		Float64("heap_kib_per_gate", r.FleetHeapKiBPerGate).Msg("fleet watching")

	// First sight of every server: baseline v1, verified everywhere.
	t2 := time.Now()
	e.f.compact.Store(c.Compact)
	firstSight(fctx, e.f, c.Rates[0])
	waitFor(2*time.Minute, func() bool { return rec.pendingCount() == 0 })
	r.FirstSightIncomplete = rec.dropExpectations()
	r.FirstSightSeconds = round2(time.Since(t2).Seconds())
	r.FirstSight = summarize(rec.take().allProxies)
	log.Info().Str("obs_to_every_proxy", r.FirstSight.String()).Int("incomplete", r.FirstSightIncomplete).Msg("first sight")

	for _, rate := range c.Rates {
		// Start from an idle pipeline: what an earlier phase queued is done.
		waitFor(2*time.Minute, func() bool {
			return consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerFingerprint) == 0 &&
				consumerBacklog(ctx, e.js, bus.StreamFingerprints, bus.ConsumerDrift) == 0
		})
		st := steadyPhase(ctx, fctx, c, e, rec, rate)
		r.Steady = append(r.Steady, st)
		log.Info().Float64("rate", rate).Float64("obs_per_s", st.ObsRate).Float64("fingerprinted_per_s", st.FpRate).
			Str("obs_to_fp", st.ObsToFp.String()).Str("obs_to_verdict", st.ObsToVerdict.String()).
			Str("drift_to_every_proxy", st.DriftAll.String()).Str("status_write_to_proxy", st.KVToProxy.String()).
			Int("drifts_missing", st.DriftsMissing).Msg("steady")
		for name, u := range st.Usage {
			log.Info().Str("process", name).Float64("cpu_pct", u.CPUPercent).Float64("rss_mib", u.RSSMiB).Msg("usage")
		}
	}
	r.Warnings = e.f.warns.Load()

	if recover {
		rc, err := runRecovery(ctx, c, e, rec, log)
		if err != nil {
			// The steady figures stand; say what stopped the scenarios.
			log.Error().Err(err).Msg("recovery scenarios")
			rc = &recovery{Error: err.Error()}
		}
		r.Recovery = rc
	}
	r.Violations = e.c.violations()
	return r, nil
}

// steadyPhase drives the fleet at rate for c.Duration and measures.
func steadyPhase(ctx, fctx context.Context, c Config, e *env, rec *recorder, rate float64) *steady {
	st := &steady{ObsRateTarget: rate, DriftRate: c.DriftRate, CallRate: c.CallRate}
	rec.take()
	st.LoadAvg[0] = loadAvg()
	st0 := streamStates(ctx, e.js)
	smp := newSampler(e.pids)
	sctx, scancel := context.WithCancel(fctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				smp.sample()
			}
		}
	}()
	ts := time.Now()
	n := drive(fctx, e.f, loadSpec{obs: rate, drifts: c.DriftRate, calls: c.CallRate}, c.Duration)
	el := time.Since(ts)
	scancel()
	<-sampled
	st.Usage = smp.end()
	st.LoadAvg[1] = loadAvg()
	st.Storage = growthOver(st0, streamStates(ctx, e.js), el)
	waitFor(15*time.Second, func() bool { return rec.pendingCount() == 0 })
	st.DriftsMissing = rec.dropExpectations()
	s := rec.take()
	st.Duration = round1(el.Seconds())
	st.ObsRate = round1(float64(n.obs+n.drifts) / el.Seconds())
	st.FpRate = round1(float64(fingerprintedWithin(s.fpByObserved, ts, ts.Add(el))) / el.Seconds())
	st.ObsToFp = summarize(s.fp)
	st.ObsToVerdict = summarize(s.verdictProxy)
	st.ObsToBus = summarize(s.verdictBus)
	st.DriftAll = summarize(s.allProxies)
	st.KVToProxy = summarize(s.kvToProxy)
	window := max(c.Duration/3, 3*time.Second)
	idle := idleCPURate(ctx, e, window)
	st.PipelineCPUIdentical = cpuPerListing(ctx, fctx, e, rate, window, true, idle)
	st.PipelineCPUNew = cpuPerListing(ctx, fctx, e, rate, window, false, idle)
	e.f.compact.Store(c.Compact)
	rec.take()
	return st
}

// pipelineCPU is the CPU time the fingerprint, drift and audit processes
// used so far.
func pipelineCPU(pids map[string]int) time.Duration {
	var t time.Duration
	for name, pid := range pids {
		if strings.HasPrefix(name, "fingerprint") || strings.HasPrefix(name, "drift") || strings.HasPrefix(name, "audit") {
			if c, err := procstat.CPUTime(pid); err == nil {
				t += c
			}
		}
	}
	return t
}

// pipelineIdle waits until the fingerprint, drift and audit consumers have
// nothing pending.
func pipelineIdle(ctx context.Context, e *env) {
	waitFor(2*time.Minute, func() bool {
		return consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerFingerprint) == 0 &&
			consumerBacklog(ctx, e.js, bus.StreamFingerprints, bus.ConsumerDrift) == 0 &&
			consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerAuditObservations) == 0
	})
}

// idleCPURate is the pipeline's CPU time per second of wall time with no
// traffic (pulls, heartbeats, watches, sweeps), measured over d: the floor
// cpuPerListing takes off, so that a listing is charged only its own work.
func idleCPURate(ctx context.Context, e *env, d time.Duration) float64 {
	pipelineIdle(ctx, e)
	c0, t0 := pipelineCPU(e.pids()), time.Now()
	time.Sleep(d)
	return float64(pipelineCPU(e.pids())-c0) / float64(time.Since(t0))
}

// cpuPerListing drives re-listings of unchanged manifests only, compact or
// whole, at rate for d, waits for the pipeline to drain, and returns the
// pipeline's CPU time per listing in microseconds, less the idle floor
// (idle, CPU per wall time) over the same time (0 when none was
// published).
func cpuPerListing(ctx, fctx context.Context, e *env, rate float64, d time.Duration, compact bool, idle float64) float64 {
	e.f.compact.Store(compact)
	pipelineIdle(ctx, e)
	c0, l0, t0 := pipelineCPU(e.pids()), e.f.listings.Load(), time.Now()
	drive(fctx, e.f, loadSpec{obs: rate}, d)
	time.Sleep(100 * time.Millisecond) // the publishers' linger
	pipelineIdle(ctx, e)
	c1, n := pipelineCPU(e.pids()), e.f.listings.Load()-l0
	if n <= 0 {
		return 0
	}
	used := float64(c1-c0) - idle*float64(time.Since(t0))
	return round1(max(used, 0) / float64(time.Microsecond) / float64(n))
}

// fingerprintedWithin counts the fingerprinted observations published in [a, b).
func fingerprintedWithin(ts []time.Time, a, b time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(a) && t.Before(b) {
			n++
		}
	}
	return n
}

// chPid is the ClickHouse server's process id, 0 when there is none.
func (e *env) chPid() int {
	if e.ch == nil {
		return 0
	}
	return e.ch.s.Pid()
}
