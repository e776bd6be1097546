package sink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/schema"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
)

// TestCurrentClickHouse runs on chDB, ClickHouse as a library for Node,
// installed by scripts/deps.d/chdb.sh at the versions pinned in
// scripts/chdb; testdata/chdb.cjs runs its statements in one session.

// recordBatch is a driver.Batch that keeps what the sink's row builders
// append to each column (appendTo), so that the rows given to chDB are the
// sink's own, column for column.
type recordBatch struct{ cols []any }

type recordColumn struct {
	b *recordBatch
	i int
}

func (c recordColumn) Append(v any) error { c.b.cols[c.i] = v; return nil }
func (c recordColumn) AppendRow(any) error {
	return errors.New("recordBatch: rows are appended by column")
}
func (b *recordBatch) Abort() error { return nil }
func (b *recordBatch) Append(...any) error {
	return errors.New("recordBatch: rows are appended by column")
}
func (b *recordBatch) AppendStruct(any) error {
	return errors.New("recordBatch: rows are appended by column")
}
func (b *recordBatch) Flush() error                { return nil }
func (b *recordBatch) Send() error                 { return nil }
func (b *recordBatch) IsSent() bool                { return false }
func (b *recordBatch) Rows() int                   { return 0 }
func (b *recordBatch) Columns() []column.Interface { return nil }
func (b *recordBatch) Close() error                { return nil }
func (b *recordBatch) Column(i int) driver.BatchColumn {
	for len(b.cols) <= i {
		b.cols = append(b.cols, nil)
	}
	return recordColumn{b, i}
}

// jsonEachRow renders a table's buffered rows as the sink would insert
// them, one JSON object per row by column name (times as ClickHouse reads
// them in JSONEachRow).
func jsonEachRow(t *testing.T, tb table) string {
	t.Helper()
	var rb recordBatch
	if err := tb.appendTo(&rb); err != nil {
		t.Fatal(err)
	}
	names := strings.Split(tb.columns(), ", ")
	if len(names) != len(rb.cols) {
		t.Fatalf("%s: %d columns named, %d appended", tb.name(), len(names), len(rb.cols))
	}
	var out bytes.Buffer
	for r := range tb.len() {
		row := map[string]any{}
		for i, n := range names {
			v := reflect.ValueOf(rb.cols[i]).Index(r).Interface()
			if tm, ok := v.(time.Time); ok {
				v = tm.UTC().Format("2006-01-02 15:04:05.000")
			}
			row[n] = v
		}
		b, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	return out.String()
}

// t0 starts the history the tables are filled with (auditHistory).
var t0 = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

// chTime is a DateTime64(3) as ClickHouse prints it.
func chTime(d time.Duration) string { return t0.Add(d).Format("2006-01-02 15:04:05.000") }

func msText(d time.Duration) string { return strconv.FormatInt(ms(d), 10) }

// auditHistory decodes, with the sink's own decoder, a history of every
// event kind the audit writes (duplicates included, as redeliveries) into
// one batch, and returns it.
func auditHistory(t *testing.T, now time.Time) *batch {
	t.Helper()
	s := &Service{cfg: DefaultConfig}
	s.cfg.Arguments = ArgumentsFull
	b := new(batch)
	seq := uint64(0)
	add := func(subject string, data []byte) {
		t.Helper()
		seq++
		if err := s.decode(envelope{subject: subject, seq: seq, stamp: now}, data, b); err != nil {
			t.Fatalf("decoding the event on %s: %v", subject, err)
		}
	}
	pb := func(m proto.Message) []byte {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	js := func(m proto.Message) []byte {
		data, err := bus.MarshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// Listings: one whole, one compact.
	add(bus.ListObservationSubject("acme", "fs"), pb(&mcpdriftv1.ListObservation{EventId: "l1", Tenant: "acme", Server: "fs", Proxy: "p1",
		Variant: "default", Agent: "agent-a", Session: "s1", SurfaceHash: "sha256:aa", Capture: []byte(`{"tools":[]}`), ObservedAtUnixMs: ms(0)}))
	add(bus.ListingsSeenSubject("acme", "fs"), pb(&mcpdriftv1.ListingsSeen{Seen: []*mcpdriftv1.ListingSeen{{EventId: "l2", Tenant: "acme",
		Server: "fs", Proxy: "p1", Variant: "default", Agent: "agent-a", Session: "s2", SurfaceHash: "sha256:aa", ObservedAtUnixMs: ms(5 * time.Minute)}}}))
	// Verdicts: fs trusted on first use, drifts twice in one episode, is
	// approved; web drifts the next day. One is delivered twice.
	verdict := func(id, server string, st, prev mcpdriftv1.Status, serve bool, reason, actor, live string, at time.Duration) []byte {
		return js(&mcpdriftv1.Verdict{EventId: id, Tenant: "acme", Server: server, Variant: "default", Status: st, PreviousStatus: prev,
			Serve: serve, Posture: "discovery", OnDrift: "block", BaselineVersion: 1, BaselineHash: "sha256:aa", LiveHash: live,
			Severity: "critical", ReasonCode: reason, Reason: reason, Actor: actor, AtUnixMs: ms(at)})
	}
	add(bus.VerdictSubject("acme", "fs"), verdict("v1", "fs", mcpdriftv1.Status_STATUS_VERIFIED, 0, true, "first_baseline", "system:trust-on-first-use", "sha256:aa", 0))
	v2 := verdict("v2", "fs", mcpdriftv1.Status_STATUS_CHANGED, mcpdriftv1.Status_STATUS_VERIFIED, false, "drift", "", "sha256:bb", time.Hour)
	add(bus.VerdictSubject("acme", "fs"), v2)
	add(bus.VerdictSubject("acme", "fs"), verdict("v3", "fs", mcpdriftv1.Status_STATUS_CHANGED, mcpdriftv1.Status_STATUS_CHANGED, false, "drift", "", "sha256:cc", 2*time.Hour))
	add(bus.VerdictSubject("acme", "fs"), verdict("v4", "fs", mcpdriftv1.Status_STATUS_VERIFIED, mcpdriftv1.Status_STATUS_CHANGED, true, "approved", "alice", "sha256:cc", 3*time.Hour))
	add(bus.VerdictSubject("acme", "web"), verdict("v5", "web", mcpdriftv1.Status_STATUS_CHANGED, mcpdriftv1.Status_STATUS_VERIFIED, false, "drift", "", "sha256:dd", 25*time.Hour))
	add(bus.VerdictSubject("acme", "fs"), v2) // redelivered
	// Admin actions: an approve done, one refused, a rebaseline, a list.
	action := func(id, act, actor string, ok bool, code string, at time.Duration) []byte {
		return js(&mcpdriftv1.AdminAction{EventId: id, Tenant: "acme", Server: "fs", Action: act, Actor: actor, Role: "write",
			Hash: "sha256:cc", Ok: ok, ErrorCode: code, AtUnixMs: ms(at)})
	}
	add(bus.AdminSubject("acme", "fs"), action("a1", "approve", "alice", true, "", 3*time.Hour))
	add(bus.AdminSubject("acme", "fs"), action("a2", "approve", "bob", false, "stale_hash", 150*time.Minute))
	add(bus.AdminSubject("acme", "fs"), action("a3", "rebaseline", "alice", true, "", 4*time.Hour))
	add(bus.AdminSubject("_", "_"), js(&mcpdriftv1.AdminAction{EventId: "a4", Action: "status", Actor: "alice", Role: "read", Ok: true, AtUnixMs: ms(5 * time.Hour)}))
	// Calls: a batch of fs's (delivered twice), one web call in the single form.
	calls := pb(&mcpdriftv1.CallObservations{Calls: []*mcpdriftv1.CallObservation{
		{EventId: "c1", Tenant: "acme", Server: "fs", Proxy: "p1", Tool: "read", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED,
			LatencyUs: 100, Agent: "agent-a", ArgumentsDigest: "sha256:01", ObservedAtUnixMs: ms(10 * time.Minute)},
		{EventId: "c2", Tenant: "acme", Server: "fs", Proxy: "p1", Tool: "write", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED,
			RefusalCode: "server_changed", LatencyUs: 20, Agent: "agent-a", ObservedAtUnixMs: ms(70 * time.Minute)},
		{EventId: "c3", Tenant: "acme", Server: "fs", Proxy: "p1", Tool: "write", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED,
			RefusalCode: "policy_denied", PolicyRule: "no-write", PolicyAction: "deny", PolicyReason: "writes are reviewed",
			LatencyUs: 30, Agent: "agent-b", ObservedAtUnixMs: ms(80 * time.Minute)},
		{EventId: "c4", Tenant: "acme", Server: "fs", Proxy: "p1", Tool: "read", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_ERROR,
			LatencyUs: 900, Agent: "agent-b", ObservedAtUnixMs: ms(90 * time.Minute)},
		{EventId: "c5", Tenant: "acme", Server: "fs", Proxy: "p1", Tool: "rm", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED,
			LatencyUs: 5000, Agent: "agent-a", PolicyRule: "hold-rm", PolicyAction: "pending_approval", RiskMode: "allow",
			ShadowRule: "shadow-x", ShadowAction: "deny", ApprovalId: "ap1", ApprovalOutcome: "approved", ApprovalActor: "alice",
			ObservedAtUnixMs: ms(2 * time.Hour)},
	}})
	add(bus.CallObservationsSubject("acme", "fs"), calls)
	add(bus.CallObservationsSubject("acme", "fs"), calls) // redelivered
	add(bus.CallObservationSubject("acme", "web"), pb(&mcpdriftv1.CallObservation{EventId: "c6", Tenant: "acme", Server: "web", Proxy: "p2",
		Tool: "fetch", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED, RefusalCode: "policy_unknown", Agent: "agent-a",
		Arguments: []byte(`{"url":"https://example.com","api_key":"sk-0123456789abcdef"}`), ObservedAtUnixMs: ms(25*time.Hour + 5*time.Minute)}))
	// Dead letters: one in the last day, one older.
	add(bus.DeadLetterSubject("drift"), js(&mcpdriftv1.DeadLetter{EventId: "d1", Service: "drift", Subject: "mcpdrift.fp.acme.fs",
		StreamSequence: "42", ErrorCode: "retries_exhausted", ErrorMessage: "gave up", AtUnixMs: now.Add(-time.Hour).UnixMilli()}))
	add(bus.DeadLetterSubject("fingerprint"), js(&mcpdriftv1.DeadLetter{EventId: "d2", Service: "fingerprint", Subject: "mcpdrift.obs.list.acme.fs",
		StreamSequence: "7", ErrorCode: "malformed_event", ErrorMessage: "bad", AtUnixMs: now.Add(-72 * time.Hour).UnixMilli()}))
	return b
}

// chdbDir is the installed chDB, or the test fails saying how to install it.
func chdbDir(t *testing.T, root string) string {
	t.Helper()
	dir := os.Getenv("MCPDRIFT_CHDB")
	if dir == "" {
		dir = filepath.Join(root, ".data", "chdb")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "chdb", "package.json")); err != nil {
		t.Fatalf("chDB is not installed in %s (%v): install it with scripts/deps.d/chdb.sh (make deps does), or point MCPDRIFT_CHDB at an installation", dir, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH (%v): chDB runs in Node; install it, e.g. apt-get install nodejs", err)
	}
	return dir
}

// docQueries are the queries docs/analytics.md prints: every statement of
// its sql blocks, and the one-line queries of its text. A query built
// around another ("(<the query>)") gets the approval-time query.
func docQueries(t *testing.T, root string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "analytics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		for _, stmt := range strings.Split(m[1], ";") {
			var lines []string
			for _, l := range strings.Split(stmt, "\n") {
				if !strings.HasPrefix(strings.TrimSpace(l), "--") {
					lines = append(lines, l)
				}
			}
			if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
				out = append(out, q)
			}
		}
	}
	approvalTime, _ := auditq.Find("approval-time")
	for _, m := range regexp.MustCompile("`((?:SELECT|ALTER TABLE) [^`]+)`").FindAllStringSubmatch(string(doc), -1) {
		out = append(out, strings.ReplaceAll(m[1], "<the query>", approvalTime.SQL))
	}
	return out
}

// productionSchema reads deploy/clickhouse/schema.sql: its statements, and
// the retention statements its comments give for call_observations.
func productionSchema(t *testing.T, root string) (stmts, retention []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "clickhouse", "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var code, comments []string
	for _, l := range strings.Split(string(raw), "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(l), "--"); ok {
			comments = append(comments, strings.TrimSpace(c))
		} else {
			code = append(code, l)
		}
	}
	for _, s := range strings.Split(strings.Join(code, "\n"), ";") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	retention = regexp.MustCompile(`ALTER TABLE mcpdrift\.call_observations ON CLUSTER '\{cluster\}' MODIFY [^;]+`).
		FindAllString(strings.Join(comments, " "), -1)
	if len(retention) != 2 {
		t.Fatalf("schema.sql's comments give %d retention statements, want 2 (TTL, ttl_only_drop_parts): %q", len(retention), retention)
	}
	return stmts, retention
}

var (
	onCluster  = " ON CLUSTER '{cluster}'"
	replicated = regexp.MustCompile(`ENGINE = Replicated(Replacing|Aggregating)MergeTree\('/clickhouse/tables/\{shard\}/\{database\}/\{table\}', '\{replica\}'\)`)
)

// singleNode is a statement of schema.sql for one node without Keeper:
// without ON CLUSTER, and each replicated engine its plain form. The two
// rewrites are all: anything else in the statement runs as written.
func singleNode(t *testing.T, stmt string) string {
	t.Helper()
	if strings.Count(stmt, onCluster) != 1 {
		t.Fatalf("a statement of schema.sql without exactly one %q: %.120s", onCluster, stmt)
	}
	out := strings.Replace(stmt, onCluster, "", 1)
	if strings.HasPrefix(out, "CREATE TABLE") {
		if len(replicated.FindAllString(out, -1)) != 1 {
			t.Fatalf("a table of schema.sql without one replicated engine: %.120s", stmt)
		}
		out = replicated.ReplaceAllString(out, "ENGINE = ${1}MergeTree")
	}
	return out
}

type chdbStep struct {
	Name  string `json:"name"`
	SQL   string `json:"sql"`
	Query bool   `json:"query"`
}

type chdbAnswer struct {
	Version string `json:"version"`
	Steps   []struct {
		Name    string     `json:"name"`
		Error   string     `json:"error"`
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
	} `json:"steps"`
}

// runChDB runs the steps in one chDB session (testdata/chdb.cjs) in a
// fresh directory.
func runChDB(t *testing.T, dir, config string, steps []chdbStep) *chdbAnswer {
	t.Helper()
	tmp := t.TempDir()
	job, err := json.Marshal(map[string]any{"chdb": dir, "dir": filepath.Join(tmp, "session"), "config": config, "steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(tmp, "job.json")
	if err := os.WriteFile(jobFile, job, 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "chdb.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("node", script, jobFile)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running chDB: %v\n%s", err, stderr.String())
	}
	var a chdbAnswer
	if err := json.Unmarshal(stdout.Bytes(), &a); err != nil {
		t.Fatalf("chDB's answer: %v\n%.2000s\n%s", err, stdout.String(), stderr.String())
	}
	if len(a.Steps) != len(steps) {
		t.Fatalf("chDB answered %d steps of %d", len(a.Steps), len(steps))
	}
	return &a
}

// TestCurrentClickHouse runs, in a current ClickHouse (chDB, pinned in
// scripts/chdb), what the tests against Debian's 18.16 cannot show:
//   - the production schema, deploy/clickhouse/schema.sql, on one node
//     (ON CLUSTER and the replicated engines are the only statements
//     rewritten; the replicated tables are also created as written, with
//     an in-process Keeper, to show their engine clauses are accepted),
//     and its retention statements;
//   - the sink's own DDL for that server version (LowCardinality,
//     DateTime64, codecs, a TTL), which must give every table the same
//     columns and types as the production schema;
//   - rows of every table as the sink builds them (its decoder and row
//     builders, duplicates included), inserted into both;
//   - every query of docs/analytics.md and of driftctl audit, in both,
//     each checked row for row.
func TestCurrentClickHouse(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("chDB is pinned for linux/amd64 only (scripts/deps.d/chdb.sh); this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := chdbDir(t, root)
	var pin struct{ Version string }
	if raw, err := os.ReadFile(filepath.Join(dir, "node_modules", "@chdb", "lib-linux-x64-gnu", "package.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(raw, &pin); err != nil {
		t.Fatal(err)
	}
	features := schema.FeaturesOf(pin.Version)
	if !features.DateTime64 || !features.LowCardinality || !features.Codecs || !features.TTL {
		t.Fatalf("chDB's engine %s is not a current ClickHouse: %+v", pin.Version, features)
	}

	now := time.Now().UTC()
	b := auditHistory(t, now)
	prod, retention := productionSchema(t, root)
	sinkDDL, err := schema.Statements(features, schema.Options{Database: "mcpdrift_sink", RetentionDays: 365})
	if err != nil {
		t.Fatal(err)
	}

	var steps []chdbStep
	stmt := func(name, sql string) { steps = append(steps, chdbStep{Name: name, SQL: sql}) }
	query := func(name, sql string) { steps = append(steps, chdbStep{Name: name, SQL: sql, Query: true}) }
	for i, s := range prod {
		stmt(fmt.Sprintf("schema.sql %d", i+1), singleNode(t, s))
	}
	// The replicated tables as written (but for ON CLUSTER), in a database
	// of their own: chDB has no cluster, but a Keeper of its own.
	for i, s := range prod {
		s = strings.ReplaceAll(strings.Replace(s, onCluster, "", 1), "mcpdrift.", "mcpdrift_replicated.")
		if s == "CREATE DATABASE IF NOT EXISTS mcpdrift" {
			s += "_replicated"
		}
		stmt(fmt.Sprintf("schema.sql %d replicated", i+1), s)
	}
	for i, s := range sinkDDL {
		stmt(fmt.Sprintf("sink DDL %d", i+1), s)
	}
	dbs := []string{"mcpdrift", "mcpdrift_sink"}
	for _, db := range dbs {
		for _, tb := range b.tables() {
			stmt("insert "+db+"."+tb.name(), "INSERT INTO "+db+"."+tb.name()+" FORMAT JSONEachRow\n"+jsonEachRow(t, tb))
		}
	}
	// schema_migrations as Migrate records it.
	for _, db := range dbs {
		for _, m := range schema.Migrations {
			stmt(fmt.Sprintf("record migration %d in %s", m.Version, db), fmt.Sprintf("INSERT INTO %s.schema_migrations VALUES (%d, '%s', '%s', '%s')",
				db, m.Version, strings.ReplaceAll(m.Name, "'", `\'`), features.Version, now.Format("2006-01-02 15:04:05")))
		}
	}
	columnsOf := func(db string) string {
		return "SELECT table, name, type FROM system.columns WHERE database = '" + db + "' AND table NOT LIKE '%_mv' ORDER BY table, name"
	}
	query("columns mcpdrift", columnsOf("mcpdrift"))
	query("columns mcpdrift_sink", columnsOf("mcpdrift_sink"))
	query("engines mcpdrift_replicated", "SELECT name, engine FROM system.tables WHERE database = 'mcpdrift_replicated' ORDER BY name")
	query("engines mcpdrift", "SELECT name, engine FROM system.tables WHERE database = 'mcpdrift' ORDER BY name")

	// The queries, in both databases.
	expect := expectedAnswers(features.Version, now)
	docs := docQueries(t, root)
	used := map[string]int{}
	unordered := map[string]bool{} // keys of queries without ORDER BY: rows compared as sets
	for _, db := range dbs {
		bind := func(sql, since, agent string) string {
			sql = strings.ReplaceAll(sql, "mcpdrift.", db+".")
			sql = strings.ReplaceAll(sql, "SINCE_MS", since)
			return strings.ReplaceAll(sql, "@agent", "'"+agent+"'") // as clickhouse-go binds a string
		}
		for _, q := range docs {
			key := answerKey(q)
			if _, ok := expect[key]; !ok {
				t.Fatalf("a query of docs/analytics.md has no expected answer in this test; add one:\n%s", q)
			}
			used[key]++
			unordered[key] = !strings.Contains(q, "ORDER BY")
			if strings.HasPrefix(q, "ALTER") {
				continue // run after the queries, below
			}
			query(db+" doc "+key, bind(q, "0", ""))
		}
		for _, q := range auditq.Queries {
			query(db+" audit "+q.Name, bind(q.SQL, "0", ""))
		}
		drifts, _ := auditq.Find("drifts")
		query(db+" audit since", bind(drifts.SQL, msText(24*time.Hour), ""))
		agents, _ := auditq.Find("agents")
		query(db+" audit agent", bind(agents.SQL, "0", "agent-b"))
		for _, tb := range b.tables() {
			query(db+" count "+tb.name(), "SELECT uniqExact(event_id), count() FROM "+db+"."+tb.name()+" FINAL")
		}
	}
	for key := range expect {
		if used[key] == 0 && !strings.HasPrefix(key, "audit:") {
			t.Errorf("expected answer %q matches no query of docs/analytics.md", key)
		}
	}
	// Retention: the documented ALTER, then schema.sql's on every raw table.
	for _, q := range docs {
		if strings.HasPrefix(q, "ALTER") {
			stmt("doc alter", q)
		}
	}
	for _, tb := range schema.Tables {
		for i, r := range retention {
			stmt(fmt.Sprintf("retention %s %d", tb, i+1), singleNode(t, strings.Replace(r, "call_observations", tb, 1)))
		}
	}
	// chDB's session does not close with replicated tables open (their
	// replication threads wait on the in-process Keeper).
	stmt("drop mcpdrift_replicated", "DROP DATABASE mcpdrift_replicated SYNC")
	query("retention", "SELECT name, engine_full FROM system.tables WHERE database = 'mcpdrift' AND name IN ('"+
		strings.Join(schema.Tables, "','")+"') ORDER BY name")
	query("after retention", "SELECT uniqExact(event_id) FROM mcpdrift.call_observations")

	a := runChDB(t, dir, filepath.Join("testdata", "chdb-keeper.xml"), steps)
	t.Logf("ClickHouse %s (chDB); %d statements and queries", a.Version, len(steps))
	if v := schema.FeaturesOf(a.Version); v.Major != features.Major || v.Minor != features.Minor {
		t.Errorf("the engine answers version %s, its package is %s", a.Version, pin.Version)
	}
	expect["version"] = [][]string{{a.Version}}
	answers := map[string][][]string{}
	for i, st := range a.Steps {
		if st.Error != "" {
			t.Errorf("%s failed: %s\n%.600s", st.Name, firstLine(st.Error), steps[i].SQL)
			continue
		}
		answers[st.Name] = st.Rows
	}
	if t.Failed() {
		t.FailNow()
	}

	// The production schema and the sink's DDL agree on every column.
	if n := len(answers["columns mcpdrift"]); n < 80 {
		t.Errorf("schema.sql's tables have %d columns in chDB, want every one of them", n)
	}
	if got, want := answers["columns mcpdrift_sink"], answers["columns mcpdrift"]; !reflect.DeepEqual(got, want) {
		t.Errorf("the sink's DDL for %s and schema.sql differ:\nsink:       %q\nschema.sql: %q", pin.Version, got, want)
	}
	for _, row := range answers["engines mcpdrift_replicated"] {
		if !strings.HasPrefix(row[1], "Replicated") && row[1] != "MaterializedView" {
			t.Errorf("replicated table %s has engine %s", row[0], row[1])
		}
	}
	if n, m := len(answers["engines mcpdrift_replicated"]), len(answers["engines mcpdrift"]); n != m || n == 0 {
		t.Errorf("%d replicated tables and views, %d single-node ones", n, m)
	}
	for _, db := range dbs {
		for key, want := range expect {
			name := db + " doc " + key
			if a, ok := strings.CutPrefix(key, "audit:"); ok {
				name = db + " audit " + a
			}
			got, ok := answers[name]
			if !ok {
				continue // an ALTER
			}
			got, want = orEmpty(got), orEmpty(want)
			if unordered[key] {
				got, want = sortedRows(got), sortedRows(want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s:\ngot  %q\nwant %q", name, got, want)
			}
		}
		for _, q := range auditq.Queries {
			if want, ok := expect[q.Name]; ok && !reflect.DeepEqual(orEmpty(answers[db+" audit "+q.Name]), orEmpty(want)) {
				t.Errorf("%s audit %s:\ngot  %q\nwant %q", db, q.Name, answers[db+" audit "+q.Name], want)
			}
		}
		for _, tc := range []struct {
			table string
			ids   int
			rows  int
		}{{"list_observations", 2, 2}, {"call_observations", 6, 6}, {"verdicts", 5, 5}, {"admin_actions", 4, 4}, {"dead_letters", 2, 2}} {
			if got := answers[db+" count "+tc.table]; !reflect.DeepEqual(got, [][]string{{strconv.Itoa(tc.ids), strconv.Itoa(tc.rows)}}) {
				t.Errorf("%s.%s FINAL: %q, want %d events in %d rows", db, tc.table, got, tc.ids, tc.rows)
			}
		}
	}
	for _, row := range answers["retention"] {
		if !strings.Contains(row[1], "TTL toDateTime(at) + toIntervalDay(365)") || !strings.Contains(row[1], "ttl_only_drop_parts = 1") {
			t.Errorf("%s after schema.sql's retention: %s", row[0], row[1])
		}
	}
	if got := answers["after retention"]; !reflect.DeepEqual(got, [][]string{{"6"}}) {
		t.Errorf("calls after the retention statements: %q, want the 6 (none is a year old)", got)
	}
}

func orEmpty(r [][]string) [][]string {
	if r == nil {
		return [][]string{}
	}
	return r
}

func sortedRows(r [][]string) [][]string {
	out := slices.Clone(r)
	slices.SortFunc(out, func(a, b []string) int { return slices.Compare(a, b) })
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// answerKey names a query of docs/analytics.md: the driftctl audit query
// it prints, or what it is about.
func answerKey(q string) string {
	for _, a := range auditq.Queries {
		if a.SQL == q {
			return a.Name
		}
	}
	for _, k := range []struct{ key, has string }{
		{"dead-letters", "FROM mcpdrift.dead_letters"},
		{"calls-per-hour", "maxMerge(max_latency_us)"},
		{"verdicts-final", "FROM mcpdrift.verdicts FINAL"},
		{"migrations", "FROM mcpdrift.schema_migrations FINAL"},
		{"approval-median", "quantile(0.5)(seconds)"},
		{"refused-raw", "FROM mcpdrift.call_observations WHERE outcome = 'refused' GROUP BY"},
		{"alter-ttl", "MODIFY TTL"},
		{"version", "SELECT version()"},
	} {
		if strings.Contains(q, k.has) {
			return k.key
		}
	}
	return q
}

// expectedAnswers are the rows each query must answer for auditHistory,
// by answerKey ("audit:<name>" for the driftctl audit queries asked with
// a period or an agent).
func expectedAnswers(version string, now time.Time) map[string][][]string {
	h := time.Hour
	m := time.Minute
	migrations := [][]string{}
	for _, mg := range schema.Migrations {
		migrations = append(migrations, []string{strconv.Itoa(int(mg.Version)), mg.Name, version, now.Format("2006-01-02 15:04:05")})
	}
	return map[string][][]string{
		"drifts": {
			{"acme", "fs", "2", msText(2 * h)},
			{"acme", "web", "1", msText(25 * h)},
		},
		"audit:since":    {{"acme", "web", "1", msText(25 * h)}},
		"drifts-per-day": {{"2026-11-01", "2"}, {"2026-11-02", "1"}},
		"approval-time":  {{"acme", "fs", "default", "alice", msText(h), msText(3 * h), "7200"}},
		"refused": {
			{"acme", "fs", "write", "policy_denied", "1"},
			{"acme", "fs", "write", "server_changed", "1"},
			{"acme", "web", "fetch", "policy_unknown", "1"},
		},
		"agents": {
			{"agent-a", "acme", "fs", "read", "1", "0", "0", msText(10 * m)},
			{"agent-a", "acme", "fs", "rm", "1", "0", "0", msText(2 * h)},
			{"agent-a", "acme", "fs", "write", "1", "1", "0", msText(70 * m)},
			{"agent-a", "acme", "web", "fetch", "1", "1", "0", msText(25*h + 5*m)},
			{"agent-b", "acme", "fs", "read", "1", "0", "1", msText(90 * m)},
			{"agent-b", "acme", "fs", "write", "1", "1", "0", msText(80 * m)},
		},
		"audit:agent": {
			{"agent-b", "acme", "fs", "read", "1", "0", "1", msText(90 * m)},
			{"agent-b", "acme", "fs", "write", "1", "1", "0", msText(80 * m)},
		},
		"approvals": {{"alice", "1", "0", msText(3 * h)}, {"bob", "0", "1", msText(150 * m)}},
		"policy-denials": {
			{"acme", "fs", "no-write", "policy_denied", "1", msText(80 * m)},
			{"acme", "web", "", "policy_unknown", "1", msText(25*h + 5*m)},
		},
		"held-calls":   {{"ap1", "acme", "fs", "rm", "hold-rm", "approved", "alice", msText(2 * h)}},
		"shadow":       {{"acme", "fs", "shadow-x", "deny", "pending_approval", "1", msText(2 * h)}},
		"closed":       {{"acme", "web", "default", "changed", "drift", "", msText(25 * h)}},
		"dead-letters": {{"drift", "retries_exhausted", "1"}},
		"calls-per-hour": {
			{"2026-11-01 10:00:00", "forwarded", "1", "100"},
			{"2026-11-01 11:00:00", "error", "1", "900"},
			{"2026-11-01 11:00:00", "refused", "2", "30"},
			{"2026-11-01 12:00:00", "forwarded", "1", "5000"},
		},
		"verdicts-final": {
			{chTime(0), "verified", "", "first_baseline", "system:trust-on-first-use", "sha256:aa"},
			{chTime(h), "changed", "verified", "drift", "", "sha256:bb"},
			{chTime(2 * h), "changed", "changed", "drift", "", "sha256:cc"},
			{chTime(3 * h), "verified", "changed", "approved", "alice", "sha256:cc"},
		},
		"migrations":      migrations,
		"approval-median": {{"acme", "7200"}},
		"refused-raw":     {{"acme", "fs", "write", "2", msText(80 * m)}, {"acme", "web", "fetch", "1", msText(25*h + 5*m)}},
		"alter-ttl":       nil,
		"version":         nil, // the engine's, filled in once it answered
	}
}
