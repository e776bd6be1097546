package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
)

const policyUsage = `Usage: driftctl policy apply|list|test [flags]

The per-call policy (docs/policy.md), through the drift service's admin API
(--api or MCPDRIFT_API, token in MCPDRIFT_TOKEN):
  apply FILE|-   validate a policy document (YAML or JSON) as a whole and, if
                 it has no error, replace the stored policy of every tenant it
                 names (version + 1 each; tenants it does not name are left as
                 they are); on any error nothing is applied and every error is
                 printed, one a line, with its code, rule id and field;
                 --clear TENANT empties a tenant's policy (write role)
  list           the stored policy of every tenant, or of one (--tenant), with
                 its rules (read role)
  test           evaluate a call against a tenant's stored policy, with the
                 server's drift state and risk mode from the status bucket,
                 without calling anything: the rule, action and reason, and
                 the shadow rule (read role)

Run "driftctl policy COMMAND --help" for a command's flags.
`

func runPolicy(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, policyUsage)
		if len(args) == 0 {
			return options.Usagef("policy needs a command: apply, list or test")
		}
		return options.ErrHelp
	}
	conn := newAPIConn()
	switch args[0] {
	case "apply":
		var clear []string
		c := command("policy apply", "policy apply [--clear TENANT]... FILE|-", options.Interleaved, conn.options(
			options.Opt("clear", "", "TENANT", "empty this tenant's policy (repeatable, or comma-separated); the file may then be left out", options.List(&clear, func(s string) (string, error) { return s, nil })))...)
		pos, err := options.Parse(c, args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		if len(pos) > 1 || len(pos) == 0 && len(clear) == 0 {
			return usageOf(c, stderr, "policy apply takes one FILE (or - for stdin), or --clear TENANT")
		}
		var data []byte
		if len(pos) == 1 {
			if data, err = readInput(pos[0], stdin); err != nil {
				return err
			}
		}
		q := url.Values{"clear": clear}
		var out policy.ApplyResult
		ct := "application/yaml"
		if data == nil {
			ct = ""
		}
		if err := conn.client().send(ctx, "PUT", "/v1/policy?"+q.Encode(), data, ct, &out); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tVERSION\tRULES\tRESULT\tHASH")
		for _, a := range out.Applied {
			res := "unchanged"
			switch {
			case a.Cleared && a.Changed:
				res = "cleared"
			case a.Changed:
				res = "applied"
			}
			fmt.Fprintf(tw, "%s\tv%d\t%d\t%s\t%s\n", a.Tenant, a.Version, a.Rules, res, short(a.Hash))
		}
		return tw.Flush()
	case "list":
		var tenant string
		var asJSON bool
		c := command("policy list", "policy list [--tenant T] [--json]", options.NoArgs, conn.options(
			options.Opt("tenant", "", "T", "only this tenant, with its rules", options.String(&tenant)),
			options.Opt("json", "", "", "print the stored records as JSON", options.Bool(&asJSON)))...)
		if _, err := options.Parse(c, args[1:], getenv, stderr); err != nil {
			return err
		}
		p := "/v1/policy"
		if tenant != "" {
			p += "?tenant=" + url.QueryEscape(tenant)
		}
		var list []policy.Stored
		if err := conn.client().do(ctx, "GET", p, nil, &list); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, list)
		}
		if tenant != "" && len(list) == 0 {
			fmt.Fprintf(stdout, "tenant %s has no policy\n", tenant)
			return nil
		}
		return printPolicies(stdout, list, tenant != "")
	case "test":
		var t policyTest
		var asJSON bool
		c := command("policy test", "policy test --tenant T --server S --tool NAME [--args JSON] [--agent A] [--drifted true|false] [--risk MODE] [--json]", options.NoArgs, conn.options(
			options.Opt("tenant", "", "T", "the tenant (required)", options.String(&t.Tenant)),
			options.Opt("server", "", "S", "the server (required)", options.String(&t.Server)),
			options.Opt("tool", "", "NAME", "the tool called (required)", options.String(&t.Tool)),
			options.Opt("args", "", "JSON", "the call's arguments, a JSON object", options.String(&t.args)),
			options.Opt("agent", "", "A", "the authenticated agent making the call", options.String(&t.Agent)),
			options.Opt("drifted", "", "true|false", "judge the server as drifted or not, instead of by its status", options.String(&t.drifted)),
			options.Opt("risk", "", "MODE", "judge the server by this risk mode (allow, quarantine, block) instead of its status's", options.String(&t.Risk)),
			options.Opt("json", "", "", "print the API's JSON", options.Bool(&asJSON)))...)
		if _, err := options.Parse(c, args[1:], getenv, stderr); err != nil {
			return err
		}
		if t.Tenant == "" || t.Server == "" || t.Tool == "" {
			return usageOf(c, stderr, "policy test needs --tenant, --server and --tool")
		}
		body := map[string]any{"tenant": t.Tenant, "server": t.Server, "tool": t.Tool}
		if t.args != "" {
			if !json.Valid([]byte(t.args)) {
				return usageOf(c, stderr, "--args is not JSON: %.80s", t.args)
			}
			body["args"] = json.RawMessage(t.args)
		}
		if t.Agent != "" {
			body["agent"] = t.Agent
		}
		switch t.drifted {
		case "":
		case "true", "false":
			body["drifted"] = t.drifted == "true"
		default:
			return usageOf(c, stderr, "--drifted %q: want true or false", t.drifted)
		}
		if t.Risk != "" {
			body["risk"] = t.Risk
		}
		var out json.RawMessage
		if err := conn.client().do(ctx, "POST", "/v1/policy/test", body, &out); err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, out)
		}
		return printPolicyTest(stdout, out)
	}
	fmt.Fprint(stderr, policyUsage)
	return options.Usagef("unknown policy command %q (want apply, list or test)", args[0])
}

type policyTest struct {
	Tenant, Server, Tool, Agent, Risk string
	args, drifted                     string
}

// policyError is a refused document: the API's error and every error of
// the document, printed one a line under it.
type policyError struct {
	apiError
	list []policy.Error
}

func (e *policyError) Error() string { return e.Code + ": " + e.ErrorMessage() }

// ErrorMessage is the API's sentence, then each error of the document on a
// line of its own: "  <code>: line N: <rule>: <field>: <sentence>".
func (e *policyError) ErrorMessage() string {
	var b strings.Builder
	b.WriteString("the policy document was refused whole; nothing was applied")
	for i := range e.list {
		b.WriteString("\n  ")
		b.WriteString(e.list[i].Error())
	}
	return b.String()
}

// printPolicies prints a table of tenants' policies and, with rules, a
// table of each one's rules in evaluation order.
func printPolicies(w io.Writer, list []policy.Stored, rules bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tVERSION\tRULES\tSHADOW\tDRIFT\tRISK\tUPDATED_BY\tUPDATED_AT\tHASH")
	for _, st := range list {
		shadow := 0
		for _, r := range st.Document.Rules {
			if r.Shadow {
				shadow++
			}
		}
		fmt.Fprintf(tw, "%s\tv%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", st.Tenant, st.Version, len(st.Document.Rules), shadow,
			len(st.Document.Drift), len(st.Document.Risk), st.UpdatedBy,
			time.UnixMilli(st.UpdatedAtMs).UTC().Format(time.RFC3339), short(st.Hash))
	}
	if err := tw.Flush(); err != nil || !rules {
		return err
	}
	for _, st := range list {
		if len(st.Document.Rules) == 0 {
			continue
		}
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPRIORITY\tSERVER\tTOOL\tAGENT\tDRIFTED\tARGS\tACTION\tSHADOW\tREASON")
		for _, r := range policy.Ordered(st.Document.Rules) {
			drifted := "-"
			if r.Drifted != nil {
				drifted = fmt.Sprint(*r.Drifted)
			}
			var args []string
			for _, a := range r.Args {
				v, _ := json.Marshal(a.Value)
				not := ""
				if a.Not {
					not = "not "
				}
				args = append(args, fmt.Sprintf("%s %s%s %s", a.Path, not, a.Op, v))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", r.ID, r.Priority, orAny(r.Server), orAny(r.Tool), orAny(r.Agent),
				drifted, orDash(strings.Join(args, " and ")), r.Action, r.Shadow, orDash(r.Reason))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printPolicyTest prints the outcome of a test, one "field: value" a line.
func printPolicyTest(w io.Writer, raw json.RawMessage) error {
	var r policy.TestResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	rule := r.Rule
	if rule == "" {
		rule = "(none matched)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "policy:\t%s v%d\n", r.Tenant, r.Version)
	fmt.Fprintf(tw, "call:\t%s/%s\n", r.Server, r.Tool)
	fmt.Fprintf(tw, "server:\tdrifted %v, risk mode %s (from %s)\n", r.Drifted, orDash(string(r.Risk)), r.StateFrom)
	fmt.Fprintf(tw, "rule:\t%s\n", rule)
	fmt.Fprintf(tw, "action:\t%s\n", r.Action)
	if r.Reason != "" {
		fmt.Fprintf(tw, "reason:\t%s\n", r.Reason)
	}
	if r.Code != "" {
		fmt.Fprintf(tw, "code:\t%s\n", r.Code)
	}
	if r.Mode != "" {
		fmt.Fprintf(tw, "risk mode applied:\t%s\n", r.Mode)
	}
	if len(r.Redact) > 0 {
		fmt.Fprintf(tw, "redact:\t%s\n", strings.Join(r.Redact, ", "))
	}
	if len(r.Sanitized) > 0 {
		fmt.Fprintf(tw, "forwarded args:\t%s\n", r.Sanitized)
	}
	if r.ShadowRule != "" {
		fmt.Fprintf(tw, "shadow:\t%s (%s, recorded, not enforced)\n", r.ShadowRule, r.ShadowAction)
	} else {
		fmt.Fprintf(tw, "shadow:\t-\n")
	}
	return tw.Flush()
}
