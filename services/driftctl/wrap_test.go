package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/wrap")

const wrapData = "testdata/wrap"

// wrapCases are the hosts' configurations under testdata/wrap: each is
// wrapped into NAME.wrapped.json, printing NAME.wrap.txt (NAME.dry-run.txt
// with --dry-run).
var wrapCases = []struct {
	name, client, input string
	args                []string
}{
	{"claude-desktop", "claude-desktop", "claude-desktop.json",
		[]string{"--proxy", "/opt/mcpdrift/bin/proxy", "--nats-url", "nats://nats.internal:4222", "--tenant", "acme"}},
	{"claude-code", "claude-code", "claude-code.json", []string{"--proxy-url", "http://127.0.0.1:8080"}},
	{"claude-code-project", "claude-code", "claude-code-project.mcp.json", []string{"--proxy-url", "https://mcp-proxy.internal:8443/"}},
	{"cursor", "cursor", "cursor.json", []string{"--proxy-url", "http://127.0.0.1:8080", "--proxy-arg=--outbox-dir=/var/tmp/mcpdrift, with a comma"}},
	{"vscode", "vscode", "vscode.json", []string{"--proxy-url", "http://127.0.0.1:8080"}},
	{"vscode-settings", "vscode", "vscode-settings.json", nil},
}

// wrapDir copies a case's input into a new directory as its file name and
// returns its path.
func wrapDir(t *testing.T, input string) (path string, original []byte) {
	t.Helper()
	original, err := os.ReadFile(filepath.Join(wrapData, input))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), input)
	if err := os.WriteFile(path, original, 0o640); err != nil {
		t.Fatal(err)
	}
	return path, original
}

// golden compares got with the golden file name (rewritten with -update);
// the directory of the test's files reads as $DIR.
func golden(t *testing.T, name string, got []byte, dir string) {
	t.Helper()
	got = bytes.ReplaceAll(got, []byte(dir), []byte("$DIR"))
	path := filepath.Join(wrapData, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestWrapClients: for each host's configuration, --dry-run prints the
// rewrites and writes nothing; wrap rewrites the file as the golden file
// has it (each server behind the proxy, everything else as it was) and
// keeps the original bytes; a second wrap changes nothing; unwrap puts the
// original bytes back and removes the backup.
func TestWrapClients(t *testing.T) {
	for _, tc := range wrapCases {
		t.Run(tc.name, func(t *testing.T) {
			path, original := wrapDir(t, tc.input)
			dir := filepath.Dir(path)
			args := append([]string{"wrap", "--client", tc.client, "--config", path}, tc.args...)

			out, errOut, code := runCLI(t, "", append(args, "--dry-run")...)
			if code != 0 {
				t.Fatalf("dry run: exit %d: %s", code, errOut)
			}
			golden(t, tc.name+".dry-run.txt", []byte(out), dir)
			if !bytes.Equal(mustRead(t, path), original) || exists(path+".mcpdrift-backup") || exists(path+".mcpdrift-wrap.json") {
				t.Fatal("the dry run wrote something")
			}

			out, errOut, code = runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("wrap: exit %d: %s", code, errOut)
			}
			golden(t, tc.name+".wrap.txt", []byte(out), dir)
			wrapped := mustRead(t, path)
			golden(t, tc.name+".wrapped.json", wrapped, dir)
			checkWrapped(t, tc.client, original, wrapped, tc.args)
			if got := mustRead(t, path+".mcpdrift-backup"); !bytes.Equal(got, original) {
				t.Fatalf("the backup is not the original bytes:\n%s", got)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
				t.Fatalf("the file's mode is not kept: %v %v", st.Mode(), err)
			}

			out, errOut, code = runCLI(t, "", args...)
			if code != 0 || !strings.Contains(out, "already wrapped, nothing to change") || !bytes.Equal(mustRead(t, path), wrapped) {
				t.Fatalf("second wrap: exit %d: %s%s", code, out, errOut)
			}

			out, errOut, code = runCLI(t, "", "unwrap", "--client", tc.client, "--config", path, "--dry-run")
			if code != 0 || !strings.Contains(out, "dry run: nothing written") || !bytes.Equal(mustRead(t, path), wrapped) {
				t.Fatalf("unwrap --dry-run: exit %d: %s%s", code, out, errOut)
			}
			out, errOut, code = runCLI(t, "", "unwrap", "--client", tc.client, "--config", path)
			if code != 0 || !strings.Contains(out, "restoring the bytes it had before the wrap") {
				t.Fatalf("unwrap: exit %d: %s%s", code, out, errOut)
			}
			if got := mustRead(t, path); !bytes.Equal(got, original) {
				t.Fatalf("unwrap did not restore the original bytes:\n%s", got)
			}
			if exists(path+".mcpdrift-backup") || exists(path+".mcpdrift-wrap.json") {
				t.Fatal("unwrap left the backup")
			}
		})
	}
}

// hostServers decodes the server entries of a configuration, whatever the
// host: name (with its project, for Claude Code's) to its fields.
func hostServers(t *testing.T, client string, doc []byte) map[string]map[string]json.RawMessage {
	t.Helper()
	i := slices.IndexFunc(hostClients, func(h hostClient) bool { return h.name == client })
	parsed := doc
	if hostClients[i].jsonc {
		parsed = blankJSONC(doc)
	}
	h := &hostConfig{client: hostClients[i], doc: doc, parsed: parsed}
	entries, err := h.entries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]json.RawMessage{}
	for _, e := range entries {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e.m.value(parsed), &fields); err != nil {
			t.Fatal(err)
		}
		out[strings.Join(e.path, "/")] = fields
	}
	return out
}

// checkWrapped checks the wrapped configuration against the original on
// its own terms, beside the golden file: the same servers with the same
// fields; a stdio server runs the proxy with --server-id and then its own
// command and arguments; an HTTP one reaches a proxy route; every other
// field is unchanged.
func checkWrapped(t *testing.T, client string, original, wrapped []byte, flags []string) {
	t.Helper()
	before, after := hostServers(t, client, original), hostServers(t, client, wrapped)
	if len(before) != len(after) || len(before) == 0 {
		t.Fatalf("%d servers before, %d after", len(before), len(after))
	}
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Fatalf("server %s is gone", name)
		}
		for k, v := range b {
			if k == "command" || k == "args" || k == "url" {
				continue
			}
			if !bytes.Equal(compactJSON(t, a[k]), compactJSON(t, v)) {
				t.Errorf("%s: %s changed: %s -> %s", name, k, v, a[k])
			}
		}
		id := serverID(name[strings.LastIndexByte(name, '/')+1:])
		if cmd, ok := b["command"]; ok {
			var was, now []string
			var c1, c2 string
			_ = json.Unmarshal(cmd, &c1)
			_ = json.Unmarshal(a["command"], &c2)
			if raw, ok := b["args"]; ok {
				_ = json.Unmarshal(raw, &was)
			}
			if err := json.Unmarshal(a["args"], &now); err != nil {
				t.Fatalf("%s: args %s", name, a["args"])
			}
			i := slices.Index(now, "--")
			if i < 2 || now[i-2] != "--server-id" || now[i-1] != id || !slices.Equal(now[i+1:], append([]string{c1}, was...)) ||
				filepath.Base(c2) != "proxy" {
				t.Errorf("%s: wraps as %s %q, want proxy ... --server-id %s -- %s %q", name, c2, now, id, c1, was)
			}
			if slices.Contains(flags, "--nats-url") && !slices.Contains(now[:i], "--nats-url") {
				t.Errorf("%s: --nats-url is not passed on: %q", name, now)
			}
			continue
		}
		var url string
		_ = json.Unmarshal(a["url"], &url)
		if !strings.HasSuffix(url, "/"+id+"/mcp") && !strings.HasSuffix(url, "/"+id+"/sse") {
			t.Errorf("%s: url %s is not a proxy route of %s", name, url, id)
		}
	}
}

func compactJSON(t *testing.T, v []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		t.Fatalf("%s: %v", v, err)
	}
	return b.Bytes()
}

// TestWrapErrors: a configuration wrap cannot read, or a command it
// cannot carry out, is a coded error with exit status 2, and the file is
// left as it was, with no backup.
func TestWrapErrors(t *testing.T) {
	for _, tc := range []struct {
		name, client, content, code string
		args                        []string
	}{
		{"unknown_client", "windsurf", `{"mcpServers":{}}`, "unknown_client", nil},
		{"no_client", "", `{"mcpServers":{}}`, "usage", nil},
		{"missing", "cursor", "", "config_unreadable", nil},
		{"not_json", "cursor", `{"mcpServers": {`, "config_invalid", nil},
		{"comments_where_the_host_has_none", "claude-desktop", "{\n// mine\n\"mcpServers\": {}}", "config_invalid", nil},
		{"array", "claude-desktop", `[]`, "config_invalid", nil},
		{"servers_not_object", "cursor", `{"mcpServers": ["a"]}`, "config_invalid", nil},
		{"entry_not_object", "cursor", `{"mcpServers": {"a": "npx"}}`, "config_invalid", nil},
		{"neither_command_nor_url", "cursor", `{"mcpServers": {"a": {"env": {}}}}`, "config_invalid", nil},
		{"args_not_strings", "cursor", `{"mcpServers": {"a": {"command": "npx", "args": [1]}}}`, "config_invalid", nil},
		{"unknown_type", "claude-code", `{"mcpServers": {"a": {"type": "ws", "url": "ws://x"}}}`, "config_invalid", nil},
		{"duplicate_server", "cursor", `{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}`, "config_invalid", nil},
		{"projects_not_object", "claude-code", `{"projects": []}`, "config_invalid", nil},
		{"vscode_not_object", "vscode", `{"servers": 3}`, "config_invalid", nil},
		{"no_id", "cursor", `{"mcpServers": {"...": {"command": "x"}}}`, "config_invalid", nil},
		{"id_conflict", "cursor", `{"mcpServers": {"a b": {"command": "x"}, "a-b": {"command": "y"}}}`, "server_id_conflict", nil},
		{"http_without_proxy_url", "cursor", `{"mcpServers": {"a": {"command": "x"}, "r": {"url": "https://r.example/mcp"}}}`, "proxy_url_required", nil},
		{"bad_proxy_url", "cursor", `{"mcpServers": {}}`, "usage", []string{"--proxy-url", "127.0.0.1:8080"}},
		{"unwrap_not_wrapped", "cursor", `{"mcpServers": {"a": {"command": "x"}}}`, "not_wrapped", []string{"unwrap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "mcp.json")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cmd, extra := "wrap", tc.args
			if len(extra) > 0 && extra[0] == "unwrap" {
				cmd, extra = "unwrap", extra[1:]
			}
			args := []string{cmd, "--config", path}
			if tc.client != "" {
				args = append(args, "--client", tc.client)
			}
			out, errOut, code := runCLI(t, "", append(args, extra...)...)
			if code != 2 || !strings.Contains(errOut, "driftctl: "+tc.code+": ") {
				t.Fatalf("exit %d, want 2 with code %s\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			if tc.content != "" && string(mustRead(t, path)) != tc.content {
				t.Fatal("the file changed")
			}
			if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != min(len(tc.content), 1) {
				t.Fatalf("files left: %v", names)
			}
		})
	}
}

// TestUnwrapAfterHostChanges: Claude Code rewrites ~/.claude.json as it
// runs. unwrap then puts back the wrapped entries alone, and the host's
// changes stay; an entry changed since the wrap makes it refuse, changing
// nothing. A wrap of a file changed since the last wrap that has new
// servers refuses too (the backup would no longer undo it).
func TestUnwrapAfterHostChanges(t *testing.T) {
	path, original := wrapDir(t, "claude-code.json")
	wrap := []string{"wrap", "--client", "claude-code", "--config", path, "--proxy-url", "http://127.0.0.1:8080"}
	unwrap := []string{"unwrap", "--client", "claude-code", "--config", path}
	if _, errOut, code := runCLI(t, "", wrap...); code != 0 {
		t.Fatal(errOut)
	}
	wrapped := mustRead(t, path)
	// The host rewrites the file (sorting its keys, as some do) and
	// counts a start-up.
	var v any
	if err := json.Unmarshal(wrapped, &v); err != nil {
		t.Fatal(err)
	}
	v.(map[string]any)["numStartups"] = 42.0
	hostWrote, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, hostWrote, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("new_server_refused", func(t *testing.T) {
		withNew := bytes.Replace(hostWrote, []byte(`"mcpServers": {`), []byte(`"mcpServers": {"new": {"command": "x"},`), 1)
		if err := os.WriteFile(path, withNew, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(path, hostWrote, 0o600)
		if _, errOut, code := runCLI(t, "", wrap...); code != 2 || !strings.Contains(errOut, "driftctl: config_changed: ") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !bytes.Equal(mustRead(t, path), withNew) || !bytes.Equal(mustRead(t, path+".mcpdrift-backup"), original) {
			t.Fatal("a refused wrap changed the file or the backup")
		}
	})
	t.Run("changed_entry_refused", func(t *testing.T) {
		changed := bytes.Replace(hostWrote, []byte(`"PGPASSWORD": "s3cret"`), []byte(`"PGPASSWORD": "rotated"`), 1)
		if err := os.WriteFile(path, changed, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(path, hostWrote, 0o600)
		if _, errOut, code := runCLI(t, "", unwrap...); code != 2 || !strings.Contains(errOut, "driftctl: config_changed: ") || !strings.Contains(errOut, "postgres") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !bytes.Equal(mustRead(t, path), changed) || !exists(path+".mcpdrift-backup") {
			t.Fatal("a refused unwrap changed the file or removed the backup")
		}
	})
	t.Run("entries_restored", func(t *testing.T) {
		out, errOut, code := runCLI(t, "", unwrap...)
		if code != 0 || !strings.Contains(out, "restoring its 4 wrapped entries only") {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		var got, want any
		if err := json.Unmarshal(mustRead(t, path), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(original, &want); err != nil {
			t.Fatal(err)
		}
		want.(map[string]any)["numStartups"] = 42.0
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Fatalf("unwrapped:\n%s\nwant the original with the host's change:\n%s", g, w)
		}
		if exists(path + ".mcpdrift-backup") {
			t.Fatal("the backup is left")
		}
	})
}

// TestWrapFollowsSymlink: a configuration kept as a symbolic link (a
// dotfiles repository) is rewritten where it points; the link stays.
func TestWrapFollowsSymlink(t *testing.T) {
	target, original := wrapDir(t, "claude-desktop.json")
	link := filepath.Join(t.TempDir(), "claude_desktop_config.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "", "wrap", "--client", "claude-desktop", "--config", link); code != 0 {
		t.Fatal(errOut)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is replaced: %v", err)
	}
	if bytes.Equal(mustRead(t, target), original) || !exists(target+".mcpdrift-backup") {
		t.Fatal("the link's target is not wrapped")
	}
	if _, errOut, code := runCLI(t, "", "unwrap", "--client", "claude-desktop", "--config", link); code != 0 || !bytes.Equal(mustRead(t, target), original) {
		t.Fatal(errOut)
	}
}

// TestWrapInterrupted: a wrap that stopped after writing its backup but
// before replacing the file leaves a record the next wrap starts anew
// from, and unwrap just removes.
func TestWrapInterrupted(t *testing.T) {
	path, original := wrapDir(t, "cursor.json")
	args := []string{"wrap", "--client", "cursor", "--config", path, "--proxy-url", "http://127.0.0.1:8080"}
	if _, errOut, code := runCLI(t, "", args...); code != 0 {
		t.Fatal(errOut)
	}
	wrapped := mustRead(t, path)
	if err := os.WriteFile(path, original, 0o640); err != nil { // as if the rename never happened
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, "", "unwrap", "--client", "cursor", "--config", path, "--dry-run"); code != 0 || !strings.Contains(out, "never replaced") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "", args...); code != 0 || !bytes.Equal(mustRead(t, path), wrapped) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestDefaultConfigPaths(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	home := env(map[string]string{"HOME": "/home/alice"})
	xdg := env(map[string]string{"HOME": "/home/alice", "XDG_CONFIG_HOME": "/xdg"})
	mac := env(map[string]string{"HOME": "/Users/alice"})
	for _, tc := range []struct {
		client, goos string
		getenv       func(string) string
		want         string
	}{
		{"claude-desktop", "linux", home, "/home/alice/.config/Claude/claude_desktop_config.json"},
		{"claude-desktop", "linux", xdg, "/xdg/Claude/claude_desktop_config.json"},
		{"claude-desktop", "darwin", mac, "/Users/alice/Library/Application Support/Claude/claude_desktop_config.json"},
		{"claude-code", "linux", xdg, "/home/alice/.claude.json"},
		{"claude-code", "darwin", mac, "/Users/alice/.claude.json"},
		{"cursor", "linux", xdg, "/home/alice/.cursor/mcp.json"},
		{"cursor", "darwin", mac, "/Users/alice/.cursor/mcp.json"},
		{"vscode", "linux", home, "/home/alice/.config/Code/User/mcp.json"},
		{"vscode", "darwin", mac, "/Users/alice/Library/Application Support/Code/User/mcp.json"},
	} {
		i := slices.IndexFunc(hostClients, func(h hostClient) bool { return h.name == tc.client })
		if got, err := defaultConfigPath(hostClients[i], tc.goos, tc.getenv); err != nil || got != tc.want {
			t.Errorf("%s on %s: %q %v, want %q", tc.client, tc.goos, got, err, tc.want)
		}
	}
	if _, err := defaultConfigPath(hostClients[0], "linux", env(nil)); err == nil {
		t.Error("no HOME: no error")
	}
}

func TestBlankJSONC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1, // one` + "\n}", `{"a": 1        ` + "\n}"},
		{`{"a": "//not a comment", /* x */ "b": [1,2,],}`, `{"a": "//not a comment",         "b": [1,2 ] }`},
		{`{"a\"//": "/*"}`, `{"a\"//": "/*"}`},
		{"/* a\nb */{}", "    \n    {}"},
	} {
		got := string(blankJSONC([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("blankJSONC(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if len(got) != len(tc.in) {
			t.Errorf("blankJSONC(%q) changed the length", tc.in)
		}
	}
}

// FuzzWrap: whatever the file holds, a wrap plans without panicking, and
// what it would write is still JSON in which every server is wrapped.
func FuzzWrap(f *testing.F) {
	for _, tc := range wrapCases {
		b, err := os.ReadFile(filepath.Join(wrapData, tc.input))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, tc.client == "vscode")
	}
	f.Add([]byte(`{"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://b/sse"}}}`), false)
	set := wrapSettings{Proxy: "proxy", ProxyURL: "http://127.0.0.1:8080"}
	f.Fuzz(func(t *testing.T, doc []byte, vscode bool) {
		client := hostClients[2] // cursor
		if vscode {
			client = hostClients[3]
		}
		h := &hostConfig{client: client, doc: doc, parsed: doc}
		if client.jsonc {
			h.parsed = blankJSONC(doc)
		}
		if !json.Valid(h.parsed) {
			return
		}
		rws, _, err := h.plan(set)
		if err != nil {
			return
		}
		out := applyEdits(doc, editsOf(rws))
		h2 := &hostConfig{client: client, doc: out, parsed: out}
		if client.jsonc {
			h2.parsed = blankJSONC(out)
		}
		if !json.Valid(h2.parsed) {
			t.Fatalf("not JSON after the wrap:\n%s", out)
		}
		again, _, err := h2.plan(set)
		if err != nil || len(again) != 0 {
			t.Fatalf("a second wrap: %d rewrites, %v\n%s", len(again), err, out)
		}
	})
}

// TestWrapProxyPath: a relative --proxy is made absolute (the host starts
// servers from a directory of its own); a bare name is kept for its PATH.
func TestWrapProxyPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ proxy, want string }{
		{"bin/proxy", filepath.Join(wd, "bin", "proxy")},
		{"proxy", "proxy"},
		{"/opt/mcpdrift/bin/proxy", "/opt/mcpdrift/bin/proxy"},
	} {
		path, _ := wrapDir(t, "vscode-settings.json")
		if _, errOut, code := runCLI(t, "", "wrap", "--client", "vscode", "--config", path, "--proxy", tc.proxy); code != 0 {
			t.Fatal(errOut)
		}
		var got struct {
			MCP struct {
				Servers map[string]struct{ Command string }
			}
		}
		if err := json.Unmarshal(mustRead(t, path), &got); err != nil {
			t.Fatal(err)
		}
		if c := got.MCP.Servers["memory"].Command; c != tc.want {
			t.Errorf("--proxy %s: command %q, want %q", tc.proxy, c, tc.want)
		}
	}
}

// TestAgentHostsDocListsEveryCode: docs/agent-hosts.md lists the codes of
// wrap's errors, every one and in the order of wrapCodes (and usage, the
// code of every command's bad flags).
func TestAgentHostsDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agent-hosts.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Errors\n")
	if !ok {
		t.Fatal(`docs/agent-hosts.md has no section "Errors"`)
	}
	_, table, ok = strings.Cut(table, "| code | what |\n| --- | --- |\n")
	if !ok {
		t.Fatal("docs/agent-hosts.md: no table of codes under Errors")
	}
	var listed []string
	for line := range strings.Lines(table) {
		code, ok := strings.CutPrefix(line, "| `")
		if !ok {
			break
		}
		code, _, _ = strings.Cut(code, "`")
		listed = append(listed, code)
	}
	if want := append(slices.Clone(wrapCodes), "usage"); !slices.Equal(listed, want) {
		t.Errorf("docs/agent-hosts.md lists %q, want %q", listed, want)
	}
}
