// Package auditq is the common questions asked of the audit tables in
// ClickHouse (written by the audit sink; docs/analytics.md prints their
// SQL, and a test holds the two together): the queries, and one way to run
// them. driftctl audit prints their answers; the review console shows them.
package auditq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// Query is one common question asked of the audit tables. Its SQL is
// printed verbatim in docs/analytics.md: the database is written
// "mcpdrift." and SINCE_MS stands for the start of the period in Unix
// milliseconds (0 for everything). A query whose SQL holds @agent takes an
// agent to keep to (RunFor; ” for every agent), bound by the client as a
// quoted literal.
type Query struct {
	Name, Help, SQL string
}

// Queries are the common questions, in the order they are listed.
var Queries = []Query{
	{"drifts", "servers by drift count", `SELECT tenant, server, uniqExact(event_id) AS drifts, max(at_ms) AS last_drift_ms
FROM mcpdrift.verdicts
WHERE reason_code = 'drift' AND at_ms >= SINCE_MS
GROUP BY tenant, server
ORDER BY drifts DESC, tenant, server`},
	{"drifts-per-day", "drifts per day (UTC)", `SELECT toString(toDate(toDateTime(intDiv(at_ms, 1000), 'UTC'))) AS day, uniqExact(event_id) AS drifts
FROM mcpdrift.verdicts
WHERE reason_code = 'drift' AND at_ms >= SINCE_MS
GROUP BY day
ORDER BY day`},
	{"approval-time", "time from drift to approval, per approval", `SELECT tenant, server, variant, approver, max(onset_ms) AS drift_ms, approved_ms,
       intDiv(approved_ms - drift_ms, 1000) AS seconds
FROM (
    SELECT DISTINCT tenant, server, variant, actor AS approver, at_ms AS approved_ms
    FROM mcpdrift.verdicts
    WHERE reason_code = 'approved' AND previous_status = 'changed' AND at_ms >= SINCE_MS
) AS approvals
ALL INNER JOIN (
    SELECT DISTINCT tenant, server, variant, at_ms AS onset_ms
    FROM mcpdrift.verdicts
    WHERE reason_code = 'drift' AND previous_status != 'changed'
) AS onsets USING (tenant, server, variant)
WHERE onset_ms <= approved_ms
GROUP BY tenant, server, variant, approver, approved_ms
ORDER BY approved_ms, tenant, server, variant`},
	{"refused", "refused calls by server and tool", `SELECT tenant, server, tool, refusal_code, uniqExactMerge(calls) AS refused
FROM mcpdrift.calls_hourly
WHERE outcome = 'refused' AND hour >= toStartOfHour(toDateTime(intDiv(SINCE_MS, 1000)))
GROUP BY tenant, server, tool, refusal_code
ORDER BY refused DESC, tenant, server, tool, refusal_code`},
	{"agents", "tool calls by agent, server and tool (--agent keeps one agent)", `SELECT agent, tenant, server, tool, uniqExact(event_id) AS calls,
       uniqExactIf(event_id, outcome = 'refused') AS refused, uniqExactIf(event_id, outcome = 'error') AS errors, max(at_ms) AS last_ms
FROM mcpdrift.call_observations
WHERE at_ms >= SINCE_MS AND (@agent = '' OR agent = @agent)
GROUP BY agent, tenant, server, tool
ORDER BY calls DESC, agent, tenant, server, tool`},
	{"approvals", "approve requests by person", `SELECT actor, uniqExactIf(event_id, ok = 1) AS approved, uniqExactIf(event_id, ok = 0) AS refused,
       max(at_ms) AS last_ms
FROM mcpdrift.admin_actions
WHERE action = 'approve' AND at_ms >= SINCE_MS
GROUP BY actor
ORDER BY approved DESC, actor`},
	{"policy-denials", "calls the per-call policy refused, by rule and code", `SELECT tenant, server, policy_rule, refusal_code, uniqExact(event_id) AS denied, max(at_ms) AS last_ms
FROM mcpdrift.call_observations
WHERE outcome = 'refused' AND substring(refusal_code, 1, 7) = 'policy_' AND at_ms >= SINCE_MS
GROUP BY tenant, server, policy_rule, refusal_code
ORDER BY denied DESC, tenant, server, policy_rule, refusal_code`},
	{"held-calls", "calls held for approval: how each ended and who resolved it", `SELECT approval_id, any(tenant) AS tenant, any(server) AS server, any(tool) AS tool, any(policy_rule) AS rule,
       any(approval_outcome) AS outcome, any(approval_actor) AS resolved_by, max(at_ms) AS last_ms
FROM mcpdrift.call_observations
WHERE approval_id != '' AND at_ms >= SINCE_MS
GROUP BY approval_id
ORDER BY last_ms DESC, approval_id`},
	{"shadow", "calls a shadow rule matched (recorded, not enforced), by rule", `SELECT tenant, server, shadow_rule, shadow_action, policy_action, uniqExact(event_id) AS calls, max(at_ms) AS last_ms
FROM mcpdrift.call_observations
WHERE shadow_rule != '' AND at_ms >= SINCE_MS
GROUP BY tenant, server, shadow_rule, shadow_action, policy_action
ORDER BY calls DESC, tenant, server, shadow_rule`},
	{"closed", "servers currently closed (tools withheld), by their latest verdict", `SELECT tenant, server, variant, status, reason_code, actor, last_ms
FROM (
    SELECT tenant, server, variant, argMax(status, at_ms) AS status, argMax(serve, at_ms) AS serve,
           argMax(reason_code, at_ms) AS reason_code, argMax(actor, at_ms) AS actor, max(at_ms) AS last_ms
    FROM mcpdrift.verdicts
    GROUP BY tenant, server, variant
)
WHERE serve = 0
ORDER BY last_ms, tenant, server, variant`},
}

// Find returns the query named name.
func Find(name string) (Query, bool) {
	for _, q := range Queries {
		if q.Name == name {
			return q, true
		}
	}
	return Query{}, false
}

var databasePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidDatabase reports a database name that cannot be one (the name is
// written into the SQL).
func ValidDatabase(db string) error {
	if !databasePattern.MatchString(db) {
		return fmt.Errorf("database %q must be a letter or _ followed by up to 62 of A-Z, a-z, 0-9 and _", db)
	}
	return nil
}

// Conn is a ClickHouse connection (clickhouse.Conn).
type Conn = clickhouse.Conn

// Open returns a connection to the servers at addr (comma-separated
// host:port of the native protocol); it dials when first used.
func Open(addr, user, password string) (Conn, error) {
	return clickhouse.Open(&clickhouse.Options{
		Addr:        strings.Split(addr, ","),
		Auth:        clickhouse.Auth{Database: "default", Username: user, Password: password},
		DialTimeout: 5 * time.Second,
	})
}

// Result is a query's answer: its columns and rows, each value of the
// column's Go type.
type Result struct {
	Columns []string
	Rows    [][]any
}

// ByAgent reports whether q keeps to one agent when asked (RunFor).
func (q Query) ByAgent() bool { return strings.Contains(q.SQL, "@agent") }

// Run asks q of the audit tables in database db, for events since sinceMs
// (0: all). Its errors carry a code: clickhouse_error (the server refused
// or failed the query) or clickhouse_unreachable.
func Run(ctx context.Context, conn Conn, db string, q Query, sinceMs int64) (*Result, error) {
	return RunFor(ctx, conn, db, q, sinceMs, "")
}

// RunFor is Run keeping to one agent's events (agent; "" for all) where q
// can (ByAgent); a query that cannot is a bad_request for an agent.
func RunFor(ctx context.Context, conn Conn, db string, q Query, sinceMs int64, agent string) (*Result, error) {
	if err := ValidDatabase(db); err != nil {
		return nil, coded.Errorf("bad_request", "%w", err)
	}
	var args []any
	switch {
	case q.ByAgent():
		args = append(args, clickhouse.Named("agent", agent))
	case agent != "":
		return nil, coded.Errorf("bad_request", "query %s does not keep to an agent", q.Name)
	}
	sql := strings.ReplaceAll(strings.ReplaceAll(q.SQL, "mcpdrift.", db+"."), "SINCE_MS", strconv.FormatInt(sinceMs, 10))
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) {
			return nil, coded.Errorf("clickhouse_error", "%s (code %d)", firstLine(ex.Message), ex.Code)
		}
		return nil, coded.Errorf("clickhouse_unreachable", "%v", err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns()}
	types := rows.ColumnTypes()
	for rows.Next() {
		vals := make([]any, len(res.Columns))
		for i, ct := range types {
			vals[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, coded.Errorf("clickhouse_error", "reading a row: %v", err)
		}
		for i := range vals {
			vals[i] = reflect.ValueOf(vals[i]).Elem().Interface()
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, coded.Errorf("clickhouse_error", "%v", err)
	}
	return res, nil
}

// Cell formats one value for a table: *_ms columns as UTC times, an empty
// string as "-".
func Cell(col string, v any) string {
	if ms, ok := v.(int64); ok && strings.HasSuffix(col, "_ms") {
		return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	if s, ok := v.(string); ok && s == "" {
		return "-"
	}
	return fmt.Sprint(v)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
