package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpdrift/mcpdrift/services/internal/status"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// The sample server's releases (see the demoserver command).
const (
	reviewedRelease = "1.0.0"
	rugPullRelease  = "1.1.0"
	demoWait        = 30 * time.Second
)

// record is a variant's status record (the contract, package status) with
// the diff the admin API shows with it.
type record struct {
	status.Record
	Diff *surface.Report
}

// player plays the demo: it prints each step and fails on the first
// surprise, with what it expected and what it saw.
type player struct {
	in      Info
	token   string
	out     io.Writer
	http    *http.Client
	step    int
	drifted int // variants of the server whose live manifest differs, at the last wait
}

func demo(ctx context.Context, cfg DemoConfig, out io.Writer) error {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dataDir, infoFile))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stack_not_running: no stack runs on %s; start it first with make run (or bin/stack --data-dir %s)", dataDir, cfg.DataDir)
	}
	if err != nil {
		return fmt.Errorf("reading the stack's info: %w", err)
	}
	p := &player{out: out, http: &http.Client{Timeout: 10 * time.Second}}
	if err := json.Unmarshal(b, &p.in); err != nil {
		return fmt.Errorf("stack info %s: %w", filepath.Join(dataDir, infoFile), err)
	}
	tokens, err := os.ReadFile(p.in.TokensFile)
	if err != nil {
		return fmt.Errorf("reading admin tokens: %w", err)
	}
	if p.token, err = writeToken(tokens); err != nil {
		return err
	}
	if _, err := p.get(ctx, "/healthz"); err != nil {
		return fmt.Errorf("stack_not_running: the admin API at %s does not answer (%v); start the stack with make run", p.in.AdminURL, err)
	}
	return p.play(ctx)
}

func (p *player) say(format string, args ...any) {
	p.step++
	fmt.Fprintf(p.out, "\n%d. %s\n", p.step, fmt.Sprintf(format, args...))
}

func (p *player) detail(format string, args ...any) {
	fmt.Fprintf(p.out, "   %s\n", fmt.Sprintf(format, args...))
}

func (p *player) play(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintf(p.out, "mcpdrift demo: a rug pull of the sample server %q, seen through the proxy at %s\n", p.in.Server, p.in.MCPURL)

	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpdrift-demo-agent", Version: "1.0.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.in.MCPURL}, nil)
	if err != nil {
		return fmt.Errorf("connecting to the proxy at %s: %w", p.in.MCPURL, err)
	}
	defer cs.Close()

	// Set the scene: the reviewed release, verified.
	rec, err := p.reviewed(ctx, cs)
	if err != nil {
		return err
	}
	p.say("The agent connects through the proxy. The server is %s (baseline v%d, %s).", rec.Status, rec.BaselineVersion, short(rec.BaselineHash))
	tools, err := p.listTools(ctx, cs)
	if err != nil {
		return err
	}
	p.detail("tools/list: %s", strings.Join(tools, ", "))
	text, isErr, err := p.call(ctx, cs, "search_notes", map[string]any{"query": "fail"})
	if err != nil {
		return err
	}
	if isErr {
		return fmt.Errorf("demo_unexpected: search_notes failed on a verified server: %s", text)
	}
	p.detail("tools/call search_notes: %s", firstLine(text))

	p.say("The vendor ships release %s: read_note now asks for ~/.ssh/id_rsa, and export_notes appears.", rugPullRelease)
	if err := p.ship(ctx, rugPullRelease); err != nil {
		return err
	}
	select {
	case <-changed:
		p.detail("the agent got notifications/tools/list_changed; the proxy re-lists upstream by itself")
	case <-time.After(5 * time.Second):
		p.detail("no list_changed reached the agent yet; the proxy re-lists upstream by itself")
	}
	rec, err = p.waitRecord(ctx, "changed", func(r record) bool { return r.Status == "changed" })
	if err != nil {
		return err
	}
	p.say("The pipeline's verdict: %s (severity %s, %s), on every proxy that fronts %q.", rec.Status, rec.Severity, rec.Reason, p.in.Server)

	tools, err = p.listTools(ctx, cs)
	if err != nil {
		return err
	}
	p.say("The proxy fails closed.")
	p.detail("tools/list: %d tools (withheld)", len(tools))
	if len(tools) != 0 {
		return fmt.Errorf("demo_unexpected: the proxy served %d tools of a changed server: %v", len(tools), tools)
	}
	text, isErr, err = p.call(ctx, cs, "read_note", map[string]any{"id": "n1", "context": "-----BEGIN OPENSSH PRIVATE KEY-----"})
	if err != nil {
		return err
	}
	if !isErr {
		return fmt.Errorf("demo_unexpected: a call to a changed server was not refused: %s", text)
	}
	p.detail("tools/call read_note refused: %s", firstLine(text))

	p.say("An admin reviews the diff (driftctl diff --live %s%s %s):", p.variantFlag(rec), p.in.Tenant, p.in.Server)
	if rec.Diff == nil {
		return errors.New("demo_unexpected: the status record of a changed server has no diff")
	}
	p.printDiff(rec.Diff)

	p.say("The admin approves the manifest they reviewed (driftctl approve --hash %s %s %s).", rec.LiveHash, p.in.Tenant, p.in.Server)
	approved, err := p.approve(ctx, rec)
	if err != nil {
		return err
	}
	p.detail("%s, baseline v%d", approved.Status, approved.BaselineVersion)
	tools, err = p.listTools(ctx, cs)
	if err != nil {
		return err
	}
	p.detail("tools/list: %s", strings.Join(tools, ", "))
	if len(tools) != 3 {
		return fmt.Errorf("demo_unexpected: after approval the proxy serves %d tools, want 3: %v", len(tools), tools)
	}

	return p.audit(ctx, start)
}

// reviewed brings the sample server to the reviewed release and a verified
// status, approving it when an earlier demo left it elsewhere.
func (p *player) reviewed(ctx context.Context, cs *mcp.ClientSession) (record, error) {
	current, err := p.release(ctx)
	if err != nil {
		return record{}, err
	}
	since := int64(0)
	if current != reviewedRelease {
		fmt.Fprintf(p.out, "(resetting: the sample server advertises %s; shipping %s back and approving it)\n", current, reviewedRelease)
		since = time.Now().UnixMilli()
		if err := p.ship(ctx, reviewedRelease); err != nil {
			return record{}, err
		}
	}
	if _, err := p.listTools(ctx, cs); err != nil { // first sight, or the reverted listing
		return record{}, err
	}
	rec, err := p.waitRecord(ctx, "a verdict on release "+reviewedRelease, func(r record) bool {
		return r.LiveObservedMs >= since && r.Status != "unknown" && r.Status != ""
	})
	if err != nil || rec.Status == "verified" {
		return rec, err
	}
	// Drift never passes silently: even a return to an approved release
	// stays changed until an admin approves it.
	return p.approve(ctx, rec)
}

// approve approves the live manifest of a status record, as the admin
// does with driftctl approve --hash: the server's variants live at that
// hash are approved.
func (p *player) approve(ctx context.Context, rec record) (record, error) {
	var out status.ServerShow
	if err := p.post(ctx, p.serverPath()+"/approve", map[string]string{"hash": rec.LiveHash}, &out); err != nil {
		return record{}, err
	}
	for _, v := range out.Variants {
		if v.Record.Variant == rec.Variant {
			return record{Record: v.Record}, nil
		}
	}
	return record{}, fmt.Errorf("demo_unexpected: the approval's answer lacks variant %s", rec.Variant)
}

// variantFlag is the --variant a driftctl diff --live of rec needs: none
// unless another variant of the server has drifted too.
func (p *player) variantFlag(rec record) string {
	if p.drifted > 1 {
		return "--variant " + rec.Variant + " "
	}
	return ""
}

func (p *player) listTools(ctx context.Context, cs *mcp.ClientSession) ([]string, error) {
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("tools/list through the proxy: %w", err)
	}
	names := make([]string, 0, len(res.Tools))
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names, nil
}

func (p *player) call(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", false, fmt.Errorf("tools/call %s through the proxy: %w", tool, err)
	}
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, " "), res.IsError, nil
}

func (p *player) release(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.in.DemoControlURL, nil)
	resp, err := p.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking the sample server its release: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), nil
}

func (p *player) ship(ctx context.Context, release string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.in.DemoControlURL, strings.NewReader(url.Values{"release": {release}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("shipping release %s: %w", release, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("shipping release %s: %s: %s", release, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

func (p *player) serverPath() string {
	return "/v1/servers/" + url.PathEscape(p.in.Tenant) + "/" + url.PathEscape(p.in.Server)
}

// waitRecord polls the admin API for the sample server's most recently
// observed variant record until it satisfies ok, and returns it with its
// diff.
func (p *player) waitRecord(ctx context.Context, what string, ok func(record) bool) (record, error) {
	deadline := time.Now().Add(demoWait)
	var last record
	for {
		b, err := p.get(ctx, p.serverPath())
		if err != nil && !strings.Contains(err.Error(), "404") {
			return record{}, err
		}
		var sv status.ServerShow
		if err == nil {
			if err := json.Unmarshal(b, &sv); err != nil {
				return record{}, fmt.Errorf("reading the server's status: %w", err)
			}
		}
		found, drifted := false, 0
		for _, sh := range sv.Variants {
			if sh.Diff != nil {
				drifted++
			}
			if r := sh.Record; !found || r.LiveObservedMs > last.LiveObservedMs {
				last, found = record{Record: r, Diff: sh.Diff}, true
			}
		}
		if found && ok(last) {
			p.drifted = drifted
			return last, nil
		}
		if time.Now().After(deadline) {
			return record{}, fmt.Errorf("demo_timeout: waited %s for %s; the last status of %s was %q (see the logs in %s)", demoWait, what, p.in.Server, last.Status, p.in.Logs)
		}
		select {
		case <-ctx.Done():
			return record{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (p *player) printDiff(rep *surface.Report) {
	p.detail("drift: severity %s, %s -> %s", rep.Severity, short(rep.OldHash.String()), short(rep.NewHash.String()))
	show := func(verb string, items []surface.ItemDiff) {
		for _, it := range items {
			var kinds []string
			count := map[string]int{}
			for _, c := range it.Changes {
				k := c.Kind + " (" + c.Severity.String() + ")"
				if count[k]++; count[k] == 1 {
					kinds = append(kinds, k)
				}
			}
			for i, k := range kinds {
				if count[k] > 1 {
					kinds[i] = fmt.Sprintf("%s x%d", k, count[k])
				}
			}
			line := fmt.Sprintf("%s %s %q, %s", verb, it.Kind, it.Name, it.Severity)
			if len(kinds) > 0 {
				line += ": " + strings.Join(kinds, ", ")
			}
			p.detail("%s", line)
		}
	}
	show("added", rep.Added)
	show("removed", rep.Removed)
	show("changed", rep.Changed)
}

// audit reads back from ClickHouse what the audit service wrote of the demo.
func (p *player) audit(ctx context.Context, since time.Time) error {
	if p.in.ClickHouseAddr == "" {
		p.say("Audit: ClickHouse is not configured for this stack, so there are no audit rows to read back.")
		p.detail("the events wait in JetStream; start ClickHouse with scripts/clickhouse.sh start and run make run again")
		return nil
	}
	p.say("The audit trail, read back from ClickHouse (%s, database %s):", p.in.ClickHouseAddr, p.in.AuditDatabase)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.in.ClickHouseAddr}, Auth: clickhouse.Auth{Database: "default"}})
	if err != nil {
		return fmt.Errorf("connecting to clickhouse: %w", err)
	}
	defer conn.Close()
	db, ms := p.in.AuditDatabase, since.Add(-time.Second).UnixMilli()
	where := fmt.Sprintf("tenant = '%s' AND server = '%s' AND at_ms >= %d", p.in.Tenant, p.in.Server, ms)
	queries := []struct {
		what, sql string
		ok        func([]string) bool
	}{
		{"listings observed", "SELECT toString(count()) FROM " + db + ".list_observations FINAL WHERE " + where,
			func(r []string) bool { return len(r) == 1 && r[0] != "0" }},
		{"tool calls", "SELECT concat(tool, ' ', outcome, if(refusal_code = '', '', concat(' ', refusal_code))) FROM " + db + ".call_observations FINAL WHERE " + where + " ORDER BY at_ms",
			func(r []string) bool {
				return hasPrefix(r, "read_note refused") && hasPrefix(r, "search_notes forwarded")
			}},
		{"verdicts", "SELECT concat(status, ' v', toString(baseline_version), ' ', reason_code) FROM " + db + ".verdicts FINAL WHERE " + where + " ORDER BY at_ms",
			func(r []string) bool { return hasPrefix(r, "changed") && hasPrefix(r, "verified") }},
		{"admin decisions", "SELECT concat(action, ' by ', actor, if(ok = 1, ' ok', ' refused')) FROM " + db + ".admin_actions FINAL WHERE " + where + " AND action IN ('approve', 'quarantine') ORDER BY at_ms",
			func(r []string) bool { return hasPrefix(r, "approve by admin ok") }},
	}
	for _, q := range queries {
		var rows []string
		deadline := time.Now().Add(demoWait)
		for {
			rows, err = queryStrings(ctx, conn, q.sql)
			if err == nil && q.ok(rows) {
				break
			}
			if time.Now().After(deadline) {
				if err != nil {
					return fmt.Errorf("demo_timeout: reading the audit %s: %w", q.what, err)
				}
				return fmt.Errorf("demo_timeout: waited %s for the audit %s, have %q (is the audit service running? see %s)", demoWait, q.what, rows, p.in.Logs)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
		p.detail("%s: %s", q.what, strings.Join(rows, "; "))
	}
	fmt.Fprintln(p.out, "\nDone: the rug pull was caught, withheld, reviewed, approved and audited.")
	return nil
}

func queryStrings(ctx context.Context, conn clickhouse.Conn, sql string) ([]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func hasPrefix(rows []string, prefix string) bool {
	for _, r := range rows {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

func (p *player) get(ctx context.Context, path string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.in.AdminURL+path, nil)
	return p.do(req)
}

func (p *player) post(ctx context.Context, path string, body, into any) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.in.AdminURL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	out, err := p.do(req)
	if err != nil {
		return err
	}
	return json.Unmarshal(out, into)
}

func (p *player) do(req *http.Request) ([]byte, error) {
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API %s %s: %s: %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

func short(hash string) string {
	if len(hash) > 19 {
		return hash[:19] + "…"
	}
	return hash
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
