package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpdrift/mcpdrift/services/internal/mcptest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestProxyRestartWithoutNATS: a proxy that served a verified server is
// stopped, NATS goes away, and the proxy starts again: from its status copy
// (<outbox dir>/status) it serves the verified tools and a call goes
// through, and a hostile listing the upstream then sends is still withheld
// item by item, without any verdict.
func TestProxyRestartWithoutNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands")
	}
	p := startPipeline(t)
	url := p.nc.ConnectedUrl()
	outbox := t.TempDir()
	start := func() *agent {
		args := []string{"--server-id", "files", "--proxy-id", "node-1", "--outbox-dir", outbox, "--first-sight-wait", "5s"}
		cmd := exec.Command(filepath.Join(build(t), "proxy"), append(args, "--", os.Args[0])...)
		cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+url, mcptest.Env+"=1")
		return runAgent(t, cmd, "node-1")
	}

	first := start()
	first.init()
	poll.Eventually(t, wait, func() error {
		got := first.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`) && strings.Contains(got, `"name":"rug"`), "the proxy serves the approved tools", got)
	})
	copyPath := filepath.Join(outbox, "status", "default.files.copy")
	poll.Eventually(t, wait, func() error { return copySays(copyPath, `"status":"verified"`) })
	first.stop()
	if err := copySays(copyPath, `"status":"verified"`); err != nil {
		t.Fatalf("after the proxy stopped: %v", err)
	}

	p.srv.Stop()
	second := start()
	second.init()
	got := second.call("tools/list", "{}")
	if !strings.Contains(got, `"name":"read"`) || !strings.Contains(got, `"name":"rug"`) {
		t.Fatalf("restarted without NATS, the proxy does not serve the verified tools from its copy: %s", got)
	}
	if got := second.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/x"}}`); strings.Contains(got, `"isError":true`) || !strings.Contains(got, `"result"`) {
		t.Fatalf("restarted without NATS, a verified call: %s", got)
	}

	// The rug pull: the upstream now lists a poisoned read. No verdict
	// can come; the baseline's item hashes from the copy withhold it.
	second.call("tools/call", `{"name":"rug","arguments":{}}`)
	poll.Eventually(t, wait, func() error {
		got := second.call("tools/call", `{"name":"read","arguments":{}}`)
		return awaiting(strings.Contains(got, `"isError":true`), "the restarted proxy refuses the poisoned tool", got)
	})
	if got := second.call("tools/list", "{}"); strings.Contains(got, `"name":"read"`) || strings.Contains(got, "id_rsa") {
		t.Fatalf("the restarted proxy lists the poisoned tool: %s", got)
	}
}

// copySays reports whether the proxy's status copy at path holds a variant
// record containing want.
func copySays(path, want string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the status copy: %w", err)
	}
	_, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return errors.New("the status copy has no header line")
	}
	var doc struct {
		Variants []struct {
			Value []byte `json:"value"`
		} `json:"variants"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("the status copy: %w", err)
	}
	for _, v := range doc.Variants {
		if bytes.Contains(v.Value, []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("the status copy holds no record with %s (%d records)", want, len(doc.Variants))
}
