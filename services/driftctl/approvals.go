package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/mcpdrift/mcpdrift/services/internal/approval"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

// approvalsBody is the body of GET /v1/approvals (admin.ApprovalsShow).
type approvalsBody struct {
	Pending []approval.Show `json:"pending"`
	Recent  []approval.Show `json:"recent"`
}

// runApprovals runs pending (list the calls held for approval) and
// resolve (approve or deny one).
func runApprovals(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	synopsis := map[string]string{
		"pending": "pending [--all] [--json]",
		"resolve": "resolve [--reason TEXT] ID approve|deny",
	}[cmd]
	conn := newAPIConn()
	var reason string
	var asJSON, all bool
	fs := command(cmd, synopsis, options.Interleaved, conn.options(
		options.Opt("json", "", "", "print the API's JSON instead of a table (pending)", options.Bool(&asJSON)),
		options.Opt("all", "", "", "also the recently resolved and expired requests (pending)", options.Bool(&all)),
		options.Opt("reason", "", "TEXT", "why (resolve); the agent reads it in the refusal of a denied call", options.String(&reason)),
	)...)
	pos, err := options.Parse(fs, args, getenv, stderr)
	if err != nil {
		return err
	}
	c := conn.client()
	switch cmd {
	case "pending":
		if len(pos) != 0 {
			options.Usage(stderr, fs.Header, fs.Options)
			return options.Usagef("pending takes no arguments")
		}
		var body approvalsBody
		if err := c.do(ctx, http.MethodGet, "/v1/approvals", nil, &body); err != nil {
			return err
		}
		if !all {
			body.Recent = nil
		}
		if asJSON {
			return writeJSON(stdout, body)
		}
		return printApprovals(stdout, append(body.Pending, body.Recent...))
	case "resolve":
		if len(pos) != 2 || (pos[1] != "approve" && pos[1] != "deny") {
			options.Usage(stderr, fs.Header, fs.Options)
			return options.Usagef("resolve needs an approval id and approve or deny")
		}
		if err := approval.ValidID(pos[0]); err != nil {
			return options.Usagef("%v", err)
		}
		var out approval.Show
		if err := c.do(ctx, http.MethodPost, "/v1/approvals/"+pos[0]+"/"+pos[1], map[string]string{"reason": reason}, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	}
	return errors.New("usage: unknown command " + cmd)
}

// printApprovals prints one request a line.
func printApprovals(w io.Writer, list []approval.Show) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTENANT\tSERVER\tTOOL\tRULE\tREQUESTED\tEXPIRES\tBY")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, visible(a.Tenant), visible(a.Server), visible(a.Tool), visible(orDash(a.Rule)),
			time.UnixMilli(a.RequestedAtMs).UTC().Format(time.RFC3339), time.UnixMilli(a.ExpiresAtMs).UTC().Format(time.RFC3339), visible(orDash(a.Actor)))
	}
	return tw.Flush()
}

// visible makes a string fit for a terminal: each control character (C0,
// DEL, C1: escape sequences, carriage return, bell) and each format
// character (bidi controls, zero-width) is drawn as its code point,
// ⟦U+001B⟧, as the review console draws them. A table of driftctl prints
// text others chose (the tool name of a held call is an agent's) that
// could otherwise redraw the reviewer's screen.
func visible(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "⟦U+%04X⟧", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func hidden(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }
