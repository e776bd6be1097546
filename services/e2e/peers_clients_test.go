package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionTimeout bounds one client session, connect to close.
const sessionTimeout = 90 * time.Second

// orphanWait bounds how long the output of a client process may stay open
// after the process exited: past it, a process the client started (the
// server, or the proxy and its server) outlived the session.
const orphanWait = 15 * time.Second

func orphanHint(err error) string {
	if errors.Is(err, exec.ErrWaitDelay) {
		return fmt.Sprintf(" (the client exited, but a process it started still held its output %s later: "+
			"the server outlived the session)", orphanWait)
	}
	return ""
}

// tsClient is the official TypeScript SDK's Client, run by
// testdata/ts-client.cjs with node.
type tsClient struct{ peers *npmPeers }

func (tsClient) name() string       { return "typescript-sdk" }
func (tsClient) supports(step) bool { return true }

func (c tsClient) run(t *testing.T, ep endpoint, roots []string, steps []step) transcript {
	t.Helper()
	env := map[string]string{}
	for _, kv := range ep.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	in := map[string]any{
		"endpoint": map[string]any{"transport": ep.Transport, "command": ep.Command, "env": env, "url": ep.URL, "headers": ep.Headers},
		"roots":    roots,
		"steps":    steps,
	}
	f := filepath.Join(t.TempDir(), "session.json")
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "ts-client.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, c.peers.dir, f)
	var stdout bytes.Buffer
	stderr := new(stderrTail)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = orphanWait
	if err := cmd.Run(); err != nil {
		t.Fatalf("typescript-sdk client: %v%s\n%s", err, orphanHint(err), stderr)
	}
	var tr transcript
	if err := json.Unmarshal(stdout.Bytes(), &tr); err != nil {
		t.Fatalf("typescript-sdk client output: %v: %.500s\n%s", err, stdout.Bytes(), stderr)
	}
	return tr
}

// goClient is the Go SDK's client (github.com/modelcontextprotocol/go-sdk),
// in the test process.
type goClient struct{}

func (goClient) name() string       { return "go-sdk" }
func (goClient) supports(step) bool { return true }

func (goClient) run(t *testing.T, ep endpoint, roots []string, steps []step) transcript {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	stderr := new(stderrTail)
	var tr mcp.Transport
	switch ep.Transport {
	case transportStdio:
		cmd := exec.Command(ep.Command[0], ep.Command[1:]...)
		cmd.Env = append(os.Environ(), ep.Env...)
		cmd.Stderr = stderr
		cmd.WaitDelay = orphanWait
		tr = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	case transportHTTP:
		tr = &mcp.StreamableClientTransport{Endpoint: ep.URL}
	default:
		t.Fatalf("go-sdk client: no %s transport in this harness", ep.Transport)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpdrift-e2e-go", Version: "1.0.0"}, nil)
	for _, r := range roots {
		// Roots are deprecated from protocol 2026-07-28 on, but these servers
		// speak 2025-11-25 and ask for them (a server-to-client request).
		//lint:ignore SA1019 see above
		c.AddRoots(&mcp.Root{URI: r, Name: "e2e"})
	}
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("go-sdk client: connecting: %v\n%s", err, stderr)
	}
	out := transcript{}
	if out.Initialize, err = json.Marshal(cs.InitializeResult()); err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		res, err := goStep(ctx, cs, s)
		rec := stepRecord{Method: s.Method}
		if err != nil {
			rec.Error = &stepError{Message: err.Error()}
			var werr *jsonrpc.Error
			if errors.As(err, &werr) {
				code := werr.Code
				rec.Error.Code = &code
			}
		} else if rec.Result, err = json.Marshal(res); err != nil {
			t.Fatal(err)
		}
		out.Steps = append(out.Steps, rec)
	}
	// Close ends the server as the spec says: input closed, SIGTERM, SIGKILL.
	// An exit status is the server's business; anything else means the
	// process or one it started did not go.
	var exit *exec.ExitError
	if err := cs.Close(); err != nil && !errors.As(err, &exit) {
		t.Errorf("go-sdk client: closing the session: %v%s\n%s", err, orphanHint(err), stderr)
	}
	return out
}

// goStep runs one step through the SDK's method for it.
func goStep(ctx context.Context, cs *mcp.ClientSession, s step) (any, error) {
	decode := func(p any) error {
		if len(s.Params) == 0 {
			return nil
		}
		return json.Unmarshal(s.Params, p)
	}
	switch s.Method {
	case "ping":
		return struct{}{}, cs.Ping(ctx, nil)
	case "tools/list":
		return call(decode, new(mcp.ListToolsParams), func(p *mcp.ListToolsParams) (any, error) { return cs.ListTools(ctx, p) })
	case "tools/call":
		return call(decode, new(mcp.CallToolParams), func(p *mcp.CallToolParams) (any, error) { return cs.CallTool(ctx, p) })
	case "prompts/list":
		return call(decode, new(mcp.ListPromptsParams), func(p *mcp.ListPromptsParams) (any, error) { return cs.ListPrompts(ctx, p) })
	case "prompts/get":
		return call(decode, new(mcp.GetPromptParams), func(p *mcp.GetPromptParams) (any, error) { return cs.GetPrompt(ctx, p) })
	case "resources/list":
		return call(decode, new(mcp.ListResourcesParams), func(p *mcp.ListResourcesParams) (any, error) { return cs.ListResources(ctx, p) })
	case "resources/templates/list":
		return call(decode, new(mcp.ListResourceTemplatesParams), func(p *mcp.ListResourceTemplatesParams) (any, error) {
			return cs.ListResourceTemplates(ctx, p)
		})
	case "resources/read":
		return call(decode, new(mcp.ReadResourceParams), func(p *mcp.ReadResourceParams) (any, error) { return cs.ReadResource(ctx, p) })
	case "completion/complete":
		return call(decode, new(mcp.CompleteParams), func(p *mcp.CompleteParams) (any, error) { return cs.Complete(ctx, p) })
	}
	return nil, fmt.Errorf("go-sdk client: no method for %s", s.Method)
}

func call[P any](decode func(any) error, p *P, f func(*P) (any, error)) (any, error) {
	if err := decode(p); err != nil {
		return nil, fmt.Errorf("decoding params: %w", err)
	}
	return f(p)
}

// inspectorClient is the MCP inspector's headless CLI (mcp-inspector --cli,
// package @modelcontextprotocol/inspector-cli): one process per request,
// each a whole session (initialize, the request, close). It prints the
// result alone, so its transcript has no initialize result.
type inspectorClient struct{ peers *npmPeers }

func (inspectorClient) name() string         { return "inspector-cli" }
func (inspectorClient) supports(s step) bool { return s.inspector }

func (c inspectorClient) run(t *testing.T, ep endpoint, _ []string, steps []step) transcript {
	t.Helper()
	var target []string
	switch ep.Transport {
	case transportStdio:
		target = ep.Command
	case transportHTTP:
		target = []string{ep.URL, "--transport", "http"}
	default:
		t.Fatalf("inspector-cli: no %s transport in this harness", ep.Transport)
	}
	out := transcript{}
	for _, s := range steps {
		args, err := inspectorArgs(s)
		if err != nil {
			t.Fatalf("inspector-cli: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
		cli := c.peers.bin(t, "@modelcontextprotocol/inspector-cli")
		cmd := exec.CommandContext(ctx, "node", append(append([]string{cli, "--cli"}, target...), args...)...)
		// It looks for its own package.json at ../package.json from the
		// working directory: run it from its build directory.
		cmd.Dir = filepath.Dir(cli)
		cmd.Env = append(os.Environ(), ep.Env...)
		var stdout bytes.Buffer
		stderr := new(stderrTail)
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		cmd.WaitDelay = orphanWait
		err = cmd.Run()
		cancel()
		rec := stepRecord{Method: s.Method}
		switch {
		case errors.Is(err, exec.ErrWaitDelay):
			t.Fatalf("inspector-cli %s: %v%s\n%s", s.Method, err, orphanHint(err), stderr)
		case err == nil:
			rec.Result = bytes.TrimSpace(stdout.Bytes())
			if !json.Valid(rec.Result) {
				t.Fatalf("inspector-cli %s: not JSON: %.500s\n%s", s.Method, rec.Result, stderr)
			}
		case ctx.Err() != nil:
			t.Fatalf("inspector-cli %s: no answer within %s\n%s", s.Method, sessionTimeout, stderr)
		default:
			// A failed request: it prints the error and exits 1.
			rec.Error = &stepError{Message: lastLine(stderr.String())}
		}
		out.Steps = append(out.Steps, rec)
	}
	return out
}

// inspectorArgs are the CLI's options for a step.
func inspectorArgs(s step) ([]string, error) {
	var p struct {
		Name      string
		URI       string
		Arguments map[string]any
	}
	if len(s.Params) > 0 {
		if err := json.Unmarshal(s.Params, &p); err != nil {
			return nil, err
		}
	}
	pairs := func(flag string) []string {
		if len(p.Arguments) == 0 {
			return nil
		}
		out := []string{flag}
		for k, v := range p.Arguments {
			var text string
			if str, ok := v.(string); ok {
				text = str
			} else {
				b, _ := json.Marshal(v)
				text = string(b)
			}
			out = append(out, k+"="+text)
		}
		return out
	}
	args := []string{"--method", s.Method}
	switch s.Method {
	case "tools/list", "prompts/list", "resources/list", "resources/templates/list":
	case "tools/call":
		args = append(append(args, "--tool-name", p.Name), pairs("--tool-arg")...)
	case "prompts/get":
		args = append(append(args, "--prompt-name", p.Name), pairs("--prompt-args")...)
	case "resources/read":
		args = append(args, "--uri", p.URI)
	default:
		return nil, fmt.Errorf("the CLI has no --method %s", s.Method)
	}
	return args, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
