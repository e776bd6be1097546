package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

// captureHelperEnv makes TestCaptureHelperServer act as a one-tool MCP
// server when the test binary re-runs itself (the os/exec helper-process
// pattern), so the other tests can start a real process.
const captureHelperEnv = "MCPDRIFT_DRIFTCTL_HELPER_SERVER"

const helperTools = `{"tools":[{"name":"t","description":"a <b> & c","inputSchema":{"type":"object"}}]}`

func TestCaptureHelperServer(t *testing.T) {
	if os.Getenv(captureHelperEnv) == "" {
		t.Skip("helper process for the capture tests; runs only when re-executed by them")
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			os.Exit(2)
		}
		switch req.Method {
		case "initialize":
			fmt.Fprintf(os.Stderr, "helper: initialize params %s\n", req.Params)
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"helper","version":"0"}}}`+"\n", req.ID)
		case "tools/list":
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", req.ID, helperTools)
		}
	}
	os.Exit(0)
}

// helperArgs returns the command line after "--" that starts the helper server.
func helperArgs(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("finding test binary: %v", err)
	}
	t.Setenv(captureHelperEnv, "1") // inherited by the server; tests using it cannot be parallel
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	return []string{exe, "-test.run=^TestCaptureHelperServer$"}
}

func TestRunCapture(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := append([]string{"--timeout", "20s", "--client-capabilities", `{"roots": {}}`, "--protocol-version", "2025-03-26", "--"}, helperArgs(t)...)
	if err := runCapture(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("runCapture: %v\nstderr:\n%s", err, stderr.String())
	}
	want := `{"initialize":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"helper","version":"0"}},"tools":{"pages":[` + helperTools + `]}}` + "\n"
	if stdout.String() != want {
		t.Errorf("stdout =\n%s\nwant\n%s", stdout.String(), want)
	}
	wantParams := `helper: initialize params {"protocolVersion":"2025-03-26","capabilities":{"roots":{}},"clientInfo":{"name":"mcpdrift-capture","version":"0.1.0"}}`
	if !strings.Contains(stderr.String(), wantParams) {
		t.Errorf("stderr lacks %s; it is:\n%s", wantParams, stderr.String())
	}
}

func TestRunCaptureUsageErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		want       string // substring of the error
		is         error
		wantStderr string // substring of what was printed
	}{
		{name: "help", args: []string{"-h"}, is: options.ErrHelp, wantStderr: "Usage: driftctl capture [flags] -- COMMAND"},
		{name: "no_command", args: []string{"--timeout", "5s"}, want: "needs the server command", wantStderr: "Usage:"},
		{name: "no_command_after_dashes", args: []string{"--"}, want: "needs the server command"},
		{name: "unknown_flag", args: []string{"--bogus", "--", "srv"}, is: options.ErrUsage, want: "flag provided but not defined: -bogus"},
		{name: "bad_timeout", args: []string{"--timeout", "0s", "--", "srv"}, want: "--timeout 0s must be positive"},
		{name: "bad_max_pages", args: []string{"--max-pages", "0", "--", "srv"}, want: "--max-pages 0 must be positive"},
		{name: "capabilities_not_object", args: []string{"--client-capabilities", "[]", "--", "srv"}, want: "client capabilities must be a JSON object"},
		{name: "missing_executable", args: []string{"--", "/nonexistent/mcp-server"}, want: `starting server "/nonexistent/mcp-server"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := runCapture(context.Background(), tt.args, &stdout, &stderr)
			if err == nil {
				t.Fatalf("runCapture succeeded, want an error")
			}
			if tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q lacks %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q; it is:\n%s", tt.wantStderr, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}
