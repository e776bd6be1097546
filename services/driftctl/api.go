package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// apiClient talks to the drift service's admin API.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// apiFlags adds the flags every API command shares.
func apiFlags(fs *flag.FlagSet, getenv func(string) string) (*string, *string) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	api := fs.String("api", env("MCPDRIFT_API", "http://127.0.0.1:8470"), "admin API base `URL` (MCPDRIFT_API)")
	token := fs.String("token", "", "admin API bearer `token` (MCPDRIFT_TOKEN; prefer the variable: flags show in ps)")
	return api, token
}

// apiError is an error answer of the API: printed as "code: message".
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// answerError reads an error answer: the API's {"error": {code, message}},
// or, from something else, its status and the start of its body.
func answerError(resp *http.Response, data []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return &apiError{Status: resp.StatusCode, Code: "api_error", Message: fmt.Sprintf("%s: %.200s", resp.Status, data)}
	}
	return &apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}

func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("usage: bad --api %q: %w", c.base, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("api_unreachable: %w (is the drift service running at %s?)", err, c.base)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("api_unreachable: reading the answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		return answerError(resp, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// serverPath builds /v1/servers/T/S/V from positional arguments; the
// variant defaults to "default".
func serverPath(args []string) (string, error) {
	if len(args) < 2 || len(args) > 3 {
		return "", errors.New("usage: give TENANT SERVER [VARIANT]")
	}
	if len(args) == 2 {
		args = append(args, "default")
	}
	return "/v1/servers/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1]) + "/" + url.PathEscape(args[2]), nil
}

type record struct {
	Tenant          string `json:"tenant"`
	Server          string `json:"server"`
	Variant         string `json:"variant"`
	Status          string `json:"status"`
	BaselineVersion int64  `json:"baseline_version"`
	BaselineHash    string `json:"baseline_hash"`
	LiveHash        string `json:"live_hash"`
	LiveError       string `json:"live_error"`
	Severity        string `json:"severity"`
	Reason          string `json:"reason"`
	UpdatedAtMs     int64  `json:"updated_at_ms"`
}

type show struct {
	Record record `json:"record"`
	Serve  bool   `json:"serve"`
}

func runAPI(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	synopsis := map[string]string{
		"status":      "status [--json]",
		"show":        "show TENANT SERVER [VARIANT]",
		"server-diff": "diff --live TENANT SERVER [VARIANT]",
		"history":     "history TENANT SERVER [VARIANT]",
		"approve":     "approve --hash sha256:<hex> TENANT SERVER [VARIANT]",
		"quarantine":  "quarantine [--reason TEXT] TENANT SERVER [VARIANT]",
		"tail":        "tail",
	}[cmd]
	fs := newFlags(cmd, synopsis, stderr)
	api, token := apiFlags(fs, getenv)
	asJSON := fs.Bool("json", false, "print the API's JSON instead of a table (status)")
	hash := fs.String("hash", "", "the live manifest hash you reviewed and approve (approve)")
	reason := fs.String("reason", "", "why (quarantine)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *token == "" {
		*token = getenv("MCPDRIFT_TOKEN") // not a flag default: --help would print it
	}
	c := &apiClient{base: strings.TrimRight(*api, "/"), token: *token, http: &http.Client{Timeout: 30 * time.Second}}
	switch cmd {
	case "status":
		var list []show
		if err := c.do(ctx, "GET", "/v1/servers", nil, &list); err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tSERVER\tVARIANT\tSTATUS\tSERVED\tBASELINE\tLIVE\tREASON")
		for _, s := range list {
			r := s.Record
			live := short(r.LiveHash)
			if r.LiveError != "" {
				live = "error:" + r.LiveError
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\tv%d %s\t%s\t%s\n", r.Tenant, r.Server, r.Variant, r.Status, s.Serve,
				r.BaselineVersion, short(r.BaselineHash), live, r.Reason)
		}
		return tw.Flush()
	case "show", "server-diff", "history":
		p, err := serverPath(fs.Args())
		if err != nil {
			fs.Usage()
			return err
		}
		p += map[string]string{"show": "", "server-diff": "/diff", "history": "/history"}[cmd]
		var out json.RawMessage
		if err := c.do(ctx, "GET", p, nil, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	case "approve":
		p, err := serverPath(fs.Args())
		if err != nil || *hash == "" {
			fs.Usage()
			return errors.Join(err, errors.New("usage: approve needs --hash, the live hash you reviewed (see driftctl show)"))
		}
		var out json.RawMessage
		if err := c.do(ctx, "POST", p+"/approve", map[string]string{"hash": *hash}, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	case "quarantine":
		p, err := serverPath(fs.Args())
		if err != nil {
			fs.Usage()
			return err
		}
		var out json.RawMessage
		if err := c.do(ctx, "POST", p+"/quarantine", map[string]string{"reason": *reason}, &out); err != nil {
			return err
		}
		return writeJSON(stdout, out)
	case "tail":
		return tail(ctx, c, stdout, stderr)
	}
	return fmt.Errorf("usage: unknown command %q", cmd)
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
		return fmt.Errorf("api_unreachable: %w (is the drift service running at %s?)", err, c.base)
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
		return fmt.Errorf("api_unreachable: the verdict stream broke: %w", err)
	}
	return errors.New("api_unreachable: the drift service closed the verdict stream")
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
