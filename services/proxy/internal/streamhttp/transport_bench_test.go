package streamhttp

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/proxy/internal/session"
)

// BenchmarkUpstreamTransport: the proxy's own upstream client (h1, ADR
// 0005, the default) against net/http's Transport configured as h1's
// fallback is, on the whole proxied path: tools/call (echo) on a real
// Go-SDK server over Streamable HTTP with sessions, directly, through a
// proxy using h1 and through a proxy using net/http's Transport, in the same
// run. Latency: sequential calls, each step calling the three paths in
// rotating order. Throughput: 32 callers sharing one session, the two
// proxies' rounds interleaved (h1, std, std, h1). std-over-h1 ratios above
// 1 mean h1 is faster.
func BenchmarkUpstreamTransport(b *testing.B) {
	for _, bc := range []struct {
		name string
		mode mode
	}{
		{"answer=sse", modes[0]},
		{"answer=json", modes[1]},
	} {
		b.Run(bc.name, func(b *testing.B) { benchTransports(b, bc.mode) })
	}
}

func benchTransports(b *testing.B, m mode) {
	const (
		warmup  = 200
		workers = 32
		rounds  = 4
	)
	n := max(b.N, 2000)
	total := max(b.N, 5000)
	r := newRigLog(b, m, zerolog.Nop()) // its proxy uses the default client: h1

	// A second proxy in front of the same upstream, with net/http's
	// Transport as the whole upstream client (what h1 falls back to).
	std := &http.Transport{
		Proxy: http.ProxyFromEnvironment, MaxIdleConns: 256, MaxIdleConnsPerHost: 64,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ForceAttemptHTTP2: true,
	}
	b.Cleanup(std.CloseIdleConnections)
	p, err := New(Config{Client: &http.Client{Transport: std, CheckRedirect: noRedirects}, Relist: 200 * time.Millisecond, Log: zerolog.Nop()},
		[]Upstream{{ID: "ev", URL: r.direct, Gate: r.gate, Observer: r.gate, Session: session.Config{Timeout: 5 * time.Second}}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p)
	b.Cleanup(func() { srv.Close(); p.Close() })

	client := func() *http.Client {
		tr := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers, IdleConnTimeout: time.Minute}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	paths := []*mcp.ClientSession{
		r.connectWith(b, r.direct, client()),
		r.connectWith(b, r.via, client()),
		r.connectWith(b, srv.URL+"/ev/mcp", client()),
	}
	const direct, viaH1, viaStd = 0, 1, 2
	for _, cs := range paths[1:] {
		poll.Eventually(b, 10*time.Second, func() error { return echo(cs, "ready") })
	}
	for range warmup {
		for _, cs := range paths {
			if err := echo(cs, "warm"); err != nil {
				b.Fatal(err)
			}
		}
	}

	b.ResetTimer()
	lat := [3][]time.Duration{make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)}
	for i := range n {
		for k := range 3 {
			p := (i + k) % 3
			d, err := timed(paths[p])
			if err != nil {
				b.Fatal(err)
			}
			lat[p][i] = d
		}
	}
	for _, l := range lat {
		slices.Sort(l)
	}

	per := total / (rounds / 2)
	var h1t, stdt time.Duration
	for i := range rounds {
		onStd := i%4 == 1 || i%4 == 2
		cs := paths[viaH1]
		if onStd {
			cs = paths[viaStd]
		}
		d, err := concurrent(cs, workers, per)
		if err != nil {
			b.Fatal(err)
		}
		if onStd {
			stdt += d
		} else {
			h1t += d
		}
	}
	b.StopTimer()

	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	p50 := n / 2
	h1Added, stdAdded := lat[viaH1][p50]-lat[direct][p50], lat[viaStd][p50]-lat[direct][p50]
	b.ReportMetric(us(lat[direct][p50]), "direct-p50-us")
	b.ReportMetric(us(lat[viaH1][p50]), "h1-p50-us")
	b.ReportMetric(us(lat[viaStd][p50]), "std-p50-us")
	b.ReportMetric(us(h1Added), "h1-added-p50-us")
	b.ReportMetric(us(stdAdded), "std-added-p50-us")
	b.ReportMetric(float64(lat[viaStd][p50])/float64(lat[viaH1][p50]), "std/h1-p50-ratio")
	calls := float64(per * (rounds / 2))
	b.ReportMetric(calls/h1t.Seconds(), "h1-calls/s")
	b.ReportMetric(calls/stdt.Seconds(), "std-calls/s")
	b.ReportMetric(stdt.Seconds()/h1t.Seconds(), "std/h1-time-ratio")
}
