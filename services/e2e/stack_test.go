package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

// stackCommands are the commands make build puts in bin/ for make run.
var stackCommands = []string{"stack", "demoserver", "fingerprint", "drift", "audit", "notify", "proxy", "driftctl"}

// TestStackRunAndDemo runs make run's script (scripts/run.sh) and make
// demo's (scripts/demo.sh) as a user would, with ClickHouse: the demo must
// play through, from verified to the audit rows. Ctrl-C must stop the whole
// stack cleanly, and a second start must resume with the same state, which
// the demo then plays from again.
func TestStackRunAndDemo(t *testing.T) {
	bin := cmdtest.Dir(t, stackCommands...)
	ch := chtest.Shared(t)
	data := t.TempDir()
	base := freePortRange(t, 21)
	env := append(os.Environ(),
		"MCPDRIFT_STACK_DIR="+data,
		"MCPDRIFT_STACK_BIN_DIR="+bin,
		"MCPDRIFT_STACK_PORT_BASE="+strconv.Itoa(base),
		"MCPDRIFT_STACK_NATS_PORT="+freePort(t),
		"MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr,
		"MCPDRIFT_AUDIT_DATABASE="+ch.Database(t),
	)

	first := startStack(t, env, data)
	for _, want := range []string{"MCP endpoint", "/notes/mcp", "Review console", "Admin API", "driftctl tail", "ClickHouse: " + ch.Addr, "/metrics"} {
		if !strings.Contains(first.banner(), want) {
			t.Errorf("the banner lacks %q:\n%s", want, first.banner())
		}
	}
	out := runDemo(t, env)
	for _, want := range []string{
		"The server is verified (baseline v1",
		"The pipeline's verdict: changed (severity critical",
		"tools/list: 0 tools (withheld)",
		"tools/call read_note refused: ",
		`added tool "export_notes"`,
		`changed tool "read_note"`,
		"marker_secret_path",
		"verified, baseline v2",
		"tools/list: export_notes, read_note, search_notes",
		"tool calls: ", "read_note refused server_changed",
		"verdicts: ", "admin decisions: approve by admin ok",
		"Done: the rug pull was caught",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
	runPrintedCommands(t, bin, first.info, out)
	first.interrupt(t)
	if _, err := os.Stat(filepath.Join(data, "stack.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stack.json left behind after Ctrl-C: %v", err)
	}
	for i := range 5 { // the admin API and the four ops listeners are closed: their processes ended
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(base+i), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still answers after the stack stopped", base+i)
		}
	}

	// A second start resumes: the approved release 1.1.0 is still verified.
	second := startStack(t, env, data)
	rec := adminRecord(t, second.info, "notes")
	if rec.Status != "verified" || rec.BaselineVersion != 2 {
		t.Fatalf("after a restart the sample server is %s at baseline v%d, want verified at v2 (state not resumed)", rec.Status, rec.BaselineVersion)
	}
	out = runDemo(t, env)
	for _, want := range []string{"(resetting: the sample server advertises 1.1.0", "verified, baseline v4", "Done: the rug pull was caught"} {
		if !strings.Contains(out, want) {
			t.Errorf("the second demo's output lacks %q:\n%s", want, out)
		}
	}
	second.interrupt(t)
}

// TestStackWithoutClickHouse: without ClickHouse the stack says so plainly,
// runs without the audit service, and the demo says there are no audit
// rows to read back. With MCPDRIFT_NOTIFY_WEBHOOK it runs the notify
// service, which posts the demo's verdicts to that webhook in
// MCPDRIFT_NOTIFY_FORMAT.
func TestStackWithoutClickHouse(t *testing.T) {
	bin := cmdtest.Dir(t, stackCommands...)
	data := t.TempDir()
	var mu sync.Mutex
	var posted []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil || msg.Text == "" {
			http.Error(w, "not a slack message", http.StatusBadRequest)
			return
		}
		mu.Lock()
		posted = append(posted, msg.Text)
		mu.Unlock()
	}))
	defer hook.Close()
	env := append(os.Environ(),
		"MCPDRIFT_NOTIFY_WEBHOOK="+hook.URL+"/slack",
		"MCPDRIFT_NOTIFY_FORMAT=slack",
		"MCPDRIFT_STACK_DIR="+data,
		"MCPDRIFT_STACK_BIN_DIR="+bin,
		"MCPDRIFT_STACK_PORT_BASE="+strconv.Itoa(freePortRange(t, 21)),
		"MCPDRIFT_STACK_NATS_PORT="+freePort(t),
		"MCPDRIFT_CLICKHOUSE_ADDR=",
		"MCPDRIFT_RUN_CLICKHOUSE=off",
	)
	s := startStack(t, env, data)
	if !strings.Contains(s.banner(), "ClickHouse: not configured") {
		t.Errorf("the banner does not say ClickHouse is missing:\n%s", s.banner())
	}
	if _, ok := s.info.Ops["audit"]; ok {
		t.Errorf("the audit service is listed without ClickHouse: %v", s.info.Ops)
	}
	if _, ok := s.info.Ops["notify"]; !ok {
		t.Errorf("the notify service is not listed with a webhook: %v", s.info.Ops)
	}
	out := runDemo(t, env)
	poll.Eventually(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		text := strings.Join(posted, "\n")
		if !strings.Contains(text, "default/notes") || !strings.Contains(text, "is changed") || !strings.Contains(text, "is verified") {
			return fmt.Errorf("the webhook got %d messages, want the demo's drift and approval:\n%s", len(posted), text)
		}
		return nil
	})
	if !strings.Contains(out, "ClickHouse is not configured for this stack") || !strings.Contains(out, "verified, baseline v2") {
		t.Errorf("the demo's output without ClickHouse:\n%s", out)
	}
	s.interrupt(t)

	// The demo refuses plainly when no stack runs.
	cmd := exec.Command("../../scripts/demo.sh")
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "stack_not_running") {
		t.Errorf("demo without a stack: err %v, output:\n%s", err, b)
	}
}

// stackInfo is the part of DATA-DIR/stack.json the tests read.
type stackInfo struct {
	AdminURL   string            `json:"admin_url"`
	TokensFile string            `json:"admin_tokens_file"`
	Ops        map[string]string `json:"ops"`
}

type runningStack struct {
	cmd    *exec.Cmd
	info   stackInfo
	done   chan error
	stdout syncbuf.Buffer
}

func (s *runningStack) banner() string { return s.stdout.String() }

// startStack runs scripts/run.sh in its own process group, as a terminal
// would, and waits until the stack has written stack.json.
func startStack(t *testing.T, env []string, data string) *runningStack {
	t.Helper()
	s := &runningStack{cmd: exec.Command("../../scripts/run.sh"), done: make(chan error, 1)}
	s.cmd.Env = env
	s.cmd.Stdout = &s.stdout
	var stderr syncbuf.Buffer
	s.cmd.Stderr = &stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { defer close(exited); s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); <-exited })
	if err := poll.Until(2*time.Minute, func() error {
		select {
		case err := <-s.done:
			t.Fatalf("the stack exited while starting: %v\n%s\nlogs:\n%s", err, stderr.String(), logTails(data))
		default:
		}
		b, err := os.ReadFile(filepath.Join(data, "stack.json"))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &s.info)
	}); err != nil {
		t.Fatalf("the stack did not start within 2 minutes: %v\n%s", err, logTails(data))
	}
	// The banner is printed right after stack.json is written.
	poll.Eventually(t, 30*time.Second, func() error {
		if b := s.banner(); !strings.Contains(b, "Ctrl-C") {
			return fmt.Errorf("the banner lacks Ctrl-C: %q", b)
		}
		return nil
	})
	return s
}

// interrupt sends Ctrl-C to the stack's process group and waits for a clean
// exit.
func (s *runningStack) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("the stack exited with %v after Ctrl-C", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the stack did not stop within 90s of Ctrl-C")
	}
}

func runDemo(t *testing.T, env []string) string {
	t.Helper()
	cmd := exec.Command("../../scripts/demo.sh")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo's script: %v\n%s", err, out)
	}
	return string(out)
}

// adminRecord reads a server's status record from the stack's admin API.
func adminRecord(t *testing.T, in stackInfo, server string) (rec struct {
	Server          string `json:"server"`
	Status          string `json:"status"`
	BaselineVersion int64  `json:"baseline_version"`
}) {
	t.Helper()
	tokens, err := os.ReadFile(in.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for _, line := range strings.Split(string(tokens), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "read" {
			token = parts[2]
		}
	}
	req, _ := http.NewRequest(http.MethodGet, in.AdminURL+"/v1/servers", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var servers []struct {
		Server   string `json:"server"`
		Variants []struct {
			Record json.RawMessage `json:"record"`
		} `json:"variants"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&servers); err != nil {
		t.Fatalf("admin API: %s: %v", resp.Status, err)
	}
	for _, sv := range servers {
		if sv.Server != server || len(sv.Variants) == 0 {
			continue
		}
		if err := json.Unmarshal(sv.Variants[0].Record, &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	t.Fatalf("no status record of %s in %d servers", server, len(servers))
	return rec
}

// runPrintedCommands runs the driftctl command lines the demo printed for
// its admin, "(driftctl diff --live ...)" and "(driftctl approve --hash
// ...)", as printed, against the stack: each must succeed (the
// demo's commands work as an admin would type them).
func runPrintedCommands(t *testing.T, bin string, in stackInfo, demoOut string) {
	t.Helper()
	token := ""
	if b, err := os.ReadFile(in.TokensFile); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "write" {
				token = parts[2]
			}
		}
	}
	ran := 0
	for _, m := range regexp.MustCompile(`\(driftctl ((?:diff --live|approve --hash) [^)]+)\)`).FindAllStringSubmatch(demoOut, -1) {
		cmd := exec.Command(filepath.Join(bin, "driftctl"), strings.Fields(m[1])...)
		cmd.Env = append(os.Environ(), "MCPDRIFT_API="+in.AdminURL, "MCPDRIFT_TOKEN="+token)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the demo printed %q; run as printed: %v\n%.400s", "driftctl "+m[1], err, out)
		}
		ran++
	}
	if ran < 2 {
		t.Errorf("the demo printed %d driftctl commands, want its diff --live and approve", ran)
	}
}

// freePortRange finds n consecutive free loopback ports and returns the
// first.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free loopback ports", n)
	return 0
}

func logTails(data string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(data, "logs", "*.log"))
	for _, l := range logs {
		content, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(content)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", filepath.Base(l), strings.Join(lines, "\n"))
	}
	return b.String()
}
