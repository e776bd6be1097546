package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

// auditQuery is one common question asked of the audit tables. Its SQL is
// printed verbatim in docs/analytics.md (a test holds them together): the
// database is written "mcpdrift." and SINCE_MS stands for the start of the
// period in Unix milliseconds (0 for everything).
type auditQuery struct {
	name, help, sql string
}

var auditQueries = []auditQuery{
	{"drifts", "servers by drift count", `SELECT tenant, server, uniqExact(event_id) AS drifts, max(at_ms) AS last_drift_ms
FROM mcpdrift.verdicts
WHERE reason_code = 'drift' AND at_ms >= SINCE_MS
GROUP BY tenant, server
ORDER BY drifts DESC, tenant, server`},
	{"approval-time", "time from drift to approval, per approval", `SELECT tenant, server, variant, approver, max(onset_ms) AS drift_ms, approved_ms,
       intDiv(approved_ms - drift_ms, 1000) AS seconds
FROM (
    SELECT DISTINCT tenant, server, variant, actor AS approver, at_ms AS approved_ms
    FROM mcpdrift.verdicts
    WHERE reason_code = 'approved' AND previous_status = 'changed' AND at_ms >= SINCE_MS
)
ALL INNER JOIN (
    SELECT DISTINCT tenant, server, variant, at_ms AS onset_ms
    FROM mcpdrift.verdicts
    WHERE reason_code = 'drift' AND previous_status != 'changed'
) USING (tenant, server, variant)
WHERE onset_ms <= approved_ms
GROUP BY tenant, server, variant, approver, approved_ms
ORDER BY approved_ms, tenant, server, variant`},
	{"refused", "refused calls by server and tool", `SELECT tenant, server, tool, refusal_code, uniqExactMerge(calls) AS refused
FROM mcpdrift.calls_hourly
WHERE outcome = 'refused' AND hour >= toStartOfHour(toDateTime(intDiv(SINCE_MS, 1000)))
GROUP BY tenant, server, tool, refusal_code
ORDER BY refused DESC, tenant, server, tool, refusal_code`},
	{"approvals", "approve requests by person", `SELECT actor, uniqExactIf(event_id, ok = 1) AS approved, uniqExactIf(event_id, ok = 0) AS refused,
       max(at_ms) AS last_ms
FROM mcpdrift.admin_actions
WHERE action = 'approve' AND at_ms >= SINCE_MS
GROUP BY actor
ORDER BY approved DESC, actor`},
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

const auditUsage = `Usage: driftctl audit QUERY [--since DURATION] [--json] [flags]

Runs a common query on the audit tables in ClickHouse (written by the audit
sink; docs/analytics.md has the SQL and more). QUERY is one of:
%s
`

var auditDatabasePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func runAudit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var names strings.Builder
	for _, q := range auditQueries {
		fmt.Fprintf(&names, "  %-14s %s\n", q.name, q.help)
	}
	addr, user, db := "127.0.0.1:9000", "default", "mcpdrift"
	var since time.Duration
	var asJSON bool
	c := options.Command{Name: "driftctl audit", Header: fmt.Sprintf(auditUsage, names.String()), Options: []options.Option{
		options.Opt("clickhouse", "MCPDRIFT_CLICKHOUSE_ADDR", "HOST:PORT", "ClickHouse native protocol address (password in MCPDRIFT_CLICKHOUSE_PASSWORD)", options.String(&addr)),
		options.Opt("user", "MCPDRIFT_CLICKHOUSE_USER", "USER", "ClickHouse user", options.String(&user)),
		options.Opt("database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "database of the audit tables", options.String(&db)),
		options.Opt("since", "", "DURATION", "only events of the last DURATION (like 24h, 720h); 0 for all", options.Duration(&since)),
		options.Opt("json", "", "", "print JSON lines instead of a table", options.Bool(&asJSON)),
	}}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		options.Usage(stderr, c.Header, c.Options)
		if len(args) == 0 {
			return options.Usagef("audit needs a QUERY")
		}
		return options.ErrHelp
	}
	var q *auditQuery
	for i := range auditQueries {
		if auditQueries[i].name == args[0] {
			q = &auditQueries[i]
		}
	}
	if q == nil {
		return usageOf(c, stderr, "unknown audit query %q", args[0])
	}
	if _, err := options.Parse(c, args[1:], getenv, stderr); err != nil {
		return err
	}
	if !auditDatabasePattern.MatchString(db) {
		return fmt.Errorf("usage: database %q must be a letter or _ followed by up to 62 of A-Z, a-z, 0-9 and _", db)
	}
	if since < 0 {
		return fmt.Errorf("usage: --since %v must not be negative", since)
	}
	sinceMs := int64(0)
	if since > 0 {
		sinceMs = time.Now().Add(-since).UnixMilli()
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        strings.Split(addr, ","),
		Auth:        clickhouse.Auth{Database: "default", Username: user, Password: getenv("MCPDRIFT_CLICKHOUSE_PASSWORD")},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("usage: --clickhouse %q: %v", addr, err)
	}
	defer conn.Close()
	sql := strings.ReplaceAll(strings.ReplaceAll(q.sql, "mcpdrift.", db+"."), "SINCE_MS", strconv.FormatInt(sinceMs, 10))
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		var ex *clickhouse.Exception
		if errors.As(err, &ex) {
			return coded.Errorf("clickhouse_error", "%s (code %d)", firstLine(ex.Message), ex.Code)
		}
		return coded.Errorf("clickhouse_unreachable", "%s: %v", addr, err)
	}
	defer rows.Close()
	cols := rows.Columns()
	types := rows.ColumnTypes()
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		for i, ct := range types {
			vals[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			return coded.Errorf("clickhouse_error", "reading a row: %v", err)
		}
		for i := range vals {
			vals[i] = reflect.ValueOf(vals[i]).Elem().Interface()
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		return coded.Errorf("clickhouse_error", "%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range out {
			m := make(map[string]any, len(cols))
			for i, c := range cols {
				m[c] = r[i]
			}
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(cols, "\t")))
	for _, r := range out {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = auditCell(cols[i], v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// auditCell formats one value for the table: *_ms columns as UTC times.
func auditCell(col string, v any) string {
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
