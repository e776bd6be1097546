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
	"bytes"
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
	// FleetProcs: processes the simulated proxies run in (fleet workers);
	// 0: as few as the open-file limit allows (1: the harness's own).
	FleetProcs int
	Sites      int // leaf nodes (sites); tenant i is served by site i mod Sites; 0: proxies connect to the hub
	Recovery   int // index in Sizes of the size that runs the recovery scenarios; -1: none
	// FirstSightFaults: index in Sizes of the size whose first sight is
	// run through faults (the status bucket's leader and a drift instance
	// killed a third of the way in, both back 10 s later); -1: none.
	FirstSightFaults int
	Audit            bool
	Compact          bool     // re-listings of a confirmed (unchanged) manifest go compact
	SvcEnv           []string // extra environment of the services (their flags' variables)
	Out              string   // results and plots
	Work             string   // clusters, logs, outboxes
	Bin              string   // fingerprint, drift, audit binaries
	NATS             string   // nats-server binary
	Deploy           string   // deploy/nats
	Captures         string   // the captured real manifests
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
	if c.Sites < 0 {
		errs = append(errs, errors.New("--sites: 0 or more"))
	}
	if c.Recovery >= len(c.Sizes) {
		errs = append(errs, fmt.Errorf("--recovery %d: no such size", c.Recovery))
	}
	if c.FirstSightFaults >= len(c.Sizes) {
		errs = append(errs, fmt.Errorf("--first-sight-faults %d: no such size", c.FirstSightFaults))
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
	if len(args) == 1 && args[0] == "--fleet-worker" {
		return runWorker(ctx, os.Stdin, os.Stdout)
	}
	fs := flag.NewFlagSet("fleetscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	sizes := fs.String("sizes", "500x20,2000x100,5000x200,20000x1000", "simulated deployments, SERVERSxPROXIES, comma-separated")
	fs.IntVar(&c.Tenants, "tenants", 50, "tenants (at most; each gets at least --fronting proxies)")
	fs.IntVar(&c.Fronting, "fronting", 2, "proxies in front of each server")
	rates := fs.String("rates", "250", "list observations per second over the fleet (re-listings), one steady phase each; the first also paces first sight")
	fs.Float64Var(&c.DriftRate, "drift-rate", 5, "rug pulls per second (each a verified server changing behind one proxy)")
	fs.Float64Var(&c.CallRate, "call-rate", 1000, "tool calls observed per second over the fleet")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "each steady phase")
	fs.IntVar(&c.FleetProcs, "fleet-procs", 0, "processes the simulated proxies are spread over (each publisher holds a lock file open, as a proxy does per fronted server: a large fleet needs more open files than one process may have); 0: as few as the open-file limit allows")
	fs.IntVar(&c.Inflight, "start-inflight", 200, "gates setting up their watches at once while the fleet starts (0: all at once)")
	fs.IntVar(&c.Sites, "sites", 10, "leaf nodes (deploy/nats/leaf), each serving every Nth tenant (one account, one remote and one set of mirrors per tenant); the proxies connect to their tenant's site. 0: no leaf nodes, proxies connect to the hub")
	fs.IntVar(&c.Recovery, "recovery", 1, "index of the size that also runs the recovery scenarios (-1: none)")
	fs.IntVar(&c.FirstSightFaults, "first-sight-faults", -1, "index of the size whose first sight runs through faults: the status bucket's leader (a hub node) and drift-1 killed a third of the way in, restarted 10 s later (-1: none)")
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
	raiseOpenFiles(c, log)
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
	var failed []error
	for i, sz := range c.Sizes {
		r, err := runSize(ctx, c, sz, i == c.Recovery, i == c.FirstSightFaults, manifests, log)
		if err != nil {
			// Keep going: the other sizes stand, this one says what stopped it.
			err = fmt.Errorf("size %dx%d: %w", sz.servers, sz.proxies, err)
			log.Error().Err(err).Msg("size did not complete")
			failed = append(failed, err)
			r = &result{Servers: sz.servers, Proxies: sz.proxies, Fronting: c.Fronting, Error: err.Error()}
			if ctx.Err() != nil {
				return errors.Join(failed...)
			}
		}
		results = append(results, r)
		// Write as we go: a later size that fails leaves the earlier ones.
		if err := writeResults(c.Out, results); err != nil {
			return err
		}
	}
	return errors.Join(failed...)
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
	c     *cluster
	sites []*site
	ch    *clickhouseServer
	svc   *services
	js    jetstream.JetStream
	f     *fleetSim
}

func (e *env) pids() map[string]int {
	m := e.c.pids()
	for _, s := range e.sites {
		if s.proc != nil && !s.proc.exited() {
			m[s.name] = s.proc.pid()
		}
	}
	for k, v := range e.svc.pids() {
		m[k] = v
	}
	if pid := e.chPid(); pid != 0 {
		m["clickhouse"] = pid
	}
	m["fleet"] = os.Getpid()
	if e.f != nil {
		for i, w := range e.f.workers {
			m[fmt.Sprintf("fleet-w%d", i)] = w.cmd.Process.Pid
		}
	}
	return m
}

func runSize(ctx context.Context, c Config, sz size, recover, faulty bool, manifests [][]byte, log zerolog.Logger) (*result, error) {
	log = log.With().Int("servers", sz.servers).Int("proxies", sz.proxies).Logger()
	procs := fleetProcs(c, sz)
	if err := fdLimitError(sz, c.Fronting, procs); err != nil {
		return nil, err
	}
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
	if c.Sites > 0 {
		ts := time.Now()
		if e.sites, err = startSites(ctx, c.Deploy, c.NATS, dir, e.c, assignSites(tnames, c.Sites)); err != nil {
			return nil, err
		}
		defer func() {
			for _, s := range e.sites {
				s.stop()
			}
		}()
		log.Info().Int("leaf_nodes", len(e.sites)).Dur("took", time.Since(ts).Round(time.Millisecond)).Msg("sites linked, mirrors set up")
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
	r := &result{Servers: sz.servers, Proxies: sz.proxies, Tenants: tenants, Fronting: c.Fronting, LeafNodes: len(e.sites)}

	// The fleet: its memory is what the process grows by.
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rss0, _ := procstat.RSSBytes(os.Getpid())
	g0 := runtime.NumGoroutine()
	fctx, fcancel := context.WithCancel(ctx)
	e.f = &fleetSim{proxies: proxies, servers: servers, rec: rec, workerOf: map[string]*worker{}}
	defer func() { fcancel(); e.f.close() }()
	t1 := time.Now()
	if procs > 1 {
		log.Info().Int("processes", procs).Msg("the fleet is spread over worker processes (open files)")
		spec := workerSpec{Captures: c.Captures, Servers: sz.servers, Proxies: sz.proxies, Tenants: tenants, Fronting: c.Fronting}
		if err := e.f.startWorkers(fctx, procs, e.proxyURL, filepath.Join(dir, "outbox"), c.Inflight, scaled(45*time.Second, sz), spec); err != nil {
			return nil, err
		}
	} else if err := e.f.start(fctx, e.proxyURL, filepath.Join(dir, "outbox"), c.Inflight, scaled(45*time.Second, sz)); err != nil {
		return nil, err
	}
	r.FleetProcesses = procs
	if within := scaled(5*time.Minute, sz); !waitFor(within, func() bool { up, total := e.f.watching(); return up == total }) {
		up, total := e.f.watching()
		return nil, fmt.Errorf("%d of %d gates watching after %v", up, total, within)
	}
	r.WatchSetupSec = round2(time.Since(t1).Seconds())
	r.WatchSetupRate = round1(float64(sz.proxies) / r.WatchSetupSec) // one status watch per proxy (ADR 0010)
	_, r.Gates = e.f.watching()
	r.WatchesPerProxy = 1
	runtime.GC()
	runtime.ReadMemStats(&m1)
	rss1, _ := procstat.RSSBytes(os.Getpid())
	heap, goroutines := m1.HeapInuse-min(m0.HeapInuse, m1.HeapInuse), runtime.NumGoroutine()-g0
	rss := rss1 - min(rss0, rss1)
	if procs > 1 {
		heap, goroutines, rss = 0, 0, 0
		for _, st := range e.f.workerStatsAll() {
			heap += st.HeapInuse
			goroutines += st.Goroutines
		}
		for _, w := range e.f.workers {
			if b, err := procstat.RSSBytes(w.cmd.Process.Pid); err == nil {
				rss += b
			}
		}
	}
	r.FleetHeapKiBPerGate = round2(float64(heap) / 1024 / float64(r.Gates))
	r.FleetRSSMiBPerProxy = round2(float64(rss) / (1 << 20) / float64(sz.proxies))
	r.FleetGoroutinesPerGate = round1(float64(goroutines) / float64(r.Gates))
	if s, err := e.js.Stream(ctx, "KV_"+bus.BucketStatus); err == nil {
		r.KVConsumers = s.CachedInfo().State.Consumers
	}
	for _, s := range e.sites {
		w, m := s.statusConsumers(ctx)
		r.LeafKVConsumers += w
		r.HubMirrorConsumers += m
	}
	if names, err := consumerFilters(ctx, e.js, "KV_"+bus.BucketStatus); err == nil {
		log.Debug().Strs("consumers", names).Msg("hub status consumers")
		r.HubKVConsumerFilters = names
	}
	log.Info().Int("gates", r.Gates).Float64("watch_setup_s", r.WatchSetupSec).Int("kv_consumers", r.KVConsumers).
		Int("leaf_nodes", r.LeafNodes).Int("leaf_kv_consumers", r.LeafKVConsumers).Int("hub_mirror_consumers", r.HubMirrorConsumers).
		Float64("heap_kib_per_gate", r.FleetHeapKiBPerGate).Msg("fleet watching")

	// First sight of every server: baseline v1, verified everywhere.
	t2 := time.Now()
	e.f.compact.Store(c.Compact)
	stopSampling := sampleFirstSight(ctx, e, r)
	faultsDone := make(chan struct{})
	if faulty {
		go func() {
			defer close(faultsDone)
			r.FirstSightFaults = firstSightFaults(ctx, e, time.Duration(float64(sz.servers)/c.Rates[0]/3*float64(time.Second)), log)
		}()
	} else {
		close(faultsDone)
	}
	firstSight(fctx, e.f, c.Rates[0])
	<-faultsDone
	waitFor(scaled(2*time.Minute, sz), func() bool { return rec.pendingCount() == 0 })
	stopSampling()
	r.FirstSightIncomplete = rec.dropExpectations()
	r.FirstSightSeconds = round2(time.Since(t2).Seconds())
	r.FirstSight = summarize(rec.take().allProxies)
	log.Info().Str("obs_to_every_proxy", r.FirstSight.String()).Int("incomplete", r.FirstSightIncomplete).Msg("first sight")
	r.FirstSightLedger = e.ledger(ctx, sz)
	log.Info().Interface("ledger", r.FirstSightLedger).Msg("nothing lost after first sight")

	for _, rate := range c.Rates {
		// Start from an idle pipeline: what an earlier phase queued is done.
		waitFor(scaled(2*time.Minute, sz), func() bool {
			return consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerFingerprint) == 0 &&
				consumerBacklog(ctx, e.js, bus.StreamFingerprints, bus.ConsumerDrift) == 0
		})
		st := steadyPhase(ctx, fctx, c, e, rec, rate)
		st.Ledger = e.ledger(ctx, sz)
		r.Steady = append(r.Steady, st)
		log.Info().Float64("rate", rate).Float64("obs_per_s", st.ObsRate).Float64("fingerprinted_per_s", st.FpRate).
			Str("obs_to_fp", st.ObsToFp.String()).Str("obs_to_verdict", st.ObsToVerdict.String()).
			Str("drift_to_every_proxy", st.DriftAll.String()).Str("status_write_to_proxy", st.KVToProxy.String()).
			Int("drifts_missing", st.DriftsMissing).Float64("cpu_us_identical", st.PipelineCPUIdentical).
			Float64("cpu_us_new", st.PipelineCPUNew).Interface("ledger", st.Ledger).Msg("steady")
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
	for _, st := range e.sites {
		b, _ := os.ReadFile(st.log)
		r.Violations += bytes.Count(b, []byte("Publish Violation")) + bytes.Count(b, []byte("Subscription Violation"))
	}
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
	st.PipelineCPUIdentical, st.PipelineCPUIdenticalBy = cpuPerListing(ctx, fctx, e, rate, window, true, idle)
	st.PipelineCPUNew, st.PipelineCPUNewBy = cpuPerListing(ctx, fctx, e, rate, window, false, idle)
	e.f.compact.Store(c.Compact)
	rec.take()
	return st
}

// firstSightFaults kills the status bucket's leader (a hub node) and
// drift-1 after a while into first sight, and restarts both 10 s later:
// first sight must still converge everywhere with nothing lost (the size's
// first_sight_incomplete and first_sight_nothing_lost say whether it did).
func firstSightFaults(ctx context.Context, e *env, after time.Duration, log zerolog.Logger) *faults {
	time.Sleep(after)
	f := &faults{AfterS: round2(after.Seconds()), DownS: 10}
	f.Node = streamLeader(ctx, e.js, "KV_"+bus.BucketStatus)
	if f.Node == "" {
		f.Node = "nats-1"
	}
	if err := e.c.kill(f.Node); err != nil {
		f.Error = err.Error()
		return f
	}
	e.svc.kill("drift-1")
	f.Drift = "drift-1"
	log.Info().Str("node", f.Node).Msg("first sight: killed the status bucket's leader and drift-1")
	time.Sleep(10 * time.Second)
	if err := e.c.restart(f.Node); err != nil {
		f.Error = err.Error()
	}
	if err := e.svc.start("drift-1"); err != nil {
		f.Error = strings.TrimSpace(f.Error + "; " + err.Error())
	}
	t := time.Now()
	if err := e.c.waitHealthy(60 * time.Second); err != nil {
		f.Error = err.Error()
	}
	f.NodeBackS = round2(time.Since(t).Seconds())
	log.Info().Interface("faults", f).Msg("first sight: node and drift-1 back")
	return f
}

// faults is what firstSightFaults did.
type faults struct {
	AfterS    float64 `json:"after_s"` // into first sight
	Node      string  `json:"nats_node_killed"`
	Drift     string  `json:"drift_instance_killed,omitempty"`
	DownS     float64 `json:"down_s"`
	NodeBackS float64 `json:"node_back_healthy_s"`
	Error     string  `json:"error,omitempty"`
}

// sampleFirstSight follows first sight until the returned func is called:
// the largest backlog of each pipeline consumer (where first sight queues)
// and each process group's CPU over it, as % of one core (what it costs).
func sampleFirstSight(ctx context.Context, e *env, r *result) (stop func()) {
	cpu0, t0 := cpuByGroup(e.pids()), time.Now()
	done, finished := make(chan struct{}), make(chan struct{})
	backlog := map[string]uint64{}
	go func() {
		defer close(finished)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for name, c := range map[string][2]string{
				"fingerprint": {bus.StreamObservations, bus.ConsumerFingerprint},
				"drift":       {bus.StreamFingerprints, bus.ConsumerDrift},
				"audit":       {bus.StreamObservations, bus.ConsumerAuditObservations},
			} {
				if n := consumerBacklog(ctx, e.js, c[0], c[1]); n < 1<<62 {
					backlog[name] = max(backlog[name], n)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		cpu1, el := cpuByGroup(e.pids()), time.Since(t0)
		r.FirstSightMaxBacklog = backlog
		r.FirstSightCPUPercent = map[string]float64{}
		for g, c := range cpu1 {
			r.FirstSightCPUPercent[g] = round1(100 * float64(c-cpu0[g]) / float64(el))
		}
	}
}

// cpuByGroup is the CPU time used so far by each group of processes: the
// hub's nodes, the leaf nodes, each service, ClickHouse and the fleet.
func cpuByGroup(pids map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		group := "hub"
		for _, g := range []string{"leaf", "fingerprint", "drift", "audit", "clickhouse", "fleet"} {
			if strings.HasPrefix(name, g) {
				group = g
			}
		}
		if c, err := procstat.CPUTime(pid); err == nil {
			out[group] += c
		}
	}
	return out
}

// pipelineCPUBy is the CPU time the fingerprint, drift (both instances)
// and audit processes used so far, by service.
func pipelineCPUBy(pids map[string]int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range pids {
		for _, svc := range []string{"fingerprint", "drift", "audit"} {
			if strings.HasPrefix(name, svc) {
				if c, err := procstat.CPUTime(pid); err == nil {
					out[svc] += c
				}
			}
		}
	}
	return out
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
func idleCPURate(ctx context.Context, e *env, d time.Duration) map[string]float64 {
	pipelineIdle(ctx, e)
	c0, t0 := pipelineCPUBy(e.pids()), time.Now()
	time.Sleep(d)
	c1, el := pipelineCPUBy(e.pids()), float64(time.Since(t0))
	out := map[string]float64{}
	for svc, c := range c1 {
		out[svc] = float64(c-c0[svc]) / el
	}
	return out
}

// cpuPerListing drives re-listings of unchanged manifests only, compact or
// whole, at rate for d, waits for the pipeline to drain, and returns the
// pipeline's CPU time per listing in microseconds, less the idle floor
// (idle, CPU per wall time) over the same time (0 when none was
// published).
func cpuPerListing(ctx, fctx context.Context, e *env, rate float64, d time.Duration, compact bool, idle map[string]float64) (float64, map[string]float64) {
	e.f.compact.Store(compact)
	pipelineIdle(ctx, e)
	c0, l0, t0 := pipelineCPUBy(e.pids()), e.f.listings.Load(), time.Now()
	drive(fctx, e.f, loadSpec{obs: rate}, d)
	time.Sleep(100 * time.Millisecond) // the publishers' linger
	pipelineIdle(ctx, e)
	c1, n := pipelineCPUBy(e.pids()), e.f.listings.Load()-l0
	if n <= 0 {
		return 0, nil
	}
	el := float64(time.Since(t0))
	by := map[string]float64{}
	total := 0.0
	for svc, c := range c1 {
		used := max(float64(c-c0[svc])-idle[svc]*el, 0) / float64(time.Microsecond) / float64(n)
		by[svc] = round1(used)
		total += used
	}
	return round1(total), by
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

// proxyURL is where a proxy of tenant connects: its tenant's site's leaf
// node, or the hub when the run has no sites.
func (e *env) proxyURL(tenant string) string {
	for _, s := range e.sites {
		if slices.Contains(s.tenants, tenant) {
			return s.url("proxy-" + tenant)
		}
	}
	return e.c.url("proxy-" + tenant)
}

// scaled is a timeout for a size: base up to 2,000 servers, growing in
// proportion beyond (the fleet's start, first sight and the pipeline's
// backlog grow with servers and gates on the same two cores).
func scaled(base time.Duration, sz size) time.Duration {
	return time.Duration(float64(base) * max(1, float64(sz.servers)/2000))
}

// fdsNeeded is what a size needs open at once in this process: each
// simulated publisher holds its outbox slot's lock file open (as a proxy
// does per fronted server), each proxy a connection, plus the harness's
// own (cluster, services, ClickHouse, logs).
func fdsNeeded(sz size, fronting int) uint64 {
	return uint64(sz.servers*fronting + sz.proxies + 2048)
}

// raiseOpenFiles lifts the process's open-file limit towards what the
// largest size needs, hard limit included when allowed (root with
// CAP_SYS_RESOURCE); a size that still does not fit fails on its own
// (runSize), the others run.
func raiseOpenFiles(c Config, log zerolog.Logger) {
	need := uint64(4096)
	for _, sz := range c.Sizes {
		need = max(need, fdsNeeded(sz, c.Fronting))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= need {
		return
	}
	from := lim.Cur
	want := syscall.Rlimit{Cur: need, Max: max(need, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
		log.Warn().Uint64("need", need).Uint64("hard_limit", lim.Max).Err(err).Msg("open-file limit cannot be raised to what the largest size needs")
	}
	log.Info().Uint64("from", from).Uint64("to", want.Cur).Msg("open-file limit")
}

// fleetProcs is how many processes the size's simulated proxies run in:
// --fleet-procs, or as few as fit under the open-file hard limit (each
// worker raises its own limit to it).
func fleetProcs(c Config, sz size) int {
	if c.FleetProcs > 0 {
		return c.FleetProcs
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max >= fdsNeeded(sz, c.Fronting) {
		return 1
	}
	per := max(int64(lim.Max)-2048, 1024)
	return int((int64(sz.servers*c.Fronting+sz.proxies) + per - 1) / per)
}

// fdLimitError says why a size cannot run in procs processes, nil when it
// can.
func fdLimitError(sz size, fronting, procs int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil
	}
	if procs > 1 {
		sz = size{servers: sz.servers / procs, proxies: sz.proxies / procs}
	}
	if need := fdsNeeded(sz, fronting); max(lim.Cur, lim.Max) < need {
		return fmt.Errorf("needs about %d open files in the fleet process (%d gates, each publisher's outbox lock, and %d connections), the limit is %d and the hard limit cannot be raised here (no CAP_SYS_RESOURCE): run as a user allowed to, or fewer gates", need, sz.servers*fronting, sz.proxies, lim.Cur)
	}
	return nil
}

// ledger is "nothing lost" at the end of a phase: what the simulated
// proxies handed to their publishers since the start, against the
// distinct rows the audit sink wrote to ClickHouse (it acks only after
// ClickHouse has them). Compact listings have a row each, as whole ones.
type ledger struct {
	ListingsIssued  int64  `json:"listings_issued"`
	CallsIssued     int64  `json:"calls_issued"`
	Published       uint64 `json:"publisher_published"` // events, a batch counting its calls
	Dropped         uint64 `json:"publisher_dropped"`
	AuditListRows   uint64 `json:"audit_list_rows"`
	AuditCallRows   uint64 `json:"audit_call_rows"`
	AuditVerdicts   uint64 `json:"audit_verdict_rows"`
	AuditPending    uint64 `json:"audit_consumer_unprocessed"`
	ListingsMissing int64  `json:"listings_missing"` // issued minus audit rows
	CallsMissing    int64  `json:"calls_missing"`
	Error           string `json:"error,omitempty"`
}

// ledger waits for the publishers' queues and the audit consumer to drain
// (bounded), then counts.
func (e *env) ledger(ctx context.Context, sz size) *ledger {
	l := &ledger{}
	if e.ch == nil {
		l.Error = "no audit sink (--audit=false)"
		return l
	}
	time.Sleep(100 * time.Millisecond) // the publishers' linger
	waitFor(scaled(90*time.Second, sz), func() bool {
		st := e.f.pubStats()
		return st.Queued == 0 && st.OutboxDepth == 0 &&
			consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerAuditObservations) == 0 &&
			consumerBacklog(ctx, e.js, bus.StreamVerdicts, bus.ConsumerAuditVerdicts) == 0
	})
	l.ListingsIssued, l.CallsIssued = e.f.listings.Load(), e.f.calls.Load()
	st := e.f.pubStats()
	l.Published, l.Dropped = st.Published, st.Dropped
	l.AuditPending = consumerBacklog(ctx, e.js, bus.StreamObservations, bus.ConsumerAuditObservations) +
		consumerBacklog(ctx, e.js, bus.StreamVerdicts, bus.ConsumerAuditVerdicts)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rows, err := e.ch.counts(cctx)
	if err != nil {
		l.Error = err.Error()
		return l
	}
	l.AuditListRows, l.AuditCallRows, l.AuditVerdicts = rows["list_observations"], rows["call_observations"], rows["verdicts"]
	l.ListingsMissing = l.ListingsIssued - int64(l.AuditListRows)
	l.CallsMissing = l.CallsIssued - int64(l.AuditCallRows)
	return l
}

// consumerFilters lists a stream's consumers by filter (a sample of at
// most 200, for the results: who watches the hub's status).
func consumerFilters(ctx context.Context, js jetstream.JetStream, stream string) ([]string, error) {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := js.Stream(c, stream)
	if err != nil {
		return nil, err
	}
	var out []string
	l := s.ListConsumers(c)
	for ci := range l.Info() {
		f := ci.Config.FilterSubject
		if len(ci.Config.FilterSubjects) > 0 {
			f = strings.Join(ci.Config.FilterSubjects, "|")
		}
		if len(out) < 200 {
			out = append(out, f)
		}
	}
	return out, l.Err()
}
