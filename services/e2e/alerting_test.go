package e2e

// The monitoring that deploy/ ships: the Prometheus alerting rules
// (deploy/prometheus) and the Grafana dashboards (deploy/grafana). They
// are tested here, beside the other tests that run the real commands,
// because the one check that matters most needs them all: every metric a
// rule or a panel names must be one the services export, under that name
// and with those labels, or the alert never fires and the panel stays
// empty without anyone noticing.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const (
	prometheusDir = "../../deploy/prometheus"
	rulesFile     = "mcpdrift.rules.yml"
	rulesTestFile = "mcpdrift.rules.test.yml"
	dashboardsDir = "../../deploy/grafana/dashboards"
)

// promtool finds promtool, or fails the test saying how to install it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: run `make deps` (scripts/deps.d/prometheus.sh installs it with Debian's prometheus package: apt-get install prometheus)")
	}
	return p
}

// runPromtool runs promtool with args in dir and fails the test with its
// output when it fails.
func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// query is one PromQL expression of the monitoring and where it is.
type query struct {
	where, expr string
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Record, Expr string
			Annotations         map[string]string
		}
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(prometheusDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

// ruleQueries are the expressions of the alerting rules.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{rulesFile + ": " + r.Alert + r.Record, r.Expr})
		}
	}
	if len(qs) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return qs
}

// dashboard is the part of a Grafana dashboard the tests read: panels,
// possibly inside collapsed rows, and their targets.
type dashboard struct {
	UID, Title string
	Panels     []panel
}

type panel struct {
	Title   string
	Type    string
	Panels  []panel // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string
	}
}

// dashboardQueries are the expressions of every panel of every dashboard.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboardsDir, err)
	}
	var qs []query
	uids := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: a dashboard needs a uid and a title (provisioning keys it by uid)", f)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s have the same uid %q", f, other, d.UID)
		}
		uids[d.UID] = f
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				if p.Type != "row" && len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", filepath.Base(f), p.Title)
				}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s: panel %q, query %s is empty", filepath.Base(f), p.Title, tg.RefID)
					}
					qs = append(qs, query{fmt.Sprintf("%s: panel %q, query %s", filepath.Base(f), p.Title, tg.RefID), tg.Expr})
				}
			}
		}
		walk(d.Panels)
	}
	return qs
}

// TestAlertingRules: promtool accepts the rules and the example
// configuration, the rules pass their unit tests, every alert has a test
// that shows it firing and one that shows it silent, and every dashboard
// query is PromQL that promtool parses.
func TestAlertingRules(t *testing.T) {
	runPromtool(t, prometheusDir, "check", "rules", rulesFile)
	runPromtool(t, prometheusDir, "check", "config", "prometheus.yml")
	runPromtool(t, prometheusDir, "test", "rules", rulesTestFile)

	data, err := os.ReadFile(filepath.Join(prometheusDir, rulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	anchors := docAnchors(t, "docs/operations.md")
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: alert %s needs a test showing it firing (%v) and one showing it silent (%v)", rulesTestFile, r.Alert, firing[r.Alert], silent[r.Alert])
			}
			rb, ok := strings.CutPrefix(r.Annotations["runbook"], "docs/operations.md#")
			if !ok || !anchors[rb] {
				t.Errorf("%s: alert %s: runbook %q is not a section of docs/operations.md", rulesFile, r.Alert, r.Annotations["runbook"])
			}
			if !strings.Contains(readRepo(t, "docs/operations.md"), "`"+r.Alert+"`") {
				t.Errorf("docs/operations.md does not explain alert %s", r.Alert)
			}
		}
	}

	// The dashboards' queries, as recording rules: promtool parses them.
	var rf strings.Builder
	rf.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range dashboardQueries(t) {
		expr, _ := json.Marshal(q.expr) // a JSON string is a YAML string
		fmt.Fprintf(&rf, "      - record: dashboard_query_%d\n        expr: %s\n", i, expr)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboards.rules.yml"), []byte(rf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboards.rules.yml")
}

// docAnchors are the anchors of a Markdown file's headings, as GitHub
// makes them: lower case, punctuation dropped, spaces to hyphens.
func docAnchors(t *testing.T, rel string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	fenced := false
	for line := range strings.Lines(readRepo(t, rel)) {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		h := strings.TrimLeft(line, "#")
		if fenced || len(h) == len(line) || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

// exported is what the services export: each series name (a histogram's
// _bucket, _sum and _count) with its label names and the values each took.
type exported map[string]map[string]map[string]bool

// prometheusLabels are the labels Prometheus adds to every series it
// scrapes; prometheusSeries the series it makes itself, with their labels.
var (
	prometheusLabels = []string{"job", "instance"}
	prometheusSeries = map[string][]string{"up": prometheusLabels}
)

func (e exported) add(fams opstest.Families) {
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{name}
			if m.Histogram != nil {
				names = []string{name + "_bucket", name + "_sum", name + "_count"}
			}
			for _, n := range names {
				if e[n] == nil {
					e[n] = map[string]map[string]bool{}
				}
				for l, v := range labels {
					if e[n][l] == nil {
						e[n][l] = map[string]bool{}
					}
					e[n][l][v] = true
				}
				if n == name+"_bucket" {
					e[n]["le"] = map[string]bool{"+Inf": true}
				}
			}
		}
	}
}

// problems lists what q names that the services do not export: a metric,
// a label of a matcher, a value an equality or regex matcher asks for,
// or a grouping label that none of the expression's metrics has.
func (e exported) problems(q query) []string {
	refs, err := parsePromQL(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", q.where, err)}
	}
	if len(refs.selectors) == 0 {
		return []string{fmt.Sprintf("%s: names no metric: %s", q.where, q.expr)}
	}
	var out []string
	labelsOf := map[string]bool{}
	for _, l := range prometheusLabels {
		labelsOf[l] = true
	}
	for _, s := range refs.selectors {
		if extra, ok := prometheusSeries[s.name]; ok {
			for _, m := range s.matchers {
				if !slices.Contains(extra, m.label) {
					out = append(out, fmt.Sprintf("%s: %s has no label %s", q.where, s.name, m.label))
				}
			}
			continue
		}
		labels, ok := e[s.name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: no service exports %s", q.where, s.name))
			continue
		}
		for l := range labels {
			labelsOf[l] = true
		}
		for _, m := range s.matchers {
			if slices.Contains(prometheusLabels, m.label) {
				continue
			}
			values, ok := labels[m.label]
			if !ok {
				out = append(out, fmt.Sprintf("%s: %s has no label %s", q.where, s.name, m.label))
				continue
			}
			if !matchesSome(m, values) {
				out = append(out, fmt.Sprintf("%s: no series of %s has %s%s%q", q.where, s.name, m.label, m.op, m.value))
			}
		}
	}
	for _, l := range refs.grouping {
		if !labelsOf[l] {
			out = append(out, fmt.Sprintf("%s: groups by %s, a label none of its metrics has", q.where, l))
		}
	}
	return out
}

// matchesSome reports whether a matcher that selects (= and =~) selects
// one of the values exported; negative matchers select what is not there,
// and are not checked.
func matchesSome(m matcher, values map[string]bool) bool {
	switch m.op {
	case "=":
		return values[m.value]
	case "=~":
		re, err := regexp.Compile("^(?:" + m.value + ")$")
		if err != nil {
			return false
		}
		for v := range values {
			if re.MatchString(v) {
				return true
			}
		}
		return false
	}
	return true
}

// TestMonitoringNamesExportedMetrics runs the real commands (fingerprint,
// drift, audit with a real ClickHouse, notify with a webhook, a proxy in HTTP mode), scrapes each one's
// /metrics, and requires every metric, label and label value that an
// alerting rule or a dashboard query names to be among what they export.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	queries := append(ruleQueries(t), dashboardQueries(t)...)
	ch := chtest.Shared(t)
	db := ch.Database(t)
	b := natstest.StartBus(t)
	natsURL := b.Server.ClientURL()
	addrs := map[string]string{}
	for _, svc := range []string{"fingerprint", "drift", "audit", "notify", "proxy"} {
		addrs[svc] = "127.0.0.1:" + freePort(t)
	}
	env := func(svc string, more ...string) []string {
		return append([]string{"MCPDRIFT_NATS_URL=" + natsURL, "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_OPS_ADDR=" + addrs[svc]}, more...)
	}
	runService(t, "fingerprint", env("fingerprint")...)
	runService(t, "drift", env("drift", "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=ops:read:ops-token-0123456789")...)
	runService(t, "audit", env("audit", "MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr, "MCPDRIFT_AUDIT_DATABASE="+db)...)
	// notify with one destination, named as in the rules' examples.
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	runService(t, "notify", env("notify", "MCPDRIFT_NOTIFY_WEBHOOK="+hook.URL, "MCPDRIFT_NOTIFY_NAME=siem")...)
	// The proxy in HTTP mode, which exports every proxy metric (the agent
	// refusals too).
	_, upstream := httpUpstream(t, nil)
	px := runHTTPProxy(t, "metrics-1", "--nats-url", natsURL, "--proxy-id", "metrics-1", "--first-sight-wait", "5s",
		"--upstream", "web="+upstream, "--ops-addr", addrs["proxy"])
	c := httpClient(t, px+"/web/mcp", "2025-11-25")
	// Traffic through the whole pipeline: a first sight, a verdict, a call.
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(c, "hello")
		return awaiting(!isErr && got == "hello", "the proxy serves the first sight", got)
	})

	// Some series come once their source is there (a consumer's lag once
	// it exists, the fleet once the status bucket is loaded): poll until
	// every name is exported, and report what is still missing.
	var last []string
	poll.Eventually(t, wait, func() error {
		e := exported{}
		for _, addr := range addrs {
			e.add(opstest.Scrape(t, addr))
		}
		last = nil
		for _, q := range queries {
			last = append(last, e.problems(q)...)
		}
		if len(last) > 0 {
			return fmt.Errorf("the monitoring names what the services do not export:\n%s", strings.Join(last, "\n"))
		}
		return nil
	})
	t.Logf("%d queries checked against the metrics of %d services", len(queries), len(addrs))

	// The figure docs/metrics.md gives: the series of one proxy.
	series, ours := 0, 0
	for name, f := range opstest.Scrape(t, addrs["proxy"]) {
		n := 0
		for _, m := range f.GetMetric() {
			n++
			if h := m.GetHistogram(); h != nil {
				n += len(h.GetBucket()) + 2 // the buckets, +Inf, _sum and _count
			}
		}
		series += n
		if strings.HasPrefix(name, "mcpdrift_") {
			ours += n
		}
	}
	t.Logf("one proxy exports %d series, %d of them mcpdrift_", series, ours)
}

// TestExportedProblems: the check finds each kind of mismatch between a
// query and what is exported, and accepts what matches.
func TestExportedProblems(t *testing.T) {
	fams, err := opstest.Parse(`# TYPE mcpdrift_v counter
mcpdrift_v{status="changed"} 1
mcpdrift_v{status="verified"} 2
# TYPE mcpdrift_lag_seconds histogram
mcpdrift_lag_seconds_bucket{le="1"} 1
mcpdrift_lag_seconds_bucket{le="+Inf"} 1
mcpdrift_lag_seconds_sum 0.5
mcpdrift_lag_seconds_count 1
# TYPE mcpdrift_pending gauge
mcpdrift_pending{consumer="audit-obs"} 3
`)
	if err != nil {
		t.Fatal(err)
	}
	e := exported{}
	e.add(fams)
	for _, tc := range []struct {
		name, expr, want string // want: a part of the one problem, "" for none
	}{
		{name: "matches", expr: `sum by (status) (increase(mcpdrift_v{status="changed",job="x"}[5m]))`},
		{name: "regex_matches", expr: `max by (consumer) (mcpdrift_pending{consumer=~"audit.*"}) > 0`},
		{name: "negative_not_checked", expr: `mcpdrift_pending{consumer!~"audit.*"}`},
		{name: "histogram", expr: `histogram_quantile(0.99, sum by (le) (rate(mcpdrift_lag_seconds_bucket[5m]))) + mcpdrift_lag_seconds_count`},
		{name: "up", expr: `up{job=~"mcpdrift.*"} == 0`},
		{name: "prometheus_labels", expr: `sum by (job, instance) (mcpdrift_v)`},
		{name: "unknown_metric", expr: `mcpdrift_w > 0`, want: "no service exports mcpdrift_w"},
		{name: "unknown_label", expr: `mcpdrift_v{state="changed"}`, want: "mcpdrift_v has no label state"},
		{name: "unknown_value", expr: `mcpdrift_v{status="chnaged"}`, want: `no series of mcpdrift_v has status="chnaged"`},
		{name: "regex_matches_nothing", expr: `mcpdrift_pending{consumer=~"audit"}`, want: `no series of mcpdrift_pending has consumer=~"audit"`},
		{name: "grouping_label", expr: `sum by (code) (mcpdrift_v)`, want: "groups by code"},
		{name: "histogram_base_name", expr: `mcpdrift_lag_seconds`, want: "no service exports mcpdrift_lag_seconds"},
		{name: "up_label", expr: `up{service="x"}`, want: "up has no label service"},
		{name: "no_metric", expr: `vector(1)`, want: "names no metric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.problems(query{"q", tc.expr})
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("problems(%q) = %q, want none", tc.expr, got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("problems(%q) = %q, want one with %q", tc.expr, got, tc.want)
			}
		})
	}
}
