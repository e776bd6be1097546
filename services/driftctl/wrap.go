package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/coded"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
)

const wrapUsage = `Usage: driftctl wrap --client CLIENT [--config FILE] [--dry-run] [flags]
       driftctl unwrap --client CLIENT [--config FILE] [--dry-run]

wrap rewrites an agent host's MCP configuration so that every server goes
through the mcpdrift proxy:

  a stdio server   "command": "proxy", "args": [PROXY-ARGS..., "--server-id",
                   NAME, "--", its command, its args...]; its env and every
                   other field kept
  an HTTP server   "url": PROXY-URL/NAME/mcp (Streamable HTTP) or
                   PROXY-URL/NAME/sse (HTTP+SSE), the routes of a proxy in
                   HTTP mode (--listen) that fronts it as --upstream
                   NAME=URL (printed)

NAME is the server's name in the configuration, with characters other
than A-Z a-z 0-9 _ - replaced by -. Only the entries it rewrites change;
every other byte of the file stays as it was. The original bytes are kept
beside it in FILE.mcpdrift-backup (and FILE.mcpdrift-wrap.json records what
was written); an entry already wrapped is left alone, so wrapping twice
changes nothing. The file is replaced atomically, with its mode kept.

unwrap puts the backup's bytes back exactly. If the host changed the file
since (Claude Code rewrites ~/.claude.json as it runs), it puts back only
the wrapped entries, each only if it is still as wrap wrote it; otherwise
it refuses (config_changed) and changes nothing.

CLIENT and its configuration file when --config is not given:
  claude-desktop  macOS: ~/Library/Application Support/Claude/claude_desktop_config.json
                  Linux: $XDG_CONFIG_HOME/Claude/claude_desktop_config.json
                  (mcpServers)
  claude-code     ~/.claude.json (mcpServers, and each project's under
                  projects); a project's .mcp.json with --config
  cursor          ~/.cursor/mcp.json (mcpServers); a project's
                  .cursor/mcp.json with --config
  vscode          macOS: ~/Library/Application Support/Code/User/mcp.json
                  Linux: $XDG_CONFIG_HOME/Code/User/mcp.json
                  (servers); a workspace's .vscode/mcp.json, or a
                  settings.json with "mcp": {"servers": ...}, with --config
($XDG_CONFIG_HOME is ~/.config when unset.)

Restart the host (or reload its MCP servers) afterwards.

`

// The codes of wrap's and unwrap's errors, in the order of the table in
// docs/agent-hosts.md#errors.
const (
	codeUnknownClient    = "unknown_client"
	codeConfigUnreadable = "config_unreadable"
	codeConfigInvalid    = "config_invalid"
	codeServerIDConflict = "server_id_conflict"
	codeProxyURLRequired = "proxy_url_required"
	codeConfigChanged    = "config_changed"
	codeNotWrapped       = "not_wrapped"
	codeBackupInvalid    = "backup_invalid"
	codeWriteFailed      = "write_failed"
)

var wrapCodes = []string{codeUnknownClient, codeConfigUnreadable, codeConfigInvalid, codeServerIDConflict, codeProxyURLRequired, codeConfigChanged, codeNotWrapped, codeBackupInvalid, codeWriteFailed}

// hostClient is an agent host whose MCP configuration wrap rewrites.
type hostClient struct {
	name string
	// jsonc: the host reads its file as JSON with comments and trailing
	// commas (VS Code).
	jsonc bool
	// path is the configuration file's documented location.
	path func(home, configDir string) string
	// maps finds the server maps in the document's top-level members: each
	// the path of keys from the top to an object of servers by name.
	maps func(doc []byte, top []member) ([][]string, error)
}

// mcpServers is the server map of Claude Desktop and Cursor.
func mcpServers(_ []byte, top []member) ([][]string, error) {
	if _, ok := lookup(top, "mcpServers"); ok {
		return [][]string{{"mcpServers"}}, nil
	}
	return nil, nil
}

var hostClients = []hostClient{
	{name: "claude-desktop", maps: mcpServers,
		path: func(_, configDir string) string {
			return filepath.Join(configDir, "Claude", "claude_desktop_config.json")
		}},
	{name: "claude-code", path: func(home, _ string) string { return filepath.Join(home, ".claude.json") },
		// The user's servers at the top, a project's (local scope) under
		// projects.<its directory>.
		maps: func(doc []byte, top []member) ([][]string, error) {
			paths, _ := mcpServers(doc, top)
			projects, ok := lookup(top, "projects")
			if !ok {
				return paths, nil
			}
			ps, err := objectMembers(doc, projects.start, projects.end)
			if err != nil {
				return nil, fmt.Errorf("projects: %w", err)
			}
			for _, p := range ps {
				pm, err := objectMembers(doc, p.start, p.end)
				if err != nil {
					return nil, fmt.Errorf("projects %q: %w", p.key, err)
				}
				if _, ok := lookup(pm, "mcpServers"); ok {
					paths = append(paths, []string{"projects", p.key, "mcpServers"})
				}
			}
			return paths, nil
		}},
	{name: "cursor", maps: mcpServers, path: func(home, _ string) string { return filepath.Join(home, ".cursor", "mcp.json") }},
	{name: "vscode", jsonc: true,
		path: func(_, configDir string) string { return filepath.Join(configDir, "Code", "User", "mcp.json") },
		// mcp.json has servers at the top; a settings.json under mcp.
		maps: func(doc []byte, top []member) ([][]string, error) {
			if _, ok := lookup(top, "servers"); ok {
				return [][]string{{"servers"}}, nil
			}
			if mcp, ok := lookup(top, "mcp"); ok {
				ms, err := objectMembers(doc, mcp.start, mcp.end)
				if err != nil {
					return nil, fmt.Errorf("mcp: %w", err)
				}
				if _, ok := lookup(ms, "servers"); ok {
					return [][]string{{"mcp", "servers"}}, nil
				}
			}
			return nil, nil
		}},
}

func hostClientNames() string {
	names := make([]string, len(hostClients))
	for i, c := range hostClients {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// defaultConfigPath is client's configuration file on goos, for the user
// whose environment getenv reads (HOME, XDG_CONFIG_HOME).
func defaultConfigPath(c hostClient, goos string, getenv func(string) string) (string, error) {
	home := getenv("HOME")
	if home == "" {
		return "", options.Usagef("HOME is not set: give the configuration file with --config")
	}
	configDir := filepath.Join(home, ".config")
	switch {
	case goos == "darwin":
		configDir = filepath.Join(home, "Library", "Application Support")
	case getenv("XDG_CONFIG_HOME") != "":
		configDir = getenv("XDG_CONFIG_HOME")
	}
	return c.path(home, configDir), nil
}

// wrapSettings are how a wrap routes servers through the proxy.
type wrapSettings struct {
	Proxy     string   // the proxy command of stdio entries
	ProxyArgs []string // before --server-id
	ProxyURL  string   // the HTTP proxy's base URL, without a trailing /
}

// argList is a repeatable flag whose values are kept whole (commas too).
type argList []string

func (a *argList) String() string     { return "" }
func (a *argList) Set(s string) error { *a = append(*a, s); return nil }

// runWrap implements "driftctl wrap" and, with undo, "driftctl unwrap".
func runWrap(args []string, undo bool, getenv func(string) string, stdout, stderr io.Writer) error {
	name := "driftctl wrap"
	if undo {
		name = "driftctl unwrap"
	}
	var clientName, configPath, natsURL, tenant string
	var dryRun bool
	var proxyArgs argList
	set := wrapSettings{Proxy: "proxy"}
	opts := []options.Option{
		options.Opt("client", "", "CLIENT", "the agent host: "+hostClientNames(), options.String(&clientName)),
		options.Opt("config", "", "FILE", "its configuration file; none: the host's documented location (above)", options.String(&configPath)),
		options.Opt("dry-run", "", "", "print what would change and write nothing", options.Bool(&dryRun)),
	}
	if !undo {
		opts = append(opts,
			options.Opt("proxy", "", "PATH", "the proxy command stdio entries run: a name looked up on the host's PATH, or a path (made absolute); give a path where the host does not start servers with your shell's PATH (Claude Desktop on macOS)", options.String(&set.Proxy)),
			options.Opt("proxy-url", "", "URL", "the base URL of the proxy in HTTP mode that fronts the HTTP servers, e.g. http://127.0.0.1:8080; needed when there are any", options.String(&set.ProxyURL)),
			options.Opt("nats-url", "", "URL", "pass --nats-url URL to every stdio proxy", options.String(&natsURL)),
			options.Opt("tenant", "", "ID", "pass --tenant ID to every stdio proxy", options.String(&tenant)),
			options.Opt("proxy-arg", "", "ARG", "one more argument for every stdio proxy, before --server-id (repeat for several, e.g. --proxy-arg=--outbox-dir=/var/tmp/mcpdrift)", &proxyArgs),
		)
	}
	c := options.Command{Name: name, Header: wrapUsage, Options: opts, Args: options.NoArgs}
	if _, err := options.Parse(c, args, noEnv, stderr); err != nil {
		return err
	}
	if clientName == "" {
		return usageOf(c, stderr, "give the agent host with --client (%s)", hostClientNames())
	}
	i := slices.IndexFunc(hostClients, func(h hostClient) bool { return h.name == clientName })
	if i < 0 {
		return coded.Errorf(codeUnknownClient, "no agent host %q: the hosts are %s", clientName, hostClientNames())
	}
	client := hostClients[i]
	if natsURL != "" {
		set.ProxyArgs = append(set.ProxyArgs, "--nats-url", natsURL)
	}
	if tenant != "" {
		if err := bus.ValidID("tenant", tenant); err != nil {
			return options.Usagef("--tenant: %v", err)
		}
		set.ProxyArgs = append(set.ProxyArgs, "--tenant", tenant)
	}
	set.ProxyArgs = append(set.ProxyArgs, proxyArgs...)
	set.ProxyURL = strings.TrimRight(set.ProxyURL, "/")
	if set.ProxyURL != "" && !strings.HasPrefix(set.ProxyURL, "http://") && !strings.HasPrefix(set.ProxyURL, "https://") {
		return options.Usagef("--proxy-url %q: want http://HOST:PORT or https://HOST:PORT", set.ProxyURL)
	}
	if set.Proxy == "" {
		return options.Usagef("--proxy must not be empty")
	}
	// A relative path would be relative to wherever the host starts its
	// servers: make it absolute. A bare name is looked up on the host's PATH.
	if strings.ContainsRune(set.Proxy, filepath.Separator) && !filepath.IsAbs(set.Proxy) {
		abs, err := filepath.Abs(set.Proxy)
		if err != nil {
			return options.Usagef("--proxy %q: %v", set.Proxy, err)
		}
		set.Proxy = abs
	}
	if configPath == "" {
		var err error
		if configPath, err = defaultConfigPath(client, runtime.GOOS, getenv); err != nil {
			return err
		}
	}
	f, err := openHostConfig(client, configPath)
	if err != nil {
		return err
	}
	if undo {
		return f.unwrap(dryRun, stdout)
	}
	return f.wrap(set, dryRun, stdout)
}

// hostConfig is a host's configuration file as read.
type hostConfig struct {
	client hostClient
	path   string // symbolic links resolved: the file replaced is the target
	mode   fs.FileMode
	doc    []byte // as read
	parsed []byte // doc, with comments blanked where the host allows them
}

func (h *hostConfig) backupPath() string { return h.path + ".mcpdrift-backup" }
func (h *hostConfig) statePath() string  { return h.path + ".mcpdrift-wrap.json" }

// openHostConfig reads path and checks that it is JSON (config_unreadable,
// config_invalid).
func openHostConfig(c hostClient, path string) (*hostConfig, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, coded.Errorf(codeConfigUnreadable, "reading the %s configuration: %w", c.name, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, coded.Errorf(codeConfigUnreadable, "reading the %s configuration: %w", c.name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, coded.Errorf(codeConfigUnreadable, "the %s configuration %s is not a regular file", c.name, path)
	}
	if st.Size() > maxInput {
		return nil, coded.Errorf(codeConfigInvalid, "%s is over %d bytes", path, maxInput)
	}
	doc, err := os.ReadFile(real)
	if err != nil {
		return nil, coded.Errorf(codeConfigUnreadable, "reading the %s configuration: %w", c.name, err)
	}
	h := &hostConfig{client: c, path: real, mode: st.Mode().Perm(), doc: doc, parsed: doc}
	if c.jsonc {
		h.parsed = blankJSONC(doc)
	}
	if !json.Valid(h.parsed) {
		what := "JSON"
		if c.jsonc {
			what = "JSON (with comments)"
		}
		return nil, coded.Errorf(codeConfigInvalid, "%s is not %s", path, what)
	}
	return h, nil
}

// invalid is a config_invalid error about h's file.
func (h *hostConfig) invalid(format string, a ...any) error {
	return coded.Errorf(codeConfigInvalid, "%s: %s", h.path, fmt.Sprintf(format, a...))
}

// serverEntry is one server of a host's configuration.
type serverEntry struct {
	path   []string // keys from the top to the entry; the last is its name
	m      member
	fields []member
	// What the host reads of it.
	command, url, typ string
	args              []string
	hasArgs           bool
}

// name is the entry's name; label adds where it is when that is not the
// top level (a Claude Code project's).
func (e serverEntry) name() string { return e.path[len(e.path)-1] }
func (e serverEntry) label() string {
	if len(e.path) > 2 {
		return e.name() + " in " + strings.Join(e.path[:len(e.path)-2], " ")
	}
	return e.name()
}

// kind is stdio, http (Streamable HTTP) or sse (HTTP+SSE).
func (e serverEntry) kind() string {
	switch {
	case e.command != "":
		return "stdio"
	case e.typ == "sse", e.typ == "" && strings.HasSuffix(strings.TrimRight(urlPath(e.url), "/"), "/sse"):
		return "sse"
	}
	return "http"
}

func urlPath(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	return u
}

// entries reads every server of the document (config_invalid when one is
// not in the host's shape).
func (h *hostConfig) entries() ([]serverEntry, error) {
	doc := h.parsed
	top, err := objectMembers(doc, 0, len(doc))
	if err != nil {
		return nil, h.invalid("%v", err)
	}
	maps, err := h.client.maps(doc, top)
	if err != nil {
		return nil, h.invalid("%v", err)
	}
	var out []serverEntry
	for _, mp := range maps {
		m, err := find(doc, mp)
		if err != nil {
			return nil, h.invalid("%v", err)
		}
		servers, err := objectMembers(doc, m.start, m.end)
		if err != nil {
			return nil, h.invalid("%s: %v", strings.Join(mp, "."), err)
		}
		for _, s := range servers {
			e := serverEntry{path: append(slices.Clone(mp), s.key), m: s}
			if e.fields, err = objectMembers(doc, s.start, s.end); err != nil {
				return nil, h.invalid("server %s: %v", e.label(), err)
			}
			if err := e.read(doc); err != nil {
				return nil, h.invalid("server %s: %v", e.label(), err)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// find is the member at path from the top of doc.
func find(doc []byte, path []string) (member, error) {
	m := member{start: 0, end: len(doc)}
	for i, k := range path {
		ms, err := objectMembers(doc, m.start, m.end)
		if err != nil {
			return member{}, fmt.Errorf("%s: %w", strings.Join(path[:i], "."), err)
		}
		var ok bool
		if m, ok = lookup(ms, k); !ok {
			return member{}, fmt.Errorf("no %s", strings.Join(path[:i+1], "."))
		}
	}
	return m, nil
}

// read decodes the fields of e the host acts on.
func (e *serverEntry) read(doc []byte) error {
	str := func(key string, into *string) error {
		if f, ok := lookup(e.fields, key); ok {
			if err := json.Unmarshal(f.value(doc), into); err != nil {
				return fmt.Errorf("%s is %s, not a string", key, kindOf(f.value(doc)))
			}
		}
		return nil
	}
	if err := errors.Join(str("command", &e.command), str("url", &e.url), str("type", &e.typ)); err != nil {
		return err
	}
	if f, ok := lookup(e.fields, "args"); ok {
		e.hasArgs = true
		if err := json.Unmarshal(f.value(doc), &e.args); err != nil {
			return errors.New("args is not an array of strings")
		}
	}
	switch {
	case e.command != "" && e.url != "":
		return errors.New("it has both a command and a url")
	case e.command != "" && e.typ != "" && e.typ != "stdio":
		return fmt.Errorf("it has a command but type %q", e.typ)
	case e.url != "" && e.typ != "" && e.typ != "http" && e.typ != "sse" && e.typ != "streamable-http":
		return fmt.Errorf("type %q is not one the proxy fronts (stdio, http, sse)", e.typ)
	case e.command == "" && e.url == "":
		return errors.New("it has neither a command nor a url")
	}
	return nil
}

var notID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// serverID is the proxy's server id for a server named name.
func serverID(name string) string {
	id := strings.Trim(notID.ReplaceAllString(name, "-"), "-")
	if len(id) > 64 {
		id = strings.TrimRight(id[:64], "-")
	}
	return id
}

// wrapped reports whether e already goes through the proxy.
func (e serverEntry) wrapped(set wrapSettings) bool {
	if e.command != "" {
		return filepath.Base(e.command) == filepath.Base(set.Proxy) && slices.Contains(e.args, "--server-id") && slices.Contains(e.args, "--")
	}
	return set.ProxyURL != "" && strings.HasPrefix(e.url, set.ProxyURL+"/")
}

// insertAfter is the edit, in e's bytes, that adds the member key: value
// after e's member prev, in the layout of prev: on its own line under it,
// or on the same line, with the same separator after the key.
func (h *hostConfig) insertAfter(e serverEntry, prev, key string, value []byte) edit {
	f, _ := lookup(e.fields, prev)
	doc := h.parsed
	colon := doc[bytes.LastIndexByte(doc[:f.start], '"')+1 : f.start] // ": " or ":"
	sep := ", "
	if bytes.ContainsRune(doc[e.m.start:f.start], '\n') {
		sep = ",\n" + lineIndent(doc, f.start)
	}
	ins := append(append(append([]byte(sep), jsonString(key)...), colon...), value...)
	at := f.end - e.m.start
	return edit{start: at, end: at, repl: ins}
}

// rewrite is what a wrap does to one entry.
type rewrite struct {
	entry         serverEntry
	id            string
	before, after string // what runs or is reached, for people
	upstream      string // an HTTP server: the proxy's --upstream
	edit          edit
}

// plan works out the rewrites of a wrap; done lists the entries already
// wrapped.
func (h *hostConfig) plan(set wrapSettings) (rws []rewrite, done []serverEntry, err error) {
	entries, err := h.entries()
	if err != nil {
		return nil, nil, err
	}
	ids := map[string]string{} // id -> entry label, per server map
	var needURL []string
	for _, e := range entries {
		if e.wrapped(set) {
			done = append(done, e)
			continue
		}
		id := serverID(e.name())
		if bus.ValidID("server", id) != nil {
			return nil, nil, h.invalid("server name %q gives no server id (1 to 64 of A-Z a-z 0-9 _ -)", e.name())
		}
		scope := strings.Join(e.path[:len(e.path)-1], "\x00") + "\x00" + id
		if other, ok := ids[scope]; ok {
			return nil, nil, coded.Errorf(codeServerIDConflict, "%s: servers %q and %q would both be server id %q: rename one", h.path, other, e.name(), id)
		}
		ids[scope] = e.name()
		rw := rewrite{entry: e, id: id}
		repl := map[string][]byte{} // new values of fields, in place of the old
		var edits []edit            // in the entry's bytes
		switch kind := e.kind(); kind {
		case "stdio":
			args := append(append(slices.Clone(set.ProxyArgs), "--server-id", id, "--", e.command), e.args...)
			rw.before, rw.after = shellLine(append([]string{e.command}, e.args...)), shellLine(append([]string{set.Proxy}, args...))
			repl["command"] = jsonString(set.Proxy)
			if f, ok := lookup(e.fields, "args"); ok {
				repl["args"] = jsonArray(f.value(h.parsed), args)
			} else {
				edits = append(edits, h.insertAfter(e, "command", "args", jsonArray(nil, args)))
			}
		default:
			if set.ProxyURL == "" {
				needURL = append(needURL, e.label())
				continue
			}
			route, up := "/mcp", e.url
			if kind == "sse" {
				route, up = "/sse", "sse:"+e.url
			}
			rw.before, rw.after, rw.upstream = e.url, set.ProxyURL+"/"+id+route, id+"="+up
			repl["url"] = jsonString(rw.after)
		}
		for _, f := range e.fields {
			if v, ok := repl[f.key]; ok {
				edits = append(edits, edit{start: f.start - e.m.start, end: f.end - e.m.start, repl: v})
			}
		}
		rw.edit = edit{start: e.m.start, end: e.m.end, repl: applyEdits(e.m.value(h.doc), edits)}
		rws = append(rws, rw)
	}
	if len(needURL) > 0 {
		return nil, nil, coded.Errorf(codeProxyURLRequired, "%s has HTTP servers (%s): give the base URL of the proxy that fronts them with --proxy-url", h.path, strings.Join(needURL, ", "))
	}
	return rws, done, nil
}

// wrapState is FILE.mcpdrift-wrap.json: what a wrap wrote, so that unwrap
// knows whether the file changed since.
type wrapState struct {
	Client  string       `json:"client"`
	Backup  string       `json:"backup_sha256"`  // the original bytes, in FILE.mcpdrift-backup
	Wrapped string       `json:"wrapped_sha256"` // the file as the wrap wrote it
	Entries []stateEntry `json:"entries"`
}

// stateEntry is one entry a wrap rewrote: its path of keys and the digest
// of its compact JSON as written.
type stateEntry struct {
	Path    []string `json:"path"`
	Wrapped string   `json:"wrapped_sha256"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// entryDigest is the digest of a JSON value's meaning: the same whatever
// indentation or key order a host rewrites it with.
func entryDigest(v []byte) string {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return digest(v)
	}
	b, err := json.Marshal(x) // objects' keys sorted
	if err != nil {
		return digest(v)
	}
	return digest(b)
}

// readState reads the state of a previous wrap; nil when there is none.
func (h *hostConfig) readState() (*wrapState, error) {
	b, err := os.ReadFile(h.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, coded.Errorf(codeBackupInvalid, "reading %s: %w", h.statePath(), err)
	}
	var st wrapState
	if err := json.Unmarshal(b, &st); err != nil || st.Backup == "" || st.Wrapped == "" {
		return nil, coded.Errorf(codeBackupInvalid, "%s is not a wrap record: move it and %s away by hand", h.statePath(), filepath.Base(h.backupPath()))
	}
	if st.Client != h.client.name {
		return nil, coded.Errorf(codeBackupInvalid, "%s was wrapped as --client %s", h.path, st.Client)
	}
	return &st, nil
}

func (h *hostConfig) wrap(set wrapSettings, dryRun bool, w io.Writer) error {
	st, err := h.readState()
	if err != nil {
		return err
	}
	sum := digest(h.doc)
	if st != nil && sum == st.Wrapped {
		fmt.Fprintf(w, "%s: already wrapped, nothing to change (backup %s)\n", h.path, h.backupPath())
		return nil
	}
	rws, done, err := h.plan(set)
	if err != nil {
		return err
	}
	verb := "wrapped"
	if dryRun {
		verb = "would wrap"
	}
	fmt.Fprintf(w, "%s (%s)\n", h.path, h.client.name)
	for _, e := range done {
		fmt.Fprintf(w, "  already wrapped: %s\n", e.label())
	}
	for _, rw := range rws {
		fmt.Fprintf(w, "  %s %s (%s): %s\n      now: %s\n", verb, rw.entry.label(), rw.entry.kind(), rw.before, rw.after)
	}
	if len(rws) == 0 {
		fmt.Fprintln(w, "nothing to wrap")
		return nil
	}
	// A record of an earlier wrap: the file changed since (a wrap now
	// would leave a backup unwrap cannot use), unless the file is still
	// the backup (that wrap stopped before it replaced the file): start
	// anew then.
	if st != nil && sum != st.Backup {
		return coded.Errorf(codeConfigChanged, "%s changed since it was wrapped and has servers that are not wrapped: run driftctl unwrap first (the backup %s holds the bytes before the last wrap), then wrap again", h.path, h.backupPath())
	}
	wrapped := applyEdits(h.doc, editsOf(rws))
	if dryRun {
		fmt.Fprintln(w, "dry run: nothing written")
	} else {
		rec := wrapState{Client: h.client.name, Backup: sum, Wrapped: digest(wrapped)}
		for _, rw := range rws {
			rec.Entries = append(rec.Entries, stateEntry{Path: rw.entry.path, Wrapped: entryDigest(rw.edit.repl)})
		}
		recJSON, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return err
		}
		// The backup and its record first: the file is replaced only
		// once unwrap can undo it. The backup holds what the file held
		// (its env may hold secrets): owner only.
		if err := writeAtomic(h.backupPath(), h.doc, 0o600); err != nil {
			return err
		}
		if err := writeAtomic(h.statePath(), append(recJSON, '\n'), 0o600); err != nil {
			return err
		}
		if err := writeAtomic(h.path, wrapped, h.mode); err != nil {
			return err
		}
		fmt.Fprintf(w, "backup: %s\n", h.backupPath())
	}
	var ups []string
	for _, rw := range rws {
		if rw.upstream != "" {
			ups = append(ups, "--upstream "+shellLine([]string{rw.upstream}))
		}
	}
	if len(ups) > 0 {
		fmt.Fprintf(w, "the proxy at %s must front the HTTP servers:\n  proxy --listen HOST:PORT %s\n", set.ProxyURL, strings.Join(ups, " "))
	}
	return nil
}

func editsOf(rws []rewrite) []edit {
	es := make([]edit, len(rws))
	for i, rw := range rws {
		es[i] = rw.edit
	}
	return es
}

func (h *hostConfig) unwrap(dryRun bool, w io.Writer) error {
	st, err := h.readState()
	if err != nil {
		return err
	}
	if st == nil {
		return coded.Errorf(codeNotWrapped, "%s has no wrap to undo (no %s)", h.path, filepath.Base(h.statePath()))
	}
	backup, err := os.ReadFile(h.backupPath())
	if err != nil {
		return coded.Errorf(codeBackupInvalid, "reading the backup: %w", err)
	}
	if digest(backup) != st.Backup {
		return coded.Errorf(codeBackupInvalid, "%s is not the backup %s records: restore it by hand", h.backupPath(), filepath.Base(h.statePath()))
	}
	var restored []byte
	sum := digest(h.doc)
	switch sum {
	case st.Wrapped:
		restored = backup
		fmt.Fprintf(w, "%s (%s): restoring the bytes it had before the wrap\n", h.path, h.client.name)
	case st.Backup:
		restored = backup // a wrap interrupted before it replaced the file
		fmt.Fprintf(w, "%s (%s): never replaced by the wrap; removing its backup\n", h.path, h.client.name)
	default:
		if restored, err = h.restoreEntries(st, backup); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s (%s): changed since the wrap; restoring its %d wrapped entries only\n", h.path, h.client.name, len(st.Entries))
	}
	for _, e := range st.Entries {
		fmt.Fprintf(w, "  unwrapped %s\n", serverEntry{path: e.Path}.label())
	}
	if dryRun {
		fmt.Fprintln(w, "dry run: nothing written")
		return nil
	}
	if sum != st.Backup {
		if err := writeAtomic(h.path, restored, h.mode); err != nil {
			return err
		}
	}
	if err := errors.Join(os.Remove(h.statePath()), os.Remove(h.backupPath())); err != nil {
		return coded.Errorf(codeWriteFailed, "removing the backup: %w", err)
	}
	return nil
}

// restoreEntries puts back, in the current file, the original of each
// entry the wrap rewrote, each only if it is still as the wrap wrote it.
func (h *hostConfig) restoreEntries(st *wrapState, backup []byte) ([]byte, error) {
	orig := backup
	if h.client.jsonc {
		orig = blankJSONC(backup)
	}
	var edits []edit
	for _, e := range st.Entries {
		where := strings.Join(e.Path, ".")
		cur, err := find(h.parsed, e.Path)
		if err != nil || entryDigest(cur.value(h.parsed)) != e.Wrapped {
			return nil, coded.Errorf(codeConfigChanged, "%s changed since the wrap and its server %s is no longer as the wrap wrote it: nothing restored (the original bytes are in %s)", h.path, where, h.backupPath())
		}
		was, err := find(orig, e.Path)
		if err != nil {
			return nil, coded.Errorf(codeBackupInvalid, "%s has no %s", h.backupPath(), where)
		}
		edits = append(edits, edit{start: cur.start, end: cur.end, repl: was.value(backup)})
	}
	return applyEdits(h.doc, edits), nil
}

// writeAtomic replaces path with data: a temporary file in its directory,
// synced, renamed over it.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return coded.Errorf(codeWriteFailed, "writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return coded.Errorf(codeWriteFailed, "writing %s: %w", path, err)
	}
	return nil
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellLine is argv as one would type it in a POSIX shell.
func shellLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if plainWord.MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
