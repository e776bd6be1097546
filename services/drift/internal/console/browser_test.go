package console

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

const chromium = "/usr/bin/chromium"

// repoRoot is the repository's top, from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("the repository root %s has no go.work: %v", root, err)
	}
	return root
}

// TestBrowser drives the console in Debian's chromium with playwright-core
// (testdata/browser.cjs): log in, watch a rug pull appear on the fleet page
// live, review it side by side with its markers, have a stale approve
// refused, approve one item alone and see the server stay changed without
// it, approve, see verified; a read token sees no buttons and its
// forged POST is refused; hostile descriptions render as text and run
// nothing. It takes screenshots of the fleet and review pages, and with
// -update-images saves them to docs/images/ (the README's pictures).
var updateImages = flag.Bool("update-images", false, "save the browser test's screenshots to docs/images")

func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test is not short")
	}
	node, mods := browserDeps(t)

	s := startStack(t)
	h1 := s.manifest(reviewedTools()...)
	h2 := s.manifest(rugPullTools()...)
	h3 := s.manifest(append(rugPullTools(), tool("purge_notes", "Delete every note, no undo.", nil, map[string]any{}, map[string]any{"destructiveHint": true}))...)
	other := s.manifest(tool("read_file", "Read a file from the allowed directories.", []string{"path"},
		map[string]any{"path": map[string]any{"type": "string"}}, map[string]any{"readOnlyHint": true}))
	for _, srv := range [][2]string{{"acme", "notes"}, {"acme", "files"}, {"globex", "files"}, {"globex", "wiki"}, {"initech", "reports"}, {"evil", "xss"}} {
		h := other
		if srv[1] == "notes" || srv[1] == "xss" {
			h = h1
		}
		s.observe(srv[0], srv[1], h)
		s.waitStatus(srv[0], srv[1], "verified")
	}
	s.observe("evil", "xss", s.manifest(append(reviewedTools(), hostileTools()...)...))
	s.waitStatus("evil", "xss", "changed")

	// The script asks the "sample server" to rug-pull, and to move again,
	// through this control endpoint; each answers once the drift service
	// has the new live manifest.
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h string
		switch r.URL.Path {
		case "/rugpull":
			h = h2
		case "/move":
			h = h3
		default:
			http.NotFound(w, r)
			return
		}
		s.observe("acme", "notes", h)
		err := poll.Until(10*time.Second, func() error {
			v, err := s.svc.Server(r.Context(), "acme", "notes")
			if err != nil {
				return err
			}
			if rec := v.Variants[0]; rec.LiveHash != h || rec.Status != "changed" {
				return fmt.Errorf("acme/notes is %s at %s, want changed at %s", rec.Status, rec.LiveHash, h)
			}
			return nil
		})
		if err != nil {
			http.Error(w, "the drift service did not take the manifest: "+err.Error(), http.StatusGatewayTimeout)
			return
		}
		_, _ = w.Write([]byte(h))
	}))
	t.Cleanup(control.Close)

	images := t.TempDir()
	if *updateImages {
		images = filepath.Join(repoRoot(t), "docs", "images")
		if err := os.MkdirAll(images, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runBrowser(t, node, mods, "testdata/browser.cjs",
		"CONSOLE_URL="+s.srv.URL,
		"CONTROL_URL="+control.URL,
		"WRITE_TOKEN="+writeSecret,
		"READ_TOKEN="+readSecret,
		"IMAGES_DIR="+images,
		"H2="+h2, "H3="+h3,
	)
	s.waitStatus("acme", "notes", "verified")
}

// browserDeps checks what the browser tests need (Debian's chromium, node,
// playwright-core as make deps installs it) and returns node's path and
// the node_modules playwright-core is in.
func browserDeps(t *testing.T) (node, mods string) {
	root := repoRoot(t)
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the browser test needs Debian's chromium at %s: run make deps (scripts/deps.d/browser.sh), or apt-get install chromium", chromium)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("the browser test needs node (20 or later): apt-get install nodejs npm, then make deps")
	}
	mods = os.Getenv("MCPDRIFT_BROWSER_DIR")
	if mods == "" {
		mods = filepath.Join(root, ".data", "browser")
	}
	mods = filepath.Join(mods, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "playwright-core")); err != nil {
		t.Fatalf("the browser test needs playwright-core in %s: run make deps (scripts/deps.d/browser.sh)", mods)
	}
	return node, mods
}

// runBrowser runs the browser script (under testdata) with node, with
// env beside the chromium, the modules and a fresh profile, within three
// minutes, and logs what it printed; the test fails when it fails.
func runBrowser(t *testing.T, node, mods, script string, env ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(append(os.Environ(), "NODE_PATH="+mods, "CHROMIUM="+chromium, "PROFILE_DIR="+t.TempDir()), env...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("the browser script failed: %v", err)
	}
}
