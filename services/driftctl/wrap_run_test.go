package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"wrap-test","version":"1"}}}`

// TestWrappedServersRun: what wrap writes works as a host would use it,
// against a real NATS with the bus set up. The stdio entry's command line,
// with its env, runs the built proxy in front of the server (this test
// binary as mcptest, which serves only when the env it was configured with
// reaches it) and answers initialize; the HTTP entry's URL, served by the
// built proxy in HTTP mode started with the --upstream wrap printed, reaches
// demoserver and answers initialize.
func TestWrappedServersRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the proxy and demoserver")
	}
	ns := natstest.Start(t)
	if _, errOut, code := runCLI(t, "", "bus-setup", "--nats-url", ns.ClientURL()); code != 0 {
		t.Fatalf("bus-setup: %s", errOut)
	}
	bin := cmdtest.Dir(t, "proxy", "demoserver")
	demoAddr, proxyAddr := freeAddr(t), freeAddr(t)
	demo := exec.Command(filepath.Join(bin, "demoserver"), "--listen", demoAddr)
	demo.Stderr = os.Stderr
	startUntilCleanup(t, demo)

	path := filepath.Join(t.TempDir(), ".claude.json")
	config := fmt.Sprintf(`{
  "mcpServers": {
    "files": {"command": %q, "args": ["-test.run=^$"], "env": {%q: "1"}},
    "notes": {"type": "http", "url": "http://%s/mcp"}
  }
}
`, os.Args[0], mcptest.Env, demoAddr)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "", "wrap", "--client", "claude-code", "--config", path,
		"--proxy", filepath.Join(bin, "proxy"), "--proxy-url", "http://"+proxyAddr,
		"--nats-url", ns.ClientURL(), "--proxy-arg=--outbox-dir="+t.TempDir(), "--proxy-arg=--proxy-id=wrap-test")
	if code != 0 {
		t.Fatalf("wrap: %s", errOut)
	}
	var wrapped struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
			URL     string
		}
	}
	if err := json.Unmarshal(mustRead(t, path), &wrapped); err != nil {
		t.Fatal(err)
	}

	t.Run("stdio", func(t *testing.T) {
		e := wrapped.MCPServers["files"]
		cmd := exec.Command(e.Command, e.Args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, mcptest.Env+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		for k, v := range e.Env { // as the host starts it
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 8)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		defer func() {
			in.Close() // the end of input ends the proxy and its server
			if err := cmd.Wait(); err != nil {
				t.Errorf("the wrapped command exited: %v", err)
			}
		}()
		if _, err := io.WriteString(in, initialize+"\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case line, ok := <-lines:
			if !ok || !strings.Contains(line, `"id":1`) || !strings.Contains(line, `"serverInfo":{"name":"mcptest"`) {
				t.Fatalf("initialize through the wrapped command: %q (open %v)", line, ok)
			}
		case <-time.After(30 * time.Second): // only stops a hung test
			t.Fatal("no answer to initialize through the wrapped command")
		}
	})

	t.Run("http", func(t *testing.T) {
		// The proxy as wrap said to start it.
		_, front, ok := strings.Cut(out, "must front the HTTP servers:\n")
		if !ok {
			t.Fatalf("wrap printed no proxy to start:\n%s", out)
		}
		args := strings.Fields(strings.TrimSpace(front))
		if len(args) < 4 || args[0] != "proxy" || args[1] != "--listen" || args[2] != "HOST:PORT" {
			t.Fatalf("wrap printed %q", front)
		}
		args = append(args[3:], "--listen", proxyAddr, "--nats-url", ns.ClientURL(), "--outbox-dir", t.TempDir(), "--proxy-id", "wrap-test-http")
		px := exec.Command(filepath.Join(bin, "proxy"), args...)
		px.Stderr = os.Stderr
		startUntilCleanup(t, px)
		url := wrapped.MCPServers["notes"].URL
		poll.Eventually(t, 30*time.Second, func() error {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initialize))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"serverInfo"`) {
				return fmt.Errorf("initialize at %s: %s %s", url, resp.Status, body)
			}
			return nil
		})
	})
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startUntilCleanup starts cmd and stops it (SIGINT, then SIGKILL) when the
// test ends.
func startUntilCleanup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGINT", cmd.Path)
		}
	})
}
