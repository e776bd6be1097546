package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/fleet"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// Fleet workers. Every simulated publisher holds its outbox slot's lock
// file open, as a proxy does for every server it fronts, so one process
// simulating a large fleet needs more open files than a container may
// allow (40,000 gates: about 43,000). The fleet is then spread over worker
// processes (fleetscale --fleet-worker), each under its own limit: a
// worker runs the proxies given to it (connections, status watches, gates,
// publishers) exactly as the in-process fleet does, publishes what the
// harness tells it to, and reports each gate's log line (when a proxy
// learned a status) with the time it was written, and its counters on
// request. The harness keeps the layout, the load and the recorder.
//
// The protocol is JSON lines: the harness writes a workerSpec, then
// workerOps; the worker writes workerEvents.

// workerEnv marks a fleet worker's process (a test binary has no
// --fleet-worker flag of its own: its TestMain looks at this).
const workerEnv = "MCPDRIFT_FLEET_WORKER"

// workerSpec is what a worker runs: the layout's parameters (it rebuilds
// the same layout from the same captures) and the proxies it owns.
type workerSpec struct {
	Captures                            string
	Servers, Proxies, Tenants, Fronting int
	Own                                 []string          // proxy ids
	URLs                                map[string]string // by tenant
	Outbox                              string
	Inflight                            int
	Stall                               time.Duration
}

type workerOp struct {
	Op       string `json:"op"` // listing, seen, call, stats
	Proxy    string `json:"p,omitempty"`
	Server   string `json:"s,omitempty"`
	Hash     string `json:"h,omitempty"`
	Manifest []byte `json:"m,omitempty"`
}

type workerEvent struct {
	Ev    string       `json:"ev"` // ready, failed, gate, warn, stats
	Proxy string       `json:"p,omitempty"`
	AtNs  int64        `json:"t,omitempty"`
	Line  string       `json:"line,omitempty"`
	Err   string       `json:"err,omitempty"`
	Stats *workerStats `json:"stats,omitempty"`
}

type workerStats struct {
	Up, Total  int
	Pub        fleet.Stats
	HeapInuse  uint64 // after the fleet started, less before
	Goroutines int
}

// runWorker is fleetscale --fleet-worker: it reads its spec and ops on
// stdin and writes events on stdout until stdin closes.
func runWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	raiseToHard()
	dec := json.NewDecoder(bufio.NewReaderSize(in, 1<<20))
	var spec workerSpec
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("reading the worker spec: %w", err)
	}
	var wmu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(e workerEvent) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = enc.Encode(e)
	}
	manifests, _, err := loadManifests(spec.Captures)
	if err != nil {
		return err
	}
	servers, proxies, _ := layout(spec.Servers, spec.Proxies, spec.Tenants, spec.Fronting, manifests)
	own := map[string]bool{}
	for _, id := range spec.Own {
		own[id] = true
	}
	var mine []*proxy
	for _, p := range proxies {
		if own[p.id] {
			mine = append(mine, p)
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	f := &fleetSim{proxies: mine, servers: servers, events: emit}
	fctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); f.close() }()
	if err := f.start(fctx, func(t string) string { return spec.URLs[t] }, spec.Outbox, spec.Inflight, spec.Stall); err != nil {
		emit(workerEvent{Ev: "failed", Err: err.Error()})
		return err
	}
	byID := map[string]*proxy{}
	for _, p := range mine {
		byID[p.id] = p
	}
	emit(workerEvent{Ev: "ready"})
	started := false
	for {
		var op workerOp
		if err := dec.Decode(&op); err != nil {
			return nil // the harness is done
		}
		p := byID[op.Proxy]
		switch op.Op {
		case "listing":
			if pub := p.pubs[op.Server]; pub != nil {
				pub.Listing(session.Listed{Variant: variant}, op.Manifest)
			}
		case "seen":
			if pub := p.pubs[op.Server]; pub != nil {
				pub.Seen(session.Listed{Variant: variant, Hash: op.Hash})
			}
		case "call":
			if pub := p.pubs[op.Server]; pub != nil {
				pub.Call(session.Call{Tool: "read_file", Latency: 3 * time.Millisecond, ArgsDigest: callDigest})
			}
		case "stats":
			up, total := f.watching()
			st := &workerStats{Up: up, Total: total, Pub: f.pubStats(), Goroutines: runtime.NumGoroutine() - g0}
			if !started && up == total {
				// The fleet's memory once every watch is up, measured once.
				runtime.GC()
				runtime.ReadMemStats(&m1)
				started = true
			}
			if started {
				st.HeapInuse = m1.HeapInuse - min(m0.HeapInuse, m1.HeapInuse)
			}
			emit(workerEvent{Ev: "stats", Stats: st})
		}
	}
}

// raiseToHard lifts a worker's open-file limit to the hard limit.
func raiseToHard() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// worker is the harness's side of one fleet worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex // serializes ops
	enc   *json.Encoder
	w     *bufio.Writer
	stats chan *workerStats
	ready chan error
	done  chan struct{}
}

// startWorkers starts n workers, proxy i to worker i%n, and waits until
// each has started its proxies (or failed). Gate lines go to the
// recorder through gateSink.
func (f *fleetSim) startWorkers(ctx context.Context, n int, urlFor func(string) string, outbox string, inflight int, stall time.Duration, spec workerSpec) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	own := make([][]string, n)
	for i, p := range f.proxies {
		own[i%n] = append(own[i%n], p.id)
	}
	spec.URLs = map[string]string{}
	for _, p := range f.proxies {
		spec.URLs[p.tenant] = urlFor(p.tenant)
	}
	spec.Outbox, spec.Inflight, spec.Stall = outbox, max(inflight/n, 1), stall
	for i := range n {
		cmd := exec.CommandContext(ctx, exe, "--fleet-worker")
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting fleet worker %d: %w", i, err)
		}
		bw := bufio.NewWriterSize(stdin, 1<<20)
		w := &worker{cmd: cmd, stdin: stdin, w: bw, enc: json.NewEncoder(bw), stats: make(chan *workerStats, 1), ready: make(chan error, 1), done: make(chan struct{})}
		s := spec
		s.Own = own[i]
		if err := w.send(s); err != nil {
			return err
		}
		go w.read(stdout, f)
		f.workers = append(f.workers, w)
		for _, id := range own[i] {
			f.workerOf[id] = w
		}
	}
	for i, w := range f.workers {
		select {
		case err := <-w.ready:
			if err != nil {
				return fmt.Errorf("fleet worker %d: %w", i, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *worker) send(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(v); err != nil {
		return err
	}
	return w.w.Flush()
}

// read takes the worker's events until it exits.
func (w *worker) read(r io.Reader, f *fleetSim) {
	defer close(w.done)
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	readied := false
	for {
		var e workerEvent
		if err := dec.Decode(&e); err != nil {
			if !readied {
				w.ready <- fmt.Errorf("exited before its proxies started: %v", err)
			}
			return
		}
		switch e.Ev {
		case "ready":
			readied = true
			w.ready <- nil
		case "failed":
			readied = true
			w.ready <- fmt.Errorf("%s", e.Err)
		case "gate":
			(&gateLog{proxy: e.Proxy, rec: f.rec, warns: &f.warns}).write([]byte(e.Line), time.Unix(0, e.AtNs))
		case "warn":
			keepSample([]byte(e.Line))
			f.warns.Add(1)
		case "stats":
			select {
			case w.stats <- e.Stats:
			default:
			}
		}
	}
}

// workerStatsAll asks every worker for its counters.
func (f *fleetSim) workerStatsAll() []*workerStats {
	var out []*workerStats
	for _, w := range f.workers {
		if w.send(workerOp{Op: "stats"}) != nil {
			continue
		}
		select {
		case st := <-w.stats:
			out = append(out, st)
		case <-w.done:
		case <-time.After(30 * time.Second):
		}
	}
	return out
}

// closeWorkers ends the workers (stdin closed: they close their
// publishers and connections and exit) and waits for them.
func (f *fleetSim) closeWorkers() {
	for _, w := range f.workers {
		w.mu.Lock()
		_ = w.w.Flush()
		_ = w.stdin.Close()
		w.mu.Unlock()
	}
	for _, w := range f.workers {
		select {
		case <-w.done:
		case <-time.After(time.Minute):
			_ = w.cmd.Process.Kill()
		}
		_ = w.cmd.Wait()
	}
}

// lineForwarder is a worker's log writer of gates (gate) or of
// publishers and connections (warn): each line goes to the harness.
type lineForwarder struct {
	ev     string
	proxy  string
	events func(workerEvent)
}

func (l *lineForwarder) Write(p []byte) (int, error) {
	l.events(workerEvent{Ev: l.ev, Proxy: l.proxy, AtNs: time.Now().UnixNano(), Line: string(p)})
	return len(p), nil
}
