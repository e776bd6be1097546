package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/surface"
)

// fakeConfig returns a Config that runs the test binary as a fake server.
func fakeConfig(t *testing.T, mode string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("finding test binary: %v", err)
	}
	return Config{
		Command: exe,
		// The race detector otherwise sleeps a second as the server exits.
		Env:     append(os.Environ(), fakeServerEnv+"="+mode, "GORACE=atexit_sleep_ms=0"),
		Timeout: 20 * time.Second,
	}
}

func TestRunCapturesRawBytes(t *testing.T) {
	t.Parallel()
	var out, stderr bytes.Buffer
	if err := Run(context.Background(), fakeConfig(t, "full"), &out, &stderr); err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, stderr.String())
	}
	want := `{"initialize":` + fakeInit +
		`,"tools":{"pages":[` + fakeTools1 + `,` + fakeTools2 + `,` + fakeTools3 + `]}` +
		`,"prompts":{"pages":[` + fakePrompts + `]}` +
		`,"resources":{"pages":[` + fakeResources1 + `,` + fakeResources2 + `]}` +
		`,"resourceTemplates":{"pages":[` + fakeTemplates + `]}` +
		`,"promptMessages":{"greet":` + fakeGreet + `}}` + "\n"
	if got := out.String(); got != want {
		t.Errorf("capture differs\ngot:  %s\nwant: %s", got, want)
	}
	if !bytes.Contains(out.Bytes(), []byte(`"description":"<b>&amp; \u003cnot a tag\u003e \"quoted\" é"`)) {
		t.Errorf("capture lost the raw description bytes: %s", out.String())
	}
	if !json.Valid(out.Bytes()) {
		t.Errorf("capture is not valid JSON: %s", out.String())
	}

	// What the fake server saw, as it reported on its stderr.
	for _, want := range []string{
		`fake: initialize {"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpdrift-capture","version":"0.1.0"}}}`,
		`fake: initialized`,
		`fake: reply {"jsonrpc":"2.0","id":"srv-1","error":{"code":-32601,"message":"method not supported by capture client"}}`,
		`fake: reply {"jsonrpc":"2.0","id":7,"result":{}}`,
	} {
		if !strings.Contains(stderr.String(), want+"\n") {
			t.Errorf("server stderr lacks %q; it is:\n%s", want, stderr.String())
		}
	}
}

// A capture holds what a proxy pins beside the listings, got as the proxy
// gets it: the contents of every UI resource (a ui:// uri, or one a tool's
// UI link names) and the messages of every prompt that takes no
// arguments; never a resource that is no UI, nor a prompt with arguments.
// The engine reads them as items.
func TestRunCapturesUIContentsAndPromptMessages(t *testing.T) {
	t.Parallel()
	var out, stderr bytes.Buffer
	if err := Run(context.Background(), fakeConfig(t, "apps"), &out, &stderr); err != nil {
		t.Fatalf("Run: %v\nserver stderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{
		`,"uiContents":{"https://apps.example/widget.html":` + fakeAppsRead("https://apps.example/widget.html") +
			`,"ui://notes/view.html":` + fakeAppsRead("ui://notes/view.html") + `}`,
		`,"promptMessages":{"emptyArgs":{"messages":[{"role":"user","content":{"type":"text","text":"prompt emptyArgs"}}]},` +
			`"plain":{"messages":[{"role":"user","content":{"type":"text","text":"prompt plain"}}]}}}`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("capture lacks %s\nit is: %s", want, out.String())
		}
	}
	for _, never := range []string{"fake: read file:///data", "fake: get withArgs"} {
		if strings.Contains(stderr.String(), never) {
			t.Errorf("the capture asked for what a proxy does not pin (%s)", never)
		}
	}
	sf, err := surface.Parse(out.Bytes(), surface.Options{Form: surface.FormV2})
	if err != nil {
		t.Fatal(err)
	}
	if ui, pm := len(sf.Of(surface.KindUIContent)), len(sf.Of(surface.KindPromptMessages)); ui != 2 || pm != 2 {
		t.Fatalf("the engine reads %d UI contents and %d prompt messages, want 2 and 2", ui, pm)
	}
}

func TestRunOmitsUnadvertisedLists(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(context.Background(), fakeConfig(t, "toolsOnly"), &out, nil); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := `{"initialize":` + fakeInitToolsOnly + `,"tools":{"pages":[` + fakeTools3 + `]}}` + "\n"
	if got := out.String(); got != want {
		t.Errorf("capture differs\ngot:  %s\nwant: %s", got, want)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		mode      string
		configure func(*Config)
		want      []string // substrings of the error
		is        error    // if set, errors.Is must hold
		within    time.Duration
	}{
		{
			name: "repeated_cursor",
			mode: "repeatCursor",
			want: []string{`reading tools/list page 3: server repeated cursor "a" first returned on page 1`},
		},
		{
			name:      "too_many_pages",
			mode:      "endless",
			configure: func(c *Config) { c.MaxPages = 5 },
			want:      []string{"reading tools/list page 6: server has more than the limit of 5 pages"},
		},
		{
			name: "rpc_error",
			mode: "rpcError",
			want: []string{"reading tools/list page 1: server error -32603: tool registry on fire"},
		},
		{
			name: "null_id_error",
			mode: "nullIDError",
			want: []string{"reading tools/list page 1: server answered with null id: server error -32700: Parse error"},
		},
		{
			name:      "line_too_long",
			mode:      "longLine",
			configure: func(c *Config) { c.MaxLineBytes = 1024 },
			want:      []string{"reading tools/list page 1: server sent a stdout line longer than 1024 bytes"},
		},
		{
			name: "server_exits_early",
			mode: "exitEarly",
			want: []string{"reading initialize result: server closed stdout before answering (exit status 3)"},
		},
		{
			name: "stalled_server_times_out",
			mode: "stall",
			// Long enough for a loaded machine to carry the initialize
			// there and the server's line back before the deadline.
			configure: func(c *Config) { c.Timeout = 3 * time.Second },
			want: []string{
				"reading initialize result: capture timed out after 3s",
				`1 stdout line(s) were not JSON-RPC messages, the first: "Server running on stdio"`,
			},
			is:     context.DeadlineExceeded,
			within: 3*time.Second + shutdownGrace,
		},
		{
			name:      "stubborn_server_is_killed",
			mode:      "stallStubborn",
			configure: func(c *Config) { c.Timeout = 300 * time.Millisecond },
			want:      []string{"reading initialize result: capture timed out after 300ms"},
			is:        context.DeadlineExceeded,
			within:    300*time.Millisecond + 2*shutdownGrace,
		},
		{
			name: "missing_command",
			configure: func(c *Config) {
				c.Command = "/nonexistent/mcp-server"
			},
			want: []string{`starting server "/nonexistent/mcp-server"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := fakeConfig(t, tt.mode)
			if tt.configure != nil {
				tt.configure(&cfg)
			}
			var out, stderr bytes.Buffer
			began := time.Now()
			err := Run(context.Background(), cfg, &out, &stderr)
			took := time.Since(began)
			if err == nil {
				t.Fatalf("Run succeeded, want an error; capture: %s", out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			// Bounded, not timed: the slack is for a loaded machine running
			// the race detector; a capture that ignored its deadline would
			// run until the test's own timeout.
			if tt.within > 0 && took > tt.within+30*time.Second {
				t.Errorf("Run took %s, want at most %s", took, tt.within+30*time.Second)
			}
			if out.Len() > 0 {
				t.Errorf("Run wrote a capture despite failing: %s", out.String())
			}
		})
	}
}

func TestRunStopsLingeringServer(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	began := time.Now()
	if err := Run(context.Background(), fakeConfig(t, "linger"), &out, nil); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took, limit := time.Since(began), 2*shutdownGrace+time.Second; took > limit {
		t.Errorf("Run took %s, want at most %s", took, limit)
	}
	if !strings.HasPrefix(out.String(), `{"initialize":`) {
		t.Errorf("capture: %s", out.String())
	}
}

func TestRunHonoursCallerCancellation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err := Run(ctx, fakeConfig(t, "stall"), &bytes.Buffer{}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings; none means valid
	}{
		{name: "minimal", cfg: Config{Command: "srv"}},
		{name: "capabilities_object", cfg: Config{Command: "srv", ClientCapabilities: json.RawMessage(` {"roots":{}}`)}},
		{name: "no_command", cfg: Config{}, want: []string{"command is required"}},
		{name: "capabilities_array", cfg: Config{Command: "srv", ClientCapabilities: json.RawMessage(`[]`)}, want: []string{"must be a JSON object"}},
		{name: "capabilities_invalid", cfg: Config{Command: "srv", ClientCapabilities: json.RawMessage(`{`)}, want: []string{"must be a JSON object"}},
		{
			name: "all_negative",
			cfg:  Config{Timeout: -1, MaxPages: -1, MaxLineBytes: -1},
			want: []string{"command is required", "timeout -1ns is negative", "max pages -1 is negative", "max line bytes -1 is negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, lacks %q", err, w)
				}
			}
		})
	}
}
