package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuTime reads a process's user+system CPU time from /proc.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields count
	// from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): utime is field 14, stime 15.
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// usage is a component's CPU and memory over a phase.
type usage struct {
	CPUPercent float64 `json:"cpu_percent"` // of one core, averaged over the phase
	RSSMiB     float64 `json:"rss_mib"`     // peak of the samples
}

// sampler follows processes' CPU time and RSS over a phase.
type sampler struct {
	mu      sync.Mutex // sample runs on a ticker while the phase ends
	start   time.Time
	cpu0    map[string]time.Duration
	peakRSS map[string]int64
	pids    func() map[string]int
}

func newSampler(pids func() map[string]int) *sampler {
	s := &sampler{start: time.Now(), cpu0: map[string]time.Duration{}, peakRSS: map[string]int64{}, pids: pids}
	for name, pid := range pids() {
		if t, err := cpuTime(pid); err == nil {
			s.cpu0[name] = t
		}
	}
	s.sample()
	return s
}

// sample records the current RSS of every process.
func (s *sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampleLocked()
}

func (s *sampler) sampleLocked() {
	for name, pid := range s.pids() {
		if r, err := rssBytes(pid); err == nil && r > s.peakRSS[name] {
			s.peakRSS[name] = r
		}
	}
}

// end returns each process's usage since newSampler.
func (s *sampler) end() map[string]usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampleLocked()
	el := time.Since(s.start)
	out := map[string]usage{}
	for name, pid := range s.pids() {
		t, err := cpuTime(pid)
		t0, ok := s.cpu0[name]
		if err != nil || !ok {
			continue
		}
		out[name] = usage{CPUPercent: round1(100 * float64(t-t0) / float64(el)), RSSMiB: round1(float64(s.peakRSS[name]) / (1 << 20))}
	}
	return out
}

// loadAvg is the machine's 1-minute load average (0 when unreadable).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
