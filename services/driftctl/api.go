package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/policy"
	"github.com/mcpdrift/mcpdrift/services/internal/status"
)

// apiClient talks to the drift service's admin API.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// apiConn is how a command reaches the admin API: the --api and --token
// options every API command takes, and the client they make.
type apiConn struct{ api, token string }

func newAPIConn() *apiConn { return &apiConn{api: "http://127.0.0.1:8470"} }

// options are the connection's options, followed by more.
func (c *apiConn) options(more ...options.Option) []options.Option {
	return append([]options.Option{
		options.Opt("api", "MCPDRIFT_API", "URL", "admin API base URL", options.String(&c.api)),
		options.Opt("token", "MCPDRIFT_TOKEN", "TOKEN", "admin API bearer token (prefer the variable: flags show in ps)", options.String(&c.token)),
	}, more...)
}

// client is the API client of the options as parsed.
func (c *apiConn) client() *apiClient {
	return &apiClient{base: strings.TrimRight(c.api, "/"), token: c.token, http: &http.Client{Timeout: 30 * time.Second}}
}

// apiError is an error answer of the API: printed as "code: message".
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// ErrorCode returns the API's code (package coded's Coder).
func (e *apiError) ErrorCode() string { return e.Code }

// ErrorMessage returns the API's sentence.
func (e *apiError) ErrorMessage() string { return e.Message }

// answerError reads an error answer: the API's {"error": {code, message}},
// or, from something else, its status and the start of its body.
func answerError(resp *http.Response, data []byte) error {
	var e struct {
		Error struct {
			Code, Message string
			Errors        []policy.Error // a refused policy document's
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return &apiError{Status: resp.StatusCode, Code: "api_error", Message: fmt.Sprintf("%s: %.200s", resp.Status, data)}
	}
	ae := apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	if len(e.Error.Errors) > 0 {
		return &policyError{apiError: ae, list: e.Error.Errors}
	}
	return &ae
}

// do sends body as JSON (none when nil) and reads the answer into out.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	if body == nil {
		return c.send(ctx, method, path, nil, "", out)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.send(ctx, method, path, b, "application/json", out)
}

// send sends body as it is, of the content type given (no body when
// contentType is empty), and reads the answer into out.
func (c *apiClient) send(ctx context.Context, method, path string, body []byte, contentType string, out any) error {
	var rd io.Reader
	if contentType != "" {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("usage: bad --api %q: %w", c.base, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return coded.Errorf("api_unreachable", "%w (is the drift service running at %s?)", err, c.base)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return coded.Errorf("api_unreachable", "reading the answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		return answerError(resp, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// serverPath builds /v1/servers/T/S from the positional arguments, which
// must be exactly a tenant and a server: a listing variant is named with
// --variant, never positionally (there is no implicit variant).
func serverPath(cmd string, args []string) (string, error) {
	if len(args) != 2 {
		extra := ""
		if len(args) == 3 {
			extra = fmt.Sprintf("; to name the listing variant %q give --variant %s", args[2], args[2])
		}
		return "", fmt.Errorf("usage: %s takes TENANT SERVER, got %d arguments%s", cmd, len(args), extra)
	}
	return "/v1/servers/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1]), nil
}

// withVariant adds ?variant= to a GET path when a variant is named.
func withVariant(p, variant string) string {
	if variant == "" {
		return p
	}
	return p + "?variant=" + url.QueryEscape(variant)
}

// printServers prints a table of servers and their variants: a row per
// variant, and a row for a held server no variant of which was seen yet.
func printServers(w io.Writer, servers []status.ServerShow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSERVER\tVARIANT\tSTATUS\tSERVED\tON DRIFT\tRISK\tBASELINE\tLIVE\tREASON")
	for _, sv := range servers {
		risk := "-"
		if sv.Risk != nil {
			risk = sv.Risk.Band + "/" + sv.Risk.Mode
		}
		if len(sv.Variants) == 0 {
			st, reason := "-", "-"
			if sv.Held {
				st, reason = "held", "quarantined"
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t%s\tfalse\t-\t%s\t-\t-\t%s\n", sv.Tenant, sv.Server, st, risk, reason)
			continue
		}
		for _, s := range sv.Variants {
			r := s.Record
			live := short(r.LiveHash)
			if r.LiveError != "" {
				live = "error:" + r.LiveError
			}
			st := string(r.Status)
			if sv.Held {
				st += " (server held)"
			}
			reason := r.Reason
			if r.PolicyWants != nil {
				// The policy asks for other hashing settings: they wait
				// for an explicit rebaseline.
				reason += " (policy wants " + r.PolicyWants.String() + ": rebaseline)"
			}
			served := fmt.Sprint(s.Serve)
			if r.Status == status.Changed && r.Withholding() {
				// withhold_changed: the unchanged items only, or nothing
				// when the instructions changed too.
				if s.Serve {
					served = "unchanged items"
				} else if r.InstructionsChanged() && !sv.Held {
					reason += " (instructions changed or not compared yet: whole server withheld)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\tv%d %s\t%s\t%s\n", r.Tenant, r.Server, r.Variant, st, served, r.Policy.OnDrift, risk,
				r.BaselineVersion, short(r.BaselineHash), live, reason)
		}
	}
	return tw.Flush()
}

func runAPI(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	synopsis := map[string]string{
		"status":      "status [--json] [TENANT SERVER]",
		"show":        "show [--variant V] TENANT SERVER",
		"server-diff": "diff --live [--variant V] TENANT SERVER",
		"history":     "history [--variant V] TENANT SERVER",
		"approve":     "approve --hash sha256:<hex> [--item KIND:NAME ...] [--variant V] TENANT SERVER",
		"quarantine":  "quarantine [--reason TEXT] [--preemptive] TENANT SERVER",
		"rebaseline":  "rebaseline --hash sha512:<hex> [--variant V] TENANT SERVER",
		"risk-set":    "risk set --band low|medium|high|critical --mode allow|quarantine|block [--reason TEXT] TENANT SERVER",
		"tail":        "tail",
	}[cmd]
	name := map[string]string{"server-diff": "diff --live", "risk-set": "risk set"}[cmd]
	if name == "" {
		name = cmd
	}
	conn := newAPIConn()
	var variant, hash, reason, band, mode string
	var items []string
	var asJSON, preemptive bool
	fs := command(name, synopsis, options.Interleaved, conn.options(
		options.Opt("json", "", "", "print the API's JSON instead of a table (status)", options.Bool(&asJSON)),
		options.Opt("hash", "", "HASH", "the live manifest hash you reviewed and approve; the variant live at it is approved (approve); the live hash with the settings the policy asks for (rebaseline)", options.String(&hash)),
		options.Opt("item", "", "KIND:NAME", "approve only this item's live definition, the rest staying as approved (approve); repeat for more: tool:NAME, prompt:NAME, resource:URI, resourceTemplate:URI_TEMPLATE, uiContent:URI (what a ui:// resource read returns), promptMessages:NAME (what a prompts/get of an argument-less prompt returns), instructions, server", (*itemsValue)(&items)),
		options.Opt("reason", "", "TEXT", "why (quarantine, risk set)", options.String(&reason)),
		options.Opt("band", "", "BAND", "the risk band: low, medium, high or critical (risk set)", options.String(&band)),
		options.Opt("mode", "", "MODE", "the enforcement mode: allow, quarantine or block (risk set)", options.String(&mode)),
		options.Opt("preemptive", "", "", "quarantine a server never observed yet, so that its first listing comes up held (quarantine)", options.Bool(&preemptive)),
		options.Opt("variant", "", "V", "the listing variant, only where the server has several the command could mean (show, diff --live, history, approve, rebaseline)", options.String(&variant)),
	)...)
	pos, err := options.Parse(fs, args, getenv, stderr)
	if err != nil {
		return err
	}
	c := conn.client()
	switch cmd {
	case "status":
		var list []status.ServerShow
		switch len(pos) {
		case 0:
			if err := c.do(ctx, "GET", "/v1/servers", nil, &list); err != nil {
				return err
			}
		default:
			p, err := serverPath(name, pos)
			if err != nil {
				options.Usage(stderr, fs.Header, fs.Options)
				return err
			}
			var one status.ServerShow
			if err := c.do(ctx, "GET", p, nil, &one); err != nil {
				return err
			}
			list = []status.ServerShow{one}
		}
		if asJSON {
			return writeJSON(stdout, list)
		}
		return printServers(stdout, list)
	case "show", "server-diff", "history":
		p, err := serverPath(name, pos)
		if err != nil {
			options.Usage(stderr, fs.Header, fs.Options)
			return err
		}
		p += map[string]string{"show": "", "server-diff": "/diff", "history": "/history"}[cmd]
		var out json.RawMessage
		if err := c.do(ctx, "GET", withVariant(p, variant), nil, &out); err != nil {
			return ambiguityHint(err)
		}
		return writeJSON(stdout, out)
	case "approve", "rebaseline":
		p, err := serverPath(name, pos)
		if err != nil || hash == "" {
			options.Usage(stderr, fs.Header, fs.Options)
			what := "the live hash you reviewed (see driftctl show)"
			if cmd == "rebaseline" {
				what = "the live hash with the settings the policy asks for (policy_wants_live_hash in driftctl show)"
			}
			return errors.Join(err, fmt.Errorf("usage: %s needs --hash, %s", cmd, what))
		}
		if items != nil && cmd != "approve" {
			options.Usage(stderr, fs.Header, fs.Options)
			return errors.New("usage: rebaseline moves the whole approved manifest; it takes no --item")
		}
		body := map[string]any{"hash": hash}
		if variant != "" {
			body["variant"] = variant
		}
		if items != nil {
			body["items"] = items
		}
		var out json.RawMessage
		if err := c.do(ctx, "POST", p+"/"+cmd, body, &out); err != nil {
			return ambiguityHint(err)
		}
		return writeJSON(stdout, out)
	case "risk-set":
		p, err := serverPath(name, pos)
		if err != nil || band == "" || mode == "" {
			options.Usage(stderr, fs.Header, fs.Options)
			return errors.Join(err, errors.New("usage: risk set needs --band and --mode"))
		}
		var out json.RawMessage
		if err := c.do(ctx, "POST", p+"/risk", map[string]string{"band": band, "mode": mode, "reason": reason}, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	case "quarantine":
		p, err := serverPath(name, pos)
		if err == nil && variant != "" {
			err = errors.New("usage: quarantine holds the whole server, every listing variant present and future; it takes no --variant")
		}
		if err != nil {
			options.Usage(stderr, fs.Header, fs.Options)
			return err
		}
		var out json.RawMessage
		body := map[string]any{"reason": reason}
		if preemptive {
			body["preemptive"] = true
		}
		if err := c.do(ctx, "POST", p+"/quarantine", body, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	case "tail":
		return tail(ctx, c, stdout, stderr)
	}
	return fmt.Errorf("usage: unknown command %q", cmd)
}

// itemsValue is --item: each flag adds one KIND:NAME, whole (a name may
// hold commas), which the drift service checks.
type itemsValue []string

func (v *itemsValue) String() string { return "" }
func (v *itemsValue) Set(s string) error {
	*v = append(*v, s)
	return nil
}

// ambiguityHint says how to name a variant when the API found the choice
// ambiguous.
func ambiguityHint(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == "variant_ambiguous" {
		ae.Message += " (give --variant)"
	}
	return err
}

// tail follows verdicts until interrupted, one JSON object a line.
func tail(ctx context.Context, c *apiClient, stdout, stderr io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/verdicts", nil)
	if err != nil {
		return fmt.Errorf("usage: bad --api %q: %w", c.base, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return coded.Errorf("api_unreachable", "%w (is the drift service running at %s?)", err, c.base)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return answerError(resp, data)
	}
	fmt.Fprintf(stderr, "driftctl: following verdicts at %s (Ctrl-C to stop)\n", c.base)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if _, err := fmt.Fprintln(stdout, sc.Text()); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of a tail
	}
	if err := sc.Err(); err != nil {
		return coded.Errorf("api_unreachable", "the verdict stream broke: %w", err)
	}
	return coded.New("api_unreachable", "the drift service closed the verdict stream")
}

func short(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12]
	}
	if h == "" {
		return "-"
	}
	return h
}
