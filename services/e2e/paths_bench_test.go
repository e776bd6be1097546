package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/procstat"
)

// Paths of a proxy benchmark, in the order measurePaths takes them.
const (
	pathDirect = iota // the client talks to the server
	pathRelay         // through a plain relay process: the least any process in between adds
	pathFloor         // through a minimal net/http proxy process (HTTP only): the least a net/http proxy adds
	pathProxy         // through the proxy command
	numPaths
)

// measurePaths measures the direct, relay and proxy paths in the same run
// (measureAll).
func measurePaths(b *testing.B, n, rounds, per int, pids [numPaths]int, call func(k, i int) error, concurrent func(k, calls int) time.Duration) {
	measureAll(b, []int{pathDirect, pathRelay, pathProxy}, n, rounds, per, pids, call, concurrent)
}

// measureFloorPaths measures all four paths in the same run (measureAll),
// the floor's figures and the proxy's against them reported too.
func measureFloorPaths(b *testing.B, n, rounds, per int, pids [numPaths]int, call func(k, i int) error, concurrent func(k, calls int) time.Duration) {
	measureAll(b, []int{pathDirect, pathRelay, pathFloor, pathProxy}, n, rounds, per, pids, call, concurrent)
}

// measureAll measures the paths ks in the same run. Latency: n
// sequential steps, each calling every path once, the paths taking turns at
// going first (call makes call i on path k). Throughput: rounds rounds, each
// giving every path per calls from concurrent callers, forward then
// backward (concurrent makes them and returns how long they took), so that
// a noisy machine burdens all alike. It reports the figures as metrics,
// with the proxy's against the relay's (the goals are ratios to it: added
// p50, added p99, throughput) and, for each path whose process id pids
// holds, the CPU time its process spent per call over the whole
// measurement, read from the kernel's counters (cpuTime), which a shared
// machine disturbs less than wall time.
//
// With the floor among ks it also reports the floor's added p50, p99,
// throughput and CPU per call, and the proxy's as multiples of them
// (proxy/floor-p50-x, proxy/floor-p99-x, proxy/floor-throughput-x,
// proxy/floor-cpu-x; the goal: p50 and CPU per call at most 1.1x).
func measureAll(b *testing.B, ks []int, n, rounds, per int, pids [numPaths]int, call func(k, i int) error, concurrent func(k, calls int) time.Duration) {
	var cpu0 [numPaths]time.Duration
	for k, pid := range pids {
		if pid != 0 {
			cpu0[k] = cpuTime(b, pid)
		}
	}
	var lat [numPaths][]time.Duration
	for _, k := range ks {
		lat[k] = make([]time.Duration, n)
	}
	for i := range n {
		for j := range ks {
			k := ks[(i+j)%len(ks)]
			start := time.Now()
			err := call(k, i)
			lat[k][i] = time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, l := range lat {
		slices.Sort(l)
	}
	var took [numPaths]time.Duration
	for i := range rounds {
		for j := range ks {
			k := ks[j]
			if i%2 == 1 {
				k = ks[len(ks)-1-j]
			}
			took[k] += concurrent(k, per)
		}
	}
	b.StopTimer()
	if b.Failed() {
		b.FailNow()
	}
	calls := float64(n + per*rounds) // of each path
	var cpuPerCall [numPaths]float64
	for k, pid := range pids {
		if pid != 0 {
			cpuPerCall[k] = float64(cpuTime(b, pid)-cpu0[k]) / float64(time.Microsecond) / calls
		}
	}
	rate := func(k int) float64 { return float64(per*rounds) / took[k].Seconds() }
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50, p99 := n/2, n*99/100
	dl, rl, pl := lat[pathDirect], lat[pathRelay], lat[pathProxy]
	b.ReportMetric(us(dl[p50]), "direct-p50-us")
	b.ReportMetric(us(dl[p99]), "direct-p99-us")
	b.ReportMetric(us(pl[p50]), "proxy-p50-us")
	b.ReportMetric(us(pl[p99]), "proxy-p99-us")
	b.ReportMetric(us(pl[p50]-dl[p50]), "added-p50-us")
	b.ReportMetric(us(pl[p99]-dl[p99]), "added-p99-us")
	b.ReportMetric(us(rl[p50]-dl[p50]), "relay-added-p50-us")
	b.ReportMetric(us(rl[p99]-dl[p99]), "relay-added-p99-us")
	b.ReportMetric(rate(pathDirect), "direct-calls/s")
	b.ReportMetric(rate(pathProxy), "proxy-calls/s")
	b.ReportMetric(rate(pathProxy)/rate(pathDirect), "throughput-ratio-c32")
	b.ReportMetric(rate(pathRelay)/rate(pathDirect), "relay-throughput-ratio-c32")
	b.ReportMetric(float64(pl[p50]-dl[p50])/float64(rl[p50]-dl[p50]), "added-p50-x-relay")
	b.ReportMetric(float64(pl[p99]-dl[p99])/float64(rl[p99]-dl[p99]), "added-p99-x-relay")
	b.ReportMetric(rate(pathProxy)/rate(pathRelay), "throughput-x-relay")
	if pids[pathRelay] != 0 && pids[pathProxy] != 0 {
		b.ReportMetric(cpuPerCall[pathRelay], "relay-cpu-us/call")
		b.ReportMetric(cpuPerCall[pathProxy], "proxy-cpu-us/call")
		b.ReportMetric(cpuPerCall[pathProxy]/cpuPerCall[pathRelay], "cpu-x-relay")
	}
	if lat[pathFloor] == nil {
		return
	}
	fl := lat[pathFloor]
	b.ReportMetric(us(fl[p50]-dl[p50]), "floor-added-p50-us")
	b.ReportMetric(us(fl[p99]-dl[p99]), "floor-added-p99-us")
	b.ReportMetric(rate(pathFloor)/rate(pathDirect), "floor-throughput-ratio-c32")
	b.ReportMetric(float64(pl[p50]-dl[p50])/float64(fl[p50]-dl[p50]), "proxy/floor-p50-x")
	b.ReportMetric(float64(pl[p99]-dl[p99])/float64(fl[p99]-dl[p99]), "proxy/floor-p99-x")
	b.ReportMetric(rate(pathProxy)/rate(pathFloor), "proxy/floor-throughput-x")
	if pids[pathFloor] != 0 && pids[pathProxy] != 0 {
		b.ReportMetric(cpuPerCall[pathFloor], "floor-cpu-us/call")
		b.ReportMetric(cpuPerCall[pathProxy]/cpuPerCall[pathFloor], "proxy/floor-cpu-x")
	}
}

// cpuTime is the CPU time process pid has spent so far (procstat).
func cpuTime(b *testing.B, pid int) time.Duration {
	t, err := procstat.CPUTime(pid)
	if err != nil {
		b.Fatalf("reading the CPU time of process %d: %v", pid, err)
	}
	return t
}
