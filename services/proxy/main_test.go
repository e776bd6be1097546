package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"help", []string{"--help"}, nil, 0, "Usage: proxy --server-id ID"},
		{"no_server_id", []string{"--", "true"}, nil, 2, "--server-id is required"},
		{"no_command", []string{"--server-id", "fs"}, nil, 2, "no upstream command"},
		{"bad_id", []string{"--server-id", "a.b", "--", "true"}, nil, 2, "invalid_id"},
		{"http_no_upstream", []string{"--listen", "127.0.0.1:0"}, nil, 2, "at least one --upstream"},
		{"http_and_command", []string{"--listen", "127.0.0.1:0", "--upstream", "a=http://x/mcp", "--", "true"}, nil, 2, "HTTP mode (--listen) takes its servers from --upstream"},
		{"upstream_without_listen", []string{"--server-id", "fs", "--upstream", "a=http://x/mcp", "--", "true"}, nil, 2, "--upstream needs --listen"},
		{"bad_upstream", []string{"--listen", "127.0.0.1:0", "--upstream", "nourl"}, nil, 2, "want ID=URL"},
		{"bad_upstream_id", []string{"--listen", "127.0.0.1:0", "--upstream", "a.b=http://x/mcp"}, nil, 2, "invalid_id"},
		{"bad_upstream_env", []string{"--listen", "127.0.0.1:0"}, map[string]string{"MCPDRIFT_UPSTREAMS": "a=http://x/mcp,broken"}, 2, "want ID=URL"},
		{"bad_arguments", []string{"--server-id", "fs", "--arguments", "some", "--", "true"}, nil, 2, "--arguments"},
		{"bad_arguments_env", []string{"--server-id", "fs", "--", "true"}, map[string]string{"MCPDRIFT_ARGUMENTS": "all"}, 2, "want digest or full"},
		{"bad_wait_env", []string{"--server-id", "fs", "--", "true"}, map[string]string{"MCPDRIFT_FIRST_SIGHT_WAIT": "soon"}, 2, "first-sight-wait"},
		{"negative_copy_age", []string{"--server-id", "fs", "--status-cache-max-age", "-1h", "--", "true"}, nil, 2, "--status-cache-max-age must not be negative"},
		{"missing_copy_key_env", []string{"--server-id", "fs", "--", "true"}, map[string]string{"MCPDRIFT_STATUS_CACHE_KEY_FILE": "/nonexistent/key"}, 2, "--status-cache-key-file"},
		{"tokens_on_stdio", []string{"--server-id", "fs", "--agent-tokens-file", "/dev/null", "--", "true"}, nil, 2, "need --listen"},
		{"agent_on_http", []string{"--listen", "127.0.0.1:0", "--upstream", "a=http://x/mcp", "--agent", "me"}, nil, 2, "--agent names the stdio agent"},
		{"missing_tokens_file", []string{"--listen", "127.0.0.1:0", "--upstream", "a=http://x/mcp", "--agent-tokens-file", "/nonexistent/tokens"}, nil, 2, "--agent-tokens-file"},
		{"cert_without_key", []string{"--listen", "127.0.0.1:0", "--upstream", "a=http://x/mcp", "--tls-cert", "/nonexistent/cert"}, nil, 2, "--tls-cert and --tls-key go together"},
		{"client_ca_without_tls", []string{"--listen", "127.0.0.1:0", "--upstream", "a=http://x/mcp"}, map[string]string{"MCPDRIFT_CLIENT_CA": "/nonexistent/ca"}, 2, "--client-ca needs --tls-cert"},
		{"missing_ops_token", []string{"--server-id", "fs", "--ops-token-file", "/nonexistent/token", "--", "true"}, nil, 2, "--ops-token-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code, err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, strings.NewReader(""), &bytes.Buffer{}, &stderr)
			if code != tt.code || (err != nil && !errors.Is(err, flag.ErrHelp) && !strings.Contains(err.Error(), tt.want)) ||
				(errors.Is(err, flag.ErrHelp) && !strings.Contains(stderr.String(), tt.want)) {
				t.Fatalf("code %d err %v\n%s", code, err, stderr.String())
			}
		})
	}
}

// The upstream's exit code is the proxy's, also with NATS unreachable.
func TestExitCodeWithoutNATS(t *testing.T) {
	var stderr bytes.Buffer
	code, err := run(context.Background(), []string{"--server-id", "fs", "--nats-url", "nats://127.0.0.1:1", "--outbox-dir", t.TempDir(), "--", "sh", "-c", "exit 3"},
		func(string) string { return "" }, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	if err != nil || code != 3 {
		t.Fatalf("code %d err %v\n%s", code, err, stderr.String())
	}
}

// TestStdioAgent: on stdio the agent is the user the proxy runs as, or the
// name --agent gives.
func TestStdioAgent(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, fmt.Sprintf("stdio:uid=%d", os.Getuid())},
		{[]string{"--agent", "claude-desktop"}, "claude-desktop"},
	} {
		cfg, err := parseConfig(append(append([]string{"--server-id", "fs"}, tt.args...), "--", "true"), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.sessionConfig("fs", enforcement{}).Agent; got != tt.want {
			t.Errorf("%v: agent %q, want %q", tt.args, got, tt.want)
		}
	}
}
