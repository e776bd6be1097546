// Package opstest helps tests of a service's ops endpoints: it finds the
// address the ops listener reported in the logs, scrapes and strictly parses
// /metrics, polls a metric until it reaches a value, takes NATS away and
// back while watching readiness, and reads the metric
// names docs/metrics.md documents for a service.
package opstest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// Wait bounds every poll of this package: a condition not met by then fails
// the test with what was last seen.
const Wait = 30 * time.Second

// Addr waits until logs (the service's JSON log so far) holds the
// "ops listening" line and returns its addr.
func Addr(t testing.TB, logs func() string) string {
	t.Helper()
	var addr string
	poll.Eventually(t, Wait, func() error {
		for line := range strings.Lines(logs()) {
			var rec struct{ Message, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "ops listening" && rec.Addr != "" {
				addr = rec.Addr
				return nil
			}
		}
		return fmt.Errorf("opstest: no \"ops listening\" log line; logs:\n%s", logs())
	})
	return addr
}

var client = &http.Client{Timeout: 10 * time.Second}

// Get fetches http://addr/path and returns the status and body.
func Get(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	res, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("opstest: GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("opstest: reading GET %s: %v", path, err)
	}
	return res.StatusCode, string(body)
}

// WaitStatus polls http://addr/path until it answers status.
func WaitStatus(t testing.TB, addr, path string, status int) string {
	t.Helper()
	var body string
	poll.Eventually(t, Wait, func() error {
		var got int
		if got, body = Get(t, addr, path); got != status {
			return fmt.Errorf("opstest: GET %s = %d %q, want %d", path, got, body, status)
		}
		return nil
	})
	return body
}

// Families is a parsed scrape, by metric name.
type Families map[string]*dto.MetricFamily

// Scrape fetches http://addr/metrics and parses it strictly: the Prometheus
// text format with legacy (portable) metric and label names.
func Scrape(t testing.TB, addr string) Families {
	t.Helper()
	status, body := Get(t, addr, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("opstest: GET /metrics = %d %q", status, body)
	}
	fams, err := Parse(body)
	if err != nil {
		t.Fatalf("opstest: /metrics: %v", err)
	}
	return fams
}

// Parse parses the Prometheus text format strictly.
func Parse(text string) (Families, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return Families(fams), nil
}

// Value is the value of the series of name with exactly the given labels
// (name, value pairs): a counter's or gauge's value, a histogram's count.
// ok is false if there is no such series.
func (f Families) Value(name string, labels ...string) (v float64, ok bool) {
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if !sameLabels(m.GetLabel(), labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func sameLabels(got []*dto.LabelPair, want []string) bool {
	if len(got)*2 != len(want) {
		return false
	}
	for i := 0; i+1 < len(want); i += 2 {
		if !slices.ContainsFunc(got, func(l *dto.LabelPair) bool { return l.GetName() == want[i] && l.GetValue() == want[i+1] }) {
			return false
		}
	}
	return true
}

// Names are the metric names of the scrape that start with prefix, sorted.
func (f Families) Names(prefix string) []string {
	var names []string
	for name := range f {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// WaitValue scrapes addr until the series of name with labels has value want,
// and returns that scrape.
func WaitValue(t testing.TB, addr string, want float64, name string, labels ...string) Families {
	t.Helper()
	var fams Families
	poll.Eventually(t, Wait, func() error {
		fams = Scrape(t, addr)
		if got, ok := fams.Value(name, labels...); !ok || got != want {
			return fmt.Errorf("opstest: %s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
		return nil
	})
	return fams
}

var docName = regexp.MustCompile("^\\|\\s*`(mcpdrift_[a-z0-9_]+)`")

// DocNames reads the metrics docs/metrics.md (at path) documents under the
// given "## " sections: the names of the first column of their tables,
// sorted.
func DocNames(t testing.TB, path string, sections ...string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opstest: %v", err)
	}
	defer f.Close()
	var names []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			in = slices.Contains(sections, strings.TrimSpace(h))
			continue
		}
		if m := docName.FindStringSubmatch(line); in && m != nil {
			names = append(names, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("opstest: reading %s: %v", path, err)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Diff describes the names only in doc and only in code, or is "" when the
// two sets are equal.
func Diff(doc, code []string) string {
	var b strings.Builder
	for _, n := range doc {
		if !slices.Contains(code, n) {
			fmt.Fprintf(&b, "documented but not exported: %s\n", n)
		}
	}
	for _, n := range code {
		if !slices.Contains(doc, n) {
			fmt.Fprintf(&b, "exported but not documented: %s\n", n)
		}
	}
	return b.String()
}

// NATSOutage stops srv, the NATS server of the service whose ops listener
// is at addr, and requires /readyz to fail naming the NATS check; then it
// starts NATS again on the same port with the same store and requires
// /readyz to pass again.
func NATSOutage(t testing.TB, addr string, srv *natstest.Server) {
	t.Helper()
	opts := natstest.Options(t)
	opts.Port, opts.StoreDir = srv.Addr().(*net.TCPAddr).Port, srv.StoreDir
	srv.Stop()
	if body := WaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable); !strings.Contains(body, "nats: not connected to NATS") {
		t.Errorf("GET /readyz without NATS = %q, want it to name the NATS check", body)
	}
	natstest.StartWith(t, opts)
	WaitStatus(t, addr, "/readyz", http.StatusOK)
}

// Require reports, without stopping the test, a metric that the families
// do not hold with the value want (WaitValue's arguments, without waiting).
func (f Families) Require(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	if got, ok := f.Value(name, labels...); !ok || got != want {
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
	}
}
