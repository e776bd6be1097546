package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestZZDebugClient(t *testing.T) {
	n := requirePeers(t)
	p := startPipeline(t)
	client := "node " + filepath.Join(mustAbs(t, "testdata"), "conformance-client.cjs") + " " + n.dir
	viaProxy, _ := json.Marshal(map[string]any{"bin": filepath.Join(build(t), "proxy"), "args": []string{
		"--listen", "127.0.0.1:0", "--outbox-dir", t.TempDir(), "--nats-url", p.nc.ConnectedUrl(),
		"--proxy-id", "conformance-client", "--first-sight-wait", "10s"}})
	for _, s := range strings.Split(os.Getenv("ZZ_SCENARIOS"), ",") {
		for _, env := range [][]string{nil, {"MCPDRIFT_CONFORMANCE_PROXY=" + string(viaProxy)}} {
			cli := filepath.Join(n.pkgDir("@modelcontextprotocol/conformance"), "dist", "index.js")
			cmd := exec.Command("node", cli, "client", "--scenario", s, "--command", client, "-o", "/tmp/zzout/"+strings.ReplaceAll(s, "/", "_")+map[bool]string{true: "-proxy", false: "-direct"}[env != nil])
			cmd.Env = append(os.Environ(), env...)
			out, _ := cmd.CombinedOutput()
			t.Logf("%s proxy=%v:\n%s", s, env != nil, out)
		}
	}
}
