package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

func TestMain(m *testing.M) {
	mcptest.Main() // the stdio MCP server of TestWrappedServersRun
	os.Exit(cmdtest.Main(func() int { return chtest.Main(m) }))
}

// TestAuditQueriesMatchTheDocs holds docs/analytics.md and the queries
// driftctl runs together: each query's SQL is printed there verbatim.
func TestAuditQueriesMatchTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/analytics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range auditq.Queries {
		if !strings.Contains(string(doc), "```sql\n"+q.SQL+"\n```") {
			t.Errorf("docs/analytics.md lacks the SQL of %q verbatim:\n%s", q.Name, q.SQL)
		}
	}
}

// driftsPerDay is what drifts-per-day answers for drifts at these times
// (Unix ms), each a distinct event.
func driftsPerDay(atMs ...int64) []string {
	per := map[string]int{}
	var days []string
	for _, ms := range atMs {
		day := time.UnixMilli(ms).UTC().Format("2006-01-02")
		if per[day] == 0 {
			days = append(days, day)
		}
		per[day]++
	}
	var out []string
	for _, d := range days {
		out = append(out, fmt.Sprintf(`{"day":%q,"drifts":%d}`, d, per[d]))
	}
	return out
}

// TestAuditCommands runs the real audit command against in-process NATS and
// a real ClickHouse server, publishes a history of verdicts, admin actions
// and calls as the services would (with duplicates), and checks every
// driftctl audit query's answer.
func TestAuditCommands(t *testing.T) {
	ch := chtest.Shared(t)
	db := ch.Database(t)
	b := natstest.StartBus(t)
	var logs bytes.Buffer
	cmd := exec.Command(cmdtest.Path(t, "audit"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+b.ClientURL(), "MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr,
		"MCPDRIFT_AUDIT_DATABASE="+db, "MCPDRIFT_AUDIT_BATCH_AGE=20ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	pub := func(subject string, data []byte, id string) {
		t.Helper()
		if _, err := bus.Publish(context.Background(), b.JS, subject, data, id); err != nil {
			t.Fatal(err)
		}
	}
	verdict := func(tenant, server string, st, prev mcpdriftv1.Status, serve bool, reason, actor string, atS int64, dup bool) {
		t.Helper()
		id := fmt.Sprintf("verdict-%s.%s.default-%d", tenant, server, atS)
		v := &mcpdriftv1.Verdict{EventId: id, Tenant: tenant, Server: server, Variant: "default", Status: st,
			PreviousStatus: prev, Serve: serve, ReasonCode: reason, Actor: actor, AtUnixMs: t0 + atS*1000}
		data, _ := bus.MarshalJSON(v)
		pub(bus.VerdictSubject(tenant, server), data, id)
		if dup { // stored twice, as after a retry outside the duplicate window
			pub(bus.VerdictSubject(tenant, server), data, id+"-again")
		}
	}
	admin := func(tenant, server, action, actor string, ok bool, atS int64) {
		t.Helper()
		id := fmt.Sprintf("admin-%s-%s-%d", action, actor, atS)
		a := &mcpdriftv1.AdminAction{EventId: id, Tenant: tenant, Server: server, Variant: "default", Action: action,
			Actor: actor, Role: "write", Ok: ok, AtUnixMs: t0 + atS*1000}
		if !ok {
			a.ErrorCode = "stale_hash"
		}
		data, _ := bus.MarshalJSON(a)
		pub(bus.AdminSubject(tenant, server), data, id)
	}
	call := func(tenant, server, tool string, refused bool, i int, dup bool) {
		t.Helper()
		out, code := mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED, ""
		if refused {
			out, code = mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED, "server_changed"
		}
		id := fmt.Sprintf("call-%s-%s-%d", server, tool, i)
		data, _ := proto.Marshal(&mcpdriftv1.CallObservation{EventId: id, Tenant: tenant, Server: server, Tool: tool,
			Outcome: out, RefusalCode: code, ObservedAtUnixMs: t0 + int64(i)*1000})
		pub(bus.CallObservationSubject(tenant, server), data, id)
		if dup {
			pub(bus.CallObservationSubject(tenant, server), data, id+"-again")
		}
	}
	const (
		unknown     = mcpdriftv1.Status_STATUS_UNKNOWN
		verified    = mcpdriftv1.Status_STATUS_VERIFIED
		changed     = mcpdriftv1.Status_STATUS_CHANGED
		quarantined = mcpdriftv1.Status_STATUS_QUARANTINED
	)
	// acme/fs: baseline, drift, approved by alice 60 s later, drifts again
	// twice, and stays closed.
	verdict("acme", "fs", verified, unknown, true, "first_baseline", "system:trust-on-first-use", 0, false)
	verdict("acme", "fs", changed, verified, false, "drift", "system", 10, true)
	admin("acme", "fs", "approve", "alice", true, 70)
	verdict("acme", "fs", verified, changed, true, "approved", "alice", 70, true)
	verdict("acme", "fs", changed, verified, false, "drift", "system", 100, false)
	verdict("acme", "fs", changed, changed, false, "drift", "system", 110, false)
	// acme/db: baseline, quarantined by bob.
	verdict("acme", "db", verified, unknown, true, "first_baseline", "system:trust-on-first-use", 1, false)
	admin("acme", "db", "quarantine", "bob", true, 20)
	verdict("acme", "db", quarantined, verified, false, "quarantined", "bob", 20, false)
	// beta/web: drift approved by bob 30 s later, after a refused stale approve.
	verdict("beta", "web", verified, unknown, true, "first_baseline", "system:trust-on-first-use", 2, false)
	verdict("beta", "web", changed, verified, false, "drift", "system", 5, false)
	admin("beta", "web", "approve", "bob", false, 30)
	admin("beta", "web", "approve", "bob", true, 35)
	verdict("beta", "web", verified, changed, true, "approved", "bob", 35, false)
	// Calls: refused while acme/fs was closed, some forwarded.
	for i := range 3 {
		call("acme", "fs", "read", true, 11+i, i == 0)
	}
	call("acme", "fs", "write", true, 15, false)
	call("acme", "fs", "read", false, 80, false)
	call("beta", "web", "fetch", true, 6, true)

	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 10 verdicts, 4 admin actions and 6 calls, some stored twice: wait
	// until every distinct event is in ClickHouse. A copy arriving later
	// changes no answer below, since each query counts an event once.
	const distinct = 20
	if err := poll.Until(90*time.Second, func() error {
		var written uint64
		err := conn.QueryRow(context.Background(), `SELECT (SELECT uniqExact(event_id) FROM `+db+`.verdicts) + (SELECT uniqExact(event_id) FROM `+db+
			`.admin_actions) + (SELECT uniqExact(event_id) FROM `+db+`.call_observations)`).Scan(&written)
		if err != nil || written != distinct {
			return fmt.Errorf("events not in clickhouse (%d of %d, %v)", written, distinct, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; audit logs:\n%s", err, logs.String())
	}
	ts := func(s int64) string { return fmt.Sprint(t0 + s*1000) }
	for _, tc := range []struct {
		query string
		args  []string
		want  []string
	}{
		{"drifts", nil, []string{
			`{"drifts":3,"last_drift_ms":` + ts(110) + `,"server":"fs","tenant":"acme"}`,
			`{"drifts":1,"last_drift_ms":` + ts(5) + `,"server":"web","tenant":"beta"}`,
		}},
		{"drifts-per-day", nil, driftsPerDay(t0+5000, t0+10000, t0+100000, t0+110000)},
		{"approval-time", nil, []string{
			`{"approved_ms":` + ts(35) + `,"approver":"bob","drift_ms":` + ts(5) + `,"seconds":30,"server":"web","tenant":"beta","variant":"default"}`,
			`{"approved_ms":` + ts(70) + `,"approver":"alice","drift_ms":` + ts(10) + `,"seconds":60,"server":"fs","tenant":"acme","variant":"default"}`,
		}},
		{"refused", nil, []string{
			`{"refusal_code":"server_changed","refused":3,"server":"fs","tenant":"acme","tool":"read"}`,
			`{"refusal_code":"server_changed","refused":1,"server":"fs","tenant":"acme","tool":"write"}`,
			`{"refusal_code":"server_changed","refused":1,"server":"web","tenant":"beta","tool":"fetch"}`,
		}},
		{"approvals", nil, []string{
			`{"actor":"alice","approved":1,"last_ms":` + ts(70) + `,"refused":0}`,
			`{"actor":"bob","approved":1,"last_ms":` + ts(35) + `,"refused":1}`,
		}},
		{"closed", nil, []string{
			`{"actor":"bob","last_ms":` + ts(20) + `,"reason_code":"quarantined","server":"db","status":"quarantined","tenant":"acme","variant":"default"}`,
			`{"actor":"system","last_ms":` + ts(110) + `,"reason_code":"drift","server":"fs","status":"changed","tenant":"acme","variant":"default"}`,
		}},
		{"drifts", []string{"--since", "1m"}, nil}, // everything is an hour old
	} {
		t.Run(tc.query+strings.Join(tc.args, "_"), func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"audit", tc.query, "--json", "--database", db}, tc.args...)
			getenv := func(k string) string {
				if k == "MCPDRIFT_CLICKHOUSE_ADDR" {
					return ch.Addr
				}
				return ""
			}
			if err := run(context.Background(), args, getenv, nil, &out, &errb); err != nil {
				t.Fatalf("driftctl %v: %v\n%s", args, err, errb.String())
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if line == "" {
					continue
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				norm, _ := json.Marshal(m) // sorted keys
				got = append(got, string(norm))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("driftctl audit %s:\ngot\n%s\nwant\n%s", tc.query, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}

	// The table form prints the same rows with times.
	var out bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"MCPDRIFT_CLICKHOUSE_ADDR": ch.Addr, "MCPDRIFT_AUDIT_DATABASE": db}[k]
	}
	if err := run(context.Background(), []string{"audit", "closed"}, getenv, nil, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "TENANT") ||
		!strings.Contains(lines[2], time.UnixMilli(t0+110_000).UTC().Format("2006-01-02T15:04:05.000Z")) {
		t.Errorf("table output:\n%s", out.String())
	}
}

func TestAuditErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown_query", []string{"audit", "everything"}, "usage: unknown audit query"},
		{"bad_database", []string{"audit", "drifts", "--database", "x;DROP"}, "usage: database"},
		{"negative_since", []string{"audit", "drifts", "--since", "-1h"}, "usage: --since"},
		{"unreachable", []string{"audit", "drifts", "--clickhouse", "127.0.0.1:1"}, "clickhouse_unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, func(string) string { return "" }, nil, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.HasPrefix(err.Error(), strings.SplitN(tc.want, ":", 2)[0]) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
