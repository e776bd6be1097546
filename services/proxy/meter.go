package main

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// loggedMeter counts what sessions withhold and drop (next) and logs each
// drop at warn, at most once per code and server every dropLogEvery, with
// how many were dropped since: a hostile upstream cannot flood the log,
// and an operator still sees that one is sending what the proxy cannot
// judge (docs/threat-model.md).
type loggedMeter struct {
	session.Meter
	log zerolog.Logger

	mu     sync.Mutex
	last   map[session.Code]time.Time
	missed map[session.Code]int
}

const dropLogEvery = 10 * time.Second

func newLoggedMeter(next session.Meter, log zerolog.Logger) *loggedMeter {
	return &loggedMeter{Meter: next, log: log, last: map[session.Code]time.Time{}, missed: map[session.Code]int{}}
}

func (m *loggedMeter) Dropped(code session.Code) {
	m.Meter.Dropped(code)
	m.mu.Lock()
	now := time.Now()
	if now.Sub(m.last[code]) < dropLogEvery {
		m.missed[code]++
		m.mu.Unlock()
		return
	}
	since := m.missed[code]
	m.last[code], m.missed[code] = now, 0
	m.mu.Unlock()
	m.log.Warn().Str("code", string(code)).Int("dropped_since_last_log", since).Msg("upstream message dropped: the proxy could not judge it")
}
