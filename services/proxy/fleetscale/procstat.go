package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/procstat"
)

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
		if t, err := procstat.CPUTime(pid); err == nil {
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
		if r, err := procstat.RSSBytes(pid); err == nil && r > s.peakRSS[name] {
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
		t, err := procstat.CPUTime(pid)
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
