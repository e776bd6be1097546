package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/auditq"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const auditUsage = `Usage: driftctl audit QUERY [--since DURATION] [--agent NAME] [--json] [flags]

Runs a common query on the audit tables in ClickHouse (written by the audit
sink; docs/analytics.md has the SQL and more). QUERY is one of:
%s
`

func runAudit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var names strings.Builder
	for _, q := range auditq.Queries {
		fmt.Fprintf(&names, "  %-14s %s\n", q.Name, q.Help)
	}
	addr, user, db := "127.0.0.1:9000", "default", "mcpdrift"
	var since time.Duration
	var asJSON bool
	var agent string
	c := options.Command{Name: "driftctl audit", Header: fmt.Sprintf(auditUsage, names.String()), Options: []options.Option{
		options.Opt("clickhouse", "MCPDRIFT_CLICKHOUSE_ADDR", "HOST:PORT", "ClickHouse native protocol address (password in MCPDRIFT_CLICKHOUSE_PASSWORD)", options.String(&addr)),
		options.Opt("user", "MCPDRIFT_CLICKHOUSE_USER", "USER", "ClickHouse user", options.String(&user)),
		options.Opt("database", "MCPDRIFT_AUDIT_DATABASE", "NAME", "database of the audit tables", options.String(&db)),
		options.Opt("since", "", "DURATION", "only events of the last DURATION (like 24h, 720h); 0 for all", options.Duration(&since)),
		options.Opt("agent", "", "NAME", "only this agent's events (the proxy's authenticated agent; queries that group by agent)", options.String(&agent)),
		options.Opt("json", "", "", "print JSON lines instead of a table", options.Bool(&asJSON)),
	}}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		options.Usage(stderr, c.Header, c.Options)
		if len(args) == 0 {
			return options.Usagef("audit needs a QUERY")
		}
		return options.ErrHelp
	}
	q, ok := auditq.Find(args[0])
	if !ok {
		return usageOf(c, stderr, "unknown audit query %q", args[0])
	}
	if _, err := options.Parse(c, args[1:], getenv, stderr); err != nil {
		return err
	}
	if err := auditq.ValidDatabase(db); err != nil {
		return fmt.Errorf("usage: %v", err)
	}
	if since < 0 {
		return fmt.Errorf("usage: --since %v must not be negative", since)
	}
	if agent != "" && !q.ByAgent() {
		return fmt.Errorf("usage: --agent: query %s does not keep to an agent", q.Name)
	}
	sinceMs := int64(0)
	if since > 0 {
		sinceMs = time.Now().Add(-since).UnixMilli()
	}
	conn, err := auditq.Open(addr, user, getenv("MCPDRIFT_CLICKHOUSE_PASSWORD"))
	if err != nil {
		return fmt.Errorf("usage: --clickhouse %q: %v", addr, err)
	}
	defer conn.Close()
	res, err := auditq.RunFor(ctx, conn, db, q, sinceMs, agent)
	if err != nil {
		if coded.CodeOf(err) == "clickhouse_unreachable" {
			return coded.Errorf("clickhouse_unreachable", "%s: %s", addr, coded.MessageOf(err))
		}
		return err
	}
	cols, out := res.Columns, res.Rows
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
			cells[i] = visible(auditq.Cell(cols[i], v))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
