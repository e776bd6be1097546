// Command driftctl is the mcpdrift operator CLI: it fingerprints and diffs
// MCP server surfaces, captures what a server advertises, and drives the
// drift service's admin API (status, show, diff --live, history, approve,
// quarantine, rebaseline, risk set, tail, policy), queries the audit tables, and sets up the bus
// (bus-setup), and routes agent hosts' MCP servers through the proxy (wrap,
// unwrap).
//
// Exit status: 0 success (for diff of two files: nothing changed), 1 diff of
// two files found a change or bus-setup --check found an object missing, 2
// error; errors print "driftctl: <code>: <sentence>" on stderr. diff --live prints the report and exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const usage = `driftctl: the mcpdrift operator CLI

Usage:
  driftctl fingerprint [--json] [--no-annotations] [--hash sha256|sha512] FILE|-
  driftctl diff [--no-annotations] OLD NEW
  driftctl capture [flags] -- COMMAND [ARGS...]
  driftctl status [--json] [TENANT SERVER]
  driftctl show [--variant V] TENANT SERVER
  driftctl diff --live [--variant V] TENANT SERVER
  driftctl history [--variant V] TENANT SERVER
  driftctl approve --hash sha256:<hex> [--item KIND:NAME ...] [--variant V] TENANT SERVER
  driftctl quarantine [--reason TEXT] [--preemptive] TENANT SERVER
  driftctl rebaseline --hash sha512:<hex> [--variant V] TENANT SERVER
  driftctl risk set --band B --mode M [--reason TEXT] TENANT SERVER
  driftctl tail
  driftctl audit drifts|drifts-per-day|approval-time|refused|approvals|closed [--since DURATION] [--json]
  driftctl bus-setup [--nats-url URL] [--nats-creds FILE] [--replicas N] [--check]
  driftctl bus-setup --site --tenant T [--hub-domain D] [--nats-url URL] [--check]
  driftctl baseline keygen --out FILE
  driftctl baseline export --sign KEY TENANT SERVER
  driftctl baseline verify --key PUB FILE|-
  driftctl baseline import --key PUB FILE|-
  driftctl policy apply [--clear TENANT] FILE|-
  driftctl policy list [--tenant T] [--json]
  driftctl policy test --tenant T --server S --tool NAME [--args JSON] [--agent A]
  driftctl wrap --client claude-desktop|claude-code|cursor|vscode [--config FILE] [--dry-run]
  driftctl unwrap --client CLIENT [--config FILE] [--dry-run]

Commands on files:
  fingerprint  print the fingerprint of a server surface (sha256, or --hash sha512)
  diff         classify what changed between two surfaces (JSON report)
  capture      run an MCP server over stdio and capture what it advertises

Commands against the drift service's admin API (--api or MCPDRIFT_API,
token in MCPDRIFT_TOKEN). They name a server; a server has a status record
per listing variant (what clients declared, which servers list differently
for), and --variant is needed only where a command could mean several (the
error, variant_ambiguous, names them):
  status       every server (or one) with the status of each variant
  show         one server: its hold and every variant's record and diff
  diff --live  the live manifest against the approved baseline
  history      every baseline version of each variant
  approve      re-baseline to the live manifest, naming the hash you reviewed
               (the variant live at that hash); lifts a quarantine. With
               --item KIND:NAME (repeatable: tool:NAME, prompt:NAME,
               resource:URI, resourceTemplate:URI_TEMPLATE, uiContent:URI,
               promptMessages:NAME, instructions, server)
               only those items' live definitions are approved; the server
               stays changed while other differences remain
  quarantine   withhold a server, every variant present and future, until an
               explicit approve; --preemptive for a server never observed
  rebaseline   move a verified variant to the hashing settings its tenant's
               policy asks for (hash, annotations), naming its live hash with
               them (policy_wants_live_hash in show)
  risk set     set a server's risk band (low, medium, high, critical) and
               mode (allow, quarantine, block); re-scans only tighten them
  tail         follow verdicts as they happen (JSON lines)
  baseline     baselines as code: export a server's approved baselines as a
               signed lockfile, verify one, import one ("driftctl baseline
               --help"; keygen and verify need no API)
  policy       the per-call policy: apply a policy file (validated whole,
               nothing applied on any error), list the stored policies, test
               a call against one ("driftctl policy --help")
  pending      calls held for approval by the per-call policy (--all: and
               the recently resolved)
  resolve      approve or deny a held call: resolve ID approve|deny (write
               role); the proxy holding it forwards or refuses it

Commands against the audit tables in ClickHouse (--clickhouse or
MCPDRIFT_CLICKHOUSE_ADDR; "driftctl audit --help" lists the queries):
  audit        servers by drift count, time from drift to approval, refused
               calls by server and tool, approvals by person, servers closed

Commands against NATS (--nats-url or MCPDRIFT_NATS_URL, --nats-creds or
MCPDRIFT_NATS_CREDS):
  bus-setup    create or update the streams and buckets (the administrator,
               once per deployment) and exit; --check only checks them;
               --site: a site's leaf node, its mirrors of the hub's status

Commands on an agent host's MCP configuration ("driftctl wrap --help"):
  wrap         route every MCP server of Claude Desktop, Claude Code, Cursor
               or VS Code through the proxy, keeping a backup
  unwrap       put the configuration back as it was before the wrap

Input is a tools/list (or prompts/list, resources/list, templates/list)
result, a JSON-RPC response carrying one, an initialize result, or a capture:
  {"initialize": R, "tools": {"pages": [R, ...]}, "prompts": {...},
   "resources": {...}, "resourceTemplates": {...}}

Exit status: 0 ok (diff: no change), 1 diff found a change (bus-setup --check:
something is missing), 2 error.
Run "driftctl COMMAND --help" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(os.Stderr, err)) // the only exit
}

// report writes err as "driftctl: <code>: <sentence>" on w and returns the
// exit status: 0 done (or --help), 1 a finding (options.ExitStatus(1): diff
// found a change, bus-setup --check found something missing), and 2 for
// any error, a usage error as every command (options.ExitUsage) and a
// failure too, since 1 is a finding here, as diff(1) has it.
func report(w io.Writer, err error) int {
	var finding options.ExitStatus
	if errors.As(err, &finding) {
		return int(finding)
	}
	if options.Report(w, "driftctl", err) == options.ExitOK {
		return options.ExitOK
	}
	return options.ExitUsage
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return options.Usagef("no command")
	}
	switch args[0] {
	case "fingerprint":
		return runFingerprint(args[1:], stdin, stdout, stderr)
	case "diff":
		for i, a := range args[1:] {
			if a == "--live" || a == "-live" {
				rest := append(append([]string{}, args[1:i+1]...), args[i+2:]...)
				return runAPI(ctx, "server-diff", rest, getenv, stdout, stderr)
			}
		}
		return runDiff(args[1:], stdin, stdout, stderr)
	case "status", "show", "history", "approve", "quarantine", "rebaseline", "tail":
		return runAPI(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "risk":
		if len(args) < 2 || args[1] != "set" {
			fmt.Fprint(stderr, usage)
			return options.Usagef("risk takes the subcommand set: driftctl risk set --band B --mode M TENANT SERVER")
		}
		return runAPI(ctx, "risk-set", args[2:], getenv, stdout, stderr)
	case "capture":
		return runCapture(ctx, args[1:], stdout, stderr)
	case "audit":
		return runAudit(ctx, args[1:], getenv, stdout, stderr)
	case "bus-setup":
		return runBusSetup(ctx, args[1:], getenv, stdout, stderr)
	case "policy":
		return runPolicy(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "baseline":
		return runBaseline(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "pending", "resolve":
		return runApprovals(ctx, args[0], args[1:], getenv, stdout, stderr)
	case "wrap", "unwrap":
		return runWrap(args[1:], args[0] == "unwrap", getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return options.Usagef("unknown command %q", args[0])
}
