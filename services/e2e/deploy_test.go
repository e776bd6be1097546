package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// The deployment artifacts (deploy/) and the configuration reference
// (docs/configuration.md), checked against the commands they run: built
// with scripts/images.sh, the way the image builds them, and asked for their
// --help.

// repoRoot is the repository, from services/e2e.
const repoRoot = "../.."

// deployCommand is a command that deploy/ runs and docs/configuration.md
// documents under a heading of its name.
type deployCommand struct {
	name string
	// helpArgs are the argument lists whose output, together, is the
	// command's help: its flags and environment variables.
	helpArgs [][]string
	// machineDefaults are flags whose default depends on the machine
	// (host name, home directory): the documentation says what it is
	// derived from instead of the value --help shows here.
	machineDefaults []string
	// local commands are not in the image: they run the pipeline on one
	// machine (make run, make demo) and are built with go build.
	local bool
}

// deployCommands is every command of the image (scripts/images.sh builds
// them), and the local ones. Add a command here, to scripts/images.sh
// (unless local) and to docs/configuration.md together.
var deployCommands = []deployCommand{
	{name: "proxy", helpArgs: [][]string{{"--help"}}, machineDefaults: []string{"proxy-id", "outbox-dir"}},
	{name: "fingerprint", helpArgs: [][]string{{"--help"}}},
	{name: "drift", helpArgs: [][]string{{"--help"}}},
	{name: "audit", helpArgs: [][]string{{"--help"}}},
	{name: "notify", helpArgs: [][]string{{"--help"}}},
	{name: "driftctl", helpArgs: [][]string{{"--help"}, {"fingerprint", "--help"}, {"diff", "--help"}, {"capture", "--help"},
		{"status", "--help"}, {"show", "--help"}, {"history", "--help"}, {"approve", "--help"}, {"quarantine", "--help"},
		{"tail", "--help"}, {"audit", "--help"}, {"bus-setup", "--help"},
		{"policy", "apply", "--help"}, {"policy", "list", "--help"}, {"policy", "test", "--help"},
		{"baseline", "keygen", "--help"}, {"baseline", "export", "--help"}, {"baseline", "verify", "--help"}, {"baseline", "import", "--help"},
		{"wrap", "--help"}, {"unwrap", "--help"}}},
	{name: "probe", helpArgs: [][]string{{"--help"}}},
	{name: "stack", helpArgs: [][]string{{"--help"}, {"demo", "--help"}}, local: true},
	{name: "demoserver", helpArgs: [][]string{{"--help"}}, local: true},
}

// Ops ports (--ops-addr): /healthz, /readyz, /metrics.
var opsPorts = map[string]string{"fingerprint": "8471", "drift": "8472", "audit": "8473", "proxy": "8474", "notify": "8475"}

// foreignFlags are flags of other tools that deploy/ names: Dockerfile
// instructions, helm, kubectl, docker compose, systemctl, clickhouse client.
var foreignFlags = []string{"platform", "mount", "from", "chown", "install", "set-file", "rm", "scale", "profile", "now",
	"host", "user", "password", "multiquery", "ignore-not-found", "for"}

// placeholder stands for every secret in deploy/.
const placeholder = "CHANGE_ME"

// cmdHelp is what a command's --help says.
type cmdHelp struct {
	defined  map[string]string // flag -> default as --help prints it ("" for none)
	mentions map[string]bool   // every --flag the help text names, defined ones included
	env      map[string]bool   // every MCPDRIFT_ variable it names
	text     string
}

var (
	staticOnce   sync.Once
	staticDir    string
	staticErr    error
	cmdHelpsOnce sync.Once
	cmdHelps     map[string]*cmdHelp
	cmdHelpsErr  error
)

// staticBinaries builds every command with scripts/images.sh, as the
// Dockerfile's build stage does, once per test binary.
func staticBinaries(t testing.TB) string {
	t.Helper()
	staticOnce.Do(func() {
		staticDir, staticErr = os.MkdirTemp("", "mcpdrift-static-")
		if staticErr != nil {
			return
		}
		cmd := exec.Command("bash", "scripts/images.sh", "binaries", staticDir)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("scripts/images.sh binaries: %v\n%s", err, out)
			return
		}
		args := []string{"build", "-o", staticDir + "/"}
		for _, c := range deployCommands {
			if c.local {
				args = append(args, "./services/"+c.name)
			}
		}
		cmd = exec.Command("go", args...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("building the local commands: %v\n%s", err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticDir
}

var (
	flagLine   = regexp.MustCompile(`^\s{2}-{1,2}([a-z][a-z0-9-]*)\b(.*)$`)
	flagToken  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*)`)
	envToken   = regexp.MustCompile(`\bMCPDRIFT_[A-Z0-9_]*[A-Z0-9]`)
	defaultEnd = regexp.MustCompile(`\(default (.*)\)\s*$`)
)

// envNames finds the MCPDRIFT_ variables a text names; a pattern such as
// MCPDRIFT_NATS_<ROLE>_PASSWORD or MCPDRIFT_NATS_*_PASSWORD names none,
// and the streams (MCPDRIFT_OBS, ...) are not variables.
func envNames(text string) []string {
	streams := []string{bus.StreamObservations, bus.StreamFingerprints, bus.StreamVerdicts, bus.StreamAdmin}
	var out []string
	for _, m := range envToken.FindAllStringIndex(text, -1) {
		name := text[m[0]:m[1]]
		if rest := text[m[1]:]; strings.HasPrefix(rest, "_<") || strings.HasPrefix(rest, "_*") || slices.Contains(streams, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// parseCmdHelp reads both help formats: Go's flag package ("  -name type" then
// "    \tusage (default x)") and services/internal/options' table
// ("  --name ARG  ENV  usage (default x)").
func parseCmdHelp(text string) *cmdHelp {
	h := &cmdHelp{defined: map[string]string{}, mentions: map[string]bool{}, env: map[string]bool{}, text: text}
	var cur string
	var body strings.Builder
	flush := func() {
		if cur == "" {
			return
		}
		def := ""
		lines := strings.Split(strings.TrimSpace(body.String()), "\n")
		if m := defaultEnd.FindStringSubmatch(lines[len(lines)-1]); m != nil {
			def = strings.Trim(m[1], `"`)
		}
		h.defined[cur] = def
		cur = ""
		body.Reset()
	}
	for _, line := range strings.Split(text, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flush()
			cur = m[1]
			body.WriteString(m[2] + "\n")
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    \t") {
			body.WriteString(line + "\n")
			continue
		}
		flush()
	}
	flush()
	for f := range h.defined {
		h.mentions[f] = true
	}
	for _, m := range flagToken.FindAllStringSubmatch(text, -1) {
		h.mentions[m[1]] = true
	}
	for _, e := range envNames(text) {
		h.env[e] = true
	}
	return h
}

// commandHelps runs every command's --help (the built binaries).
func commandHelps(t testing.TB) map[string]*cmdHelp {
	t.Helper()
	dir := staticBinaries(t)
	cmdHelpsOnce.Do(func() {
		cmdHelps = map[string]*cmdHelp{}
		for _, c := range deployCommands {
			var all strings.Builder
			for _, args := range c.helpArgs {
				cmd := exec.Command(filepath.Join(dir, c.name), args...)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")} // defaults unaffected by MCPDRIFT_*
				out, _ := cmd.CombinedOutput()                                               // --help exits 0 or 2 depending on the flag package
				if !strings.Contains(string(out), "Usage") {
					cmdHelpsErr = fmt.Errorf("%s %s printed no usage:\n%s", c.name, strings.Join(args, " "), out)
					return
				}
				all.Write(out)
				all.WriteString("\n")
			}
			cmdHelps[c.name] = parseCmdHelp(all.String())
		}
	})
	if cmdHelpsErr != nil {
		t.Fatal(cmdHelpsErr)
	}
	return cmdHelps
}

// TestImagesScriptBuildsStaticBinaries: scripts/images.sh (what the
// Dockerfile runs) builds every command as a static ELF with the declared
// flags, and its list of commands is the table above.
func TestImagesScriptBuildsStaticBinaries(t *testing.T) {
	dir := staticBinaries(t)
	script := readRepo(t, "scripts/images.sh")
	var listed []string
	for _, v := range []string{"COMMANDS", "TOOLS"} {
		m := regexp.MustCompile(`(?m)^` + v + `=\(([^)]*)\)`).FindStringSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/images.sh has no %s=(...)", v)
		}
		listed = append(listed, strings.Fields(m[1])...)
	}
	var table []string
	for _, c := range deployCommands {
		if !c.local {
			table = append(table, c.name)
		}
	}
	if !slices.Equal(sortedCopy(listed), sortedCopy(table)) {
		t.Fatalf("scripts/images.sh builds %v; deployCommands lists %v", listed, table)
	}
	for _, name := range table {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			f, err := elf.Open(path)
			if err != nil {
				t.Fatalf("%s is not an ELF: %v", name, err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Fatalf("%s has a program interpreter: it is dynamically linked", name)
				}
			}
			if f.Section(".symtab") != nil {
				t.Errorf("%s has a symbol table: built without -ldflags -s", name)
			}
			if f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil {
				t.Errorf("%s has DWARF: built without -ldflags -w", name)
			}
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// (Go does not record -ldflags under -trimpath: the sections show it.)
			want := map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"}
			for _, s := range info.Settings {
				if w, ok := want[s.Key]; ok {
					if s.Value != w {
						t.Errorf("%s built with %s=%q, want %q", name, s.Key, s.Value, w)
					}
					delete(want, s.Key)
				}
			}
			if len(want) > 0 {
				t.Errorf("%s build settings lack %v", name, want)
			}
		})
	}
	// The script's own check agrees (readelf or file).
	cmd := exec.Command("bash", "scripts/images.sh", "check", dir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/images.sh check: %v\n%s", err, out)
	}
	// One place for the build flags: the Dockerfile runs the script, and
	// the build context holds what the script needs.
	dockerfile := readRepo(t, "deploy/docker/Dockerfile")
	if !strings.Contains(dockerfile, "scripts/images.sh binaries /out") || strings.Contains(dockerfile, "go build") {
		t.Fatal("deploy/docker/Dockerfile must build with `scripts/images.sh binaries /out`, not go build of its own")
	}
	ignore := readRepo(t, ".dockerignore")
	for _, line := range strings.Split(dockerfile, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "COPY" || strings.HasPrefix(fields[1], "--from") {
			continue
		}
		for _, src := range fields[1 : len(fields)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			src = strings.TrimSuffix(src, "/")
			top := strings.SplitN(src, "/", 2)[0]
			if !strings.Contains(ignore, "!"+src) && !strings.Contains(ignore, "!"+top+"/") {
				t.Errorf(".dockerignore leaves %s out of the build context, which the Dockerfile copies", src)
			}
		}
	}
}

// TestDeployYAML: every YAML file under deploy/ parses; every Kubernetes
// object is complete; the kustomizations name files that exist; the
// Kubernetes copy of auth.conf is deploy/nats/auth.conf.
func TestDeployYAML(t *testing.T) {
	for _, f := range deployFiles(t, ".yaml", ".yml") {
		t.Run(strings.NewReplacer("/", "_", ".", "_").Replace(f), func(t *testing.T) {
			docs := yamlDocs(t, f)
			if len(docs) == 0 {
				t.Fatalf("%s holds no YAML document", f)
			}
			if !strings.HasPrefix(f, "deploy/kubernetes/") || isNotK8sObject(f) {
				return
			}
			for i, d := range docs {
				meta, _ := d["metadata"].(map[string]any)
				if d["apiVersion"] == nil || d["kind"] == nil || meta == nil || meta["name"] == nil {
					t.Errorf("%s document %d lacks apiVersion, kind or metadata.name", f, i)
				}
			}
		})
	}
	for _, k := range []string{"deploy/kubernetes/kustomization.yaml", "deploy/kubernetes/examples/kustomization.yaml"} {
		kz := yamlDocs(t, k)[0]
		dir := filepath.Dir(k)
		var listed []string
		for _, r := range kz["resources"].([]any) {
			listed = append(listed, r.(string))
		}
		for _, g := range yamlList(kz["configMapGenerator"]) {
			for _, f := range yamlList(g.(map[string]any)["files"]) {
				listed = append(listed, f.(string))
			}
		}
		for _, r := range listed {
			if _, err := os.Stat(filepath.Join(repoRoot, dir, r)); err != nil {
				t.Errorf("%s names %s: %v", k, r, err)
			}
		}
		// Every manifest of the directory is applied.
		entries, _ := os.ReadDir(filepath.Join(repoRoot, dir))
		for _, e := range entries {
			if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".yaml") && n != "kustomization.yaml" && !slices.Contains(listed, n) {
				t.Errorf("%s does not list %s", k, n)
			}
		}
	}
	if a, b := readRepo(t, "deploy/nats/auth.conf"), readRepo(t, "deploy/kubernetes/nats/auth.conf"); a != b {
		t.Error("deploy/kubernetes/nats/auth.conf differs from deploy/nats/auth.conf: copy it again (kustomize reads files under its directory only)")
	}
	// The site example's leaf node runs deploy/nats/leaf.
	for _, f := range []string{"leaf.conf", "auth.conf"} {
		if a, b := readRepo(t, "deploy/nats/leaf/"+f), readRepo(t, "deploy/kubernetes/examples/leaf/"+f); a != b {
			t.Errorf("deploy/kubernetes/examples/leaf/%s differs from deploy/nats/leaf/%s: copy it again (kustomize reads files under its directory only)", f, f)
		}
	}
}

// isNotK8sObject: YAML under deploy/kubernetes that is not an object.
func isNotK8sObject(f string) bool {
	return strings.HasSuffix(f, "kustomization.yaml") || strings.HasSuffix(f, "helm-values.yaml")
}

// TestKubernetesNATSConfigValid: nats-server accepts the Kubernetes NATS
// config (each pod names itself from POD_NAME).
func TestKubernetesNATSConfigValid(t *testing.T) {
	d := newNATSDeployment(t)
	cmd := exec.Command(d.bin, "-t", "-c", filepath.Join(repoRoot, "deploy/kubernetes/nats/nats.conf"))
	cmd.Env = append(append(os.Environ(), d.env...), "POD_NAME=nats-0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats-server -t: %v\n%s", err, out)
	}
}

// workloadContainer is one container of a workload, with where it was found.
type workloadContainer struct {
	where, kind string
	spec        map[string]any
	podSpec     map[string]any
}

// TestKubernetesWorkloads: every container of the mcpdrift image runs a
// command of the table with flags and variables its --help lists, has
// probes on /healthz and /readyz at the ops port its environment sets (a
// Job, which runs to completion, has neither), and runs as non-root with a read-only root filesystem and resource requests.
func TestKubernetesWorkloads(t *testing.T) {
	hs := commandHelps(t)
	var found int
	for _, f := range deployFiles(t, ".yaml") {
		if !strings.HasPrefix(f, "deploy/kubernetes/") || isNotK8sObject(f) {
			continue
		}
		for _, c := range k8sContainers(t, f) {
			name, _ := c.spec["name"].(string)
			t.Run(strings.ReplaceAll(f, "/", "_")+"_"+name, func(t *testing.T) {
				checkContainerSecurity(t, c)
				image, _ := c.spec["image"].(string)
				if !strings.HasPrefix(image, "mcpdrift") {
					return
				}
				found++
				cmdline := yamlStrings(c.spec["command"])
				cmdline = append(cmdline, yamlStrings(c.spec["args"])...)
				if len(cmdline) == 0 {
					t.Fatalf("%s: container %s of the mcpdrift image names no command", c.where, name)
				}
				h, ok := hs[cmdline[0]]
				if !ok {
					t.Fatalf("%s: command %q is not a command of the image", c.where, cmdline[0])
				}
				env := map[string]string{}
				for _, e := range yamlList(c.spec["env"]) {
					em := e.(map[string]any)
					v, _ := em["value"].(string)
					env[em["name"].(string)] = v
				}
				checkCommandUse(t, c.where, cmdline[0], h, cmdline[1:], env)
				if c.kind == "Job" { // runs to completion: no ops port, no probes
					if c.podSpec["restartPolicy"] != "Never" && c.podSpec["restartPolicy"] != "OnFailure" {
						t.Errorf("%s: a Job's restartPolicy must be Never or OnFailure", c.where)
					}
					return
				}
				ops := opsAddr(cmdline[1:], env)
				if ops == "" {
					t.Fatalf("%s: %s sets no ops address (MCPDRIFT_OPS_ADDR or --ops-addr)", c.where, cmdline[0])
				}
				_, port, err := net.SplitHostPort(ops)
				if err != nil {
					t.Fatalf("%s: ops address %q: %v", c.where, ops, err)
				}
				if want := opsPorts[cmdline[0]]; port != want {
					t.Errorf("%s: %s ops port %s, want %s", c.where, cmdline[0], port, want)
				}
				ports := map[string]string{}
				for _, p := range yamlList(c.spec["ports"]) {
					pm := p.(map[string]any)
					n, _ := pm["name"].(string)
					ports[n] = fmt.Sprint(pm["containerPort"])
				}
				for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
					pr, _ := c.spec[probe].(map[string]any)
					get, _ := pr["httpGet"].(map[string]any)
					if get == nil {
						t.Errorf("%s: %s has no %s httpGet", c.where, name, probe)
						continue
					}
					p := fmt.Sprint(get["port"])
					if n, ok := ports[p]; ok {
						p = n
					}
					if get["path"] != path || p != port {
						t.Errorf("%s: %s %s is %v on port %s, want %s on the ops port %s", c.where, name, probe, get["path"], p, path, port)
					}
				}
			})
		}
	}
	if found < 5 {
		t.Fatalf("found %d containers of the mcpdrift image, want at least 5 (fingerprint, drift, audit, proxy daemonset, sidecar)", found)
	}
}

func k8sContainers(t *testing.T, f string) []workloadContainer {
	var out []workloadContainer
	for _, d := range yamlDocs(t, f) {
		kind, _ := d["kind"].(string)
		spec, _ := d["spec"].(map[string]any)
		var pod map[string]any
		switch kind {
		case "Deployment", "DaemonSet", "StatefulSet", "Job":
			tpl, _ := spec["template"].(map[string]any)
			pod, _ = tpl["spec"].(map[string]any)
		case "Pod":
			pod = spec
		default:
			continue
		}
		meta := d["metadata"].(map[string]any)
		for _, key := range []string{"initContainers", "containers"} {
			for _, c := range yamlList(pod[key]) {
				out = append(out, workloadContainer{where: fmt.Sprintf("%s %s/%s", f, kind, meta["name"]), kind: kind, spec: c.(map[string]any), podSpec: pod})
			}
		}
	}
	return out
}

func checkContainerSecurity(t *testing.T, c workloadContainer) {
	t.Helper()
	name := c.spec["name"]
	sc, _ := c.spec["securityContext"].(map[string]any)
	psc, _ := c.podSpec["securityContext"].(map[string]any)
	if sc["runAsNonRoot"] != true && psc["runAsNonRoot"] != true {
		t.Errorf("%s: %s may run as root (runAsNonRoot)", c.where, name)
	}
	if sc["readOnlyRootFilesystem"] != true {
		t.Errorf("%s: %s has a writable root filesystem", c.where, name)
	}
	if sc["allowPrivilegeEscalation"] != false {
		t.Errorf("%s: %s allows privilege escalation", c.where, name)
	}
	res, _ := c.spec["resources"].(map[string]any)
	if res["requests"] == nil {
		t.Errorf("%s: %s has no resource requests", c.where, name)
	}
}

// checkCommandUse: the flags in args and the MCPDRIFT_ variables in env
// are the command's.
func checkCommandUse(t *testing.T, where, cmd string, h *cmdHelp, args []string, env map[string]string) {
	t.Helper()
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			name := strings.SplitN(strings.TrimLeft(a, "-"), "=", 2)[0]
			if _, ok := h.defined[name]; !ok {
				t.Errorf("%s: %s has no flag --%s (%s --help)", where, cmd, name, cmd)
			}
		}
	}
	for k := range env {
		if strings.HasPrefix(k, "MCPDRIFT_") && !h.env[k] {
			t.Errorf("%s: %s reads no variable %s (%s --help)", where, cmd, k, cmd)
		}
	}
}

func opsAddr(args []string, env map[string]string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--ops-addr="); ok {
			return v
		}
		if a == "--ops-addr" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return env["MCPDRIFT_OPS_ADDR"]
}

// TestComposeFile: every service of deploy/compose/compose.yaml that runs
// the image runs a command of the table with its flags and variables (its
// environment and env file), and its health check asks /readyz at its ops
// port; every file it mounts or reads exists (env files as .example).
func TestComposeFile(t *testing.T) {
	hs := commandHelps(t)
	const dir = "deploy/compose"
	c := yamlDocs(t, dir+"/compose.yaml")[0]
	natsVars := natsServerVars(t)
	services := c["services"].(map[string]any)
	var ours int
	defer func() {
		if ours < 5 {
			t.Errorf("%d services run the mcpdrift image, want 5 (bus-setup, fingerprint, drift, audit, proxy)", ours)
		}
	}()
	for _, name := range sortedMapKeys(services) {
		s := services[name].(map[string]any)
		t.Run(name, func(t *testing.T) {
			where := dir + "/compose.yaml service " + name
			env := map[string]string{}
			for k, v := range yamlMap(s["environment"]) {
				env[k] = fmt.Sprint(v)
			}
			for _, ef := range yamlList(s["env_file"]) {
				example := filepath.Join(dir, ef.(string)+".example")
				for k, v := range envFile(t, example) {
					env[k] = v
				}
			}
			for _, v := range yamlList(s["volumes"]) {
				src := strings.SplitN(v.(string), ":", 2)[0]
				if strings.HasPrefix(src, ".") {
					if _, err := os.Stat(filepath.Join(repoRoot, dir, src)); err != nil {
						t.Errorf("%s mounts %s: %v", where, src, err)
					}
				}
			}
			image, _ := s["image"].(string)
			if !strings.Contains(image, "mcpdrift") {
				for k := range env {
					if strings.HasPrefix(k, "MCPDRIFT_") && !natsVars[k] {
						t.Errorf("%s sets %s, which neither NATS (deploy/nats/auth.conf) nor a command reads", where, k)
					}
				}
				return
			}
			ours++
			cmdline := yamlStrings(s["command"])
			h, ok := hs[cmdline[0]]
			if !ok {
				t.Fatalf("%s runs %q, not a command of the image", where, cmdline[0])
			}
			checkCommandUse(t, where, cmdline[0], h, cmdline[1:], env)
			ops := opsAddr(cmdline[1:], env)
			hc, _ := s["healthcheck"].(map[string]any)
			test := yamlStrings(hc["test"])
			if ops == "" {
				if s["profiles"] == nil { // the one-off setup step needs no health check
					t.Errorf("%s sets no ops address", where)
				}
				return
			}
			_, port, _ := net.SplitHostPort(ops)
			if want := "http://127.0.0.1:" + port + "/readyz"; !slices.Equal(test, []string{"CMD", "probe", want}) {
				t.Errorf("%s health check is %v, want [CMD probe %s]", where, test, want)
			}
		})
	}
}

// TestSystemdUnits: systemd-analyze verifies every unit (with the binaries
// at their installed path) and rates its exposure low; the variables of
// each unit's env file and Environment= are its command's.
func TestSystemdUnits(t *testing.T) {
	hs := commandHelps(t)
	bin := staticBinaries(t)
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: apt-get install systemd (it verifies deploy/systemd)")
	}
	const dir = "deploy/systemd"
	units, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.service"))
	if len(units) != 5 {
		t.Fatalf("want 5 units in %s, found %d", dir, len(units))
	}
	tmp := t.TempDir()
	for _, path := range units {
		unit := filepath.Base(path)
		t.Run(unit, func(t *testing.T) {
			text := readRepo(t, filepath.Join(dir, unit))
			keys := unitKeys(text)
			exec0 := strings.Fields(firstOf(keys["ExecStart"]))
			if len(exec0) == 0 || !strings.HasPrefix(exec0[0], "/opt/mcpdrift/bin/") {
				t.Fatalf("%s: ExecStart %v does not run /opt/mcpdrift/bin/<command>", unit, keys["ExecStart"])
			}
			cmd := filepath.Base(exec0[0])
			h, ok := hs[cmd]
			if !ok {
				t.Fatalf("%s runs %s, not a command of the image", unit, cmd)
			}
			env := map[string]string{}
			for _, e := range keys["Environment"] {
				k, v, _ := strings.Cut(e, "=")
				env[k] = v
			}
			for _, ef := range keys["EnvironmentFile"] {
				name := strings.ReplaceAll(filepath.Base(strings.TrimPrefix(ef, "-")), "%i", "main")
				for k, v := range envFile(t, filepath.Join(dir, name)) {
					env[k] = v
				}
			}
			checkCommandUse(t, unit, cmd, h, exec0[1:], env)
			if _, port, _ := net.SplitHostPort(env["MCPDRIFT_OPS_ADDR"]); port != opsPorts[cmd] {
				t.Errorf("%s: ops port %q, want %s", unit, port, opsPorts[cmd])
			}
			for k, want := range map[string]string{"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "Restart": "on-failure"} {
				if got := firstOf(keys[k]); got != want {
					t.Errorf("%s: %s=%q, want %q", unit, k, got, want)
				}
			}
			if cmd == "proxy" && firstOf(keys["StateDirectory"]) == "" {
				t.Errorf("%s: no StateDirectory for the outbox", unit)
			}
			// Verify the unit as installed, with the binary where it points.
			local := filepath.Join(tmp, unit)
			if err := os.WriteFile(local, []byte(strings.ReplaceAll(text, "/opt/mcpdrift/bin/", bin+"/")), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(sa, "verify", local).CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", unit, err, out)
			}
			out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=20", local).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security %s: exposure above 2.0: %v\n%s", unit, err, out)
			}
		})
	}
}

// unitKeys reads Key=Value lines of a unit file (all sections).
func unitKeys(text string) map[string][]string {
	keys := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

// TestDeployNamesOnlyRealSettings: every MCPDRIFT_ variable anywhere under
// deploy/ is read by a command (or by nats-server, for the passwords of
// deploy/nats/auth.conf), and every --flag is a command's (or one of
// foreignFlags).
func TestDeployNamesOnlyRealSettings(t *testing.T) {
	hs := commandHelps(t)
	natsVars := natsServerVars(t)
	allEnv, allFlags := map[string]bool{}, map[string]bool{}
	for _, h := range hs {
		for e := range h.env {
			allEnv[e] = true
		}
		for f := range h.mentions {
			allFlags[f] = true
		}
	}
	for _, f := range foreignFlags {
		allFlags[f] = true
	}
	allFlags["help"] = true
	for _, f := range deployFiles(t) {
		text := readRepo(t, f)
		for _, e := range envNames(text) {
			if !allEnv[e] && !natsVars[e] {
				t.Errorf("%s names %s, which no command reads (--help)", f, e)
			}
		}
		for _, m := range flagToken.FindAllStringSubmatch(text, -1) {
			if !allFlags[m[1]] {
				t.Errorf("%s names --%s, which no command has (--help)", f, m[1])
			}
		}
	}
}

// TestDeployHasNoSecrets: every password, token and secret under deploy/ is
// the placeholder CHANGE_ME or a reference to one kept elsewhere.
func TestDeployHasNoSecrets(t *testing.T) {
	var (
		urlPass  = regexp.MustCompile(`[a-z]+://[A-Za-z0-9_.-]+:([^@\s/]+)@`)
		keyValue = regexp.MustCompile(`(?i)^\s*(?:export\s+)?-?\s*([A-Za-z0-9_.-]*(?:password|secret|token)[A-Za-z0-9_.-]*)\s*[=:]\s*(.*)$`)
		token    = regexp.MustCompile(`\b[a-z][a-z0-9_-]*:(?:read|write):([^\s,"']+)`)
		bcryptH  = regexp.MustCompile(`\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}`)
		hex64    = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
		xmlPass  = regexp.MustCompile(`<(password|password_sha256_hex|password_double_sha1_hex|secret)>([^<]+)<`)
	)
	reference := func(v string) bool {
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		return v == "" || v == "|" || v == ">" || v == "true" || v == "false" || strings.Contains(v, placeholder) || strings.HasPrefix(v, "$") ||
			strings.HasPrefix(v, "%d/") || strings.HasPrefix(v, "<") || strings.HasPrefix(v, "{") || strings.HasPrefix(v, "/") ||
			strings.HasPrefix(v, "...")
	}
	for _, f := range deployFiles(t) {
		text := readRepo(t, f)
		for i, line := range strings.Split(text, "\n") {
			at := fmt.Sprintf("%s:%d", f, i+1)
			for _, m := range urlPass.FindAllStringSubmatch(line, -1) {
				if !reference(m[1]) {
					t.Errorf("%s: a URL holds a password that is not %s", at, placeholder)
				}
			}
			if m := keyValue.FindStringSubmatch(line); m != nil && !strings.HasSuffix(strings.ToUpper(m[1]), "_FILE") && !reference(m[2]) &&
				!strings.HasPrefix(strings.TrimSpace(m[2]), "nats://") && !strings.HasPrefix(strings.TrimSpace(m[2]), "valueFrom") {
				t.Errorf("%s: %s is set to a literal value, not %s", at, m[1], placeholder)
			}
			for _, m := range token.FindAllStringSubmatch(line, -1) {
				if m[1] != placeholder {
					t.Errorf("%s: an admin token's secret is not %s", at, placeholder)
				}
			}
			if bcryptH.MatchString(line) || hex64.MatchString(line) {
				t.Errorf("%s: a password hash", at)
			}
			for _, m := range xmlPass.FindAllStringSubmatch(line, -1) {
				t.Errorf("%s: <%s> holds a value; give it from_env", at, m[1])
			}
		}
		if strings.HasSuffix(f, ".yaml") && strings.HasPrefix(f, "deploy/kubernetes/") && !isNotK8sObject(f) {
			for _, d := range yamlDocs(t, f) {
				if d["kind"] != "Secret" {
					continue
				}
				for k, v := range yamlMap(d["stringData"]) {
					for _, piece := range strings.FieldsFunc(fmt.Sprint(v), func(r rune) bool { return r == '\n' || r == ',' || r == ' ' }) {
						if p := strings.Split(piece, ":"); p[len(p)-1] != placeholder {
							t.Errorf("%s: Secret %v key %s holds a value that is not %s", f, d["metadata"].(map[string]any)["name"], k, placeholder)
						}
					}
				}
				if d["data"] != nil {
					t.Errorf("%s: Secret %v has data; use stringData placeholders", f, d["metadata"].(map[string]any)["name"])
				}
			}
		}
	}
}

// TestConfigurationDoc: docs/configuration.md documents every flag (with
// the default --help shows) and every variable of every command in the
// command's section, and names no flag or variable the command lacks.
func TestConfigurationDoc(t *testing.T) {
	hs := commandHelps(t)
	doc := readRepo(t, "docs/configuration.md")
	sections := map[string]string{}
	var general strings.Builder
	var cur string
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = strings.Trim(strings.TrimSpace(h), "`")
			if _, isCmd := hs[cur]; !isCmd {
				cur = ""
			}
		}
		if cur == "" {
			general.WriteString(line + "\n")
		} else {
			sections[cur] += line + "\n"
		}
	}
	allEnv, allFlags := map[string]bool{}, map[string]bool{"help": true}
	for _, h := range hs {
		for e := range h.env {
			allEnv[e] = true
		}
		for f := range h.mentions {
			allFlags[f] = true
		}
	}
	for _, c := range deployCommands {
		t.Run(c.name, func(t *testing.T) {
			h, sec := hs[c.name], sections[c.name]
			if sec == "" {
				t.Fatalf("docs/configuration.md has no section \"## %s\"", c.name)
			}
			lines := strings.Split(sec, "\n")
			for _, f := range sortedMapKeys(h.defined) {
				re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--` + regexp.QuoteMeta(f) + `(?:[^a-z0-9-]|$)`)
				var rows []string
				for _, l := range lines {
					if re.MatchString(l) {
						rows = append(rows, l)
					}
				}
				if len(rows) == 0 {
					t.Errorf("docs/configuration.md (%s) does not document --%s", c.name, f)
					continue
				}
				def := h.defined[f]
				if def == "" || slices.Contains(c.machineDefaults, f) {
					continue
				}
				if !slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, def) }) {
					t.Errorf("docs/configuration.md (%s): --%s: no line gives its default %q", c.name, f, def)
				}
			}
			for _, e := range sortedMapKeys(h.env) {
				if !strings.Contains(sec, e) {
					t.Errorf("docs/configuration.md (%s) does not document %s", c.name, e)
				}
			}
			for _, m := range flagToken.FindAllStringSubmatch(sec, -1) {
				if !h.mentions[m[1]] && m[1] != "help" {
					t.Errorf("docs/configuration.md (%s) documents --%s, which %s --help does not have", c.name, m[1], c.name)
				}
			}
			for _, e := range envNames(sec) {
				if !h.env[e] {
					t.Errorf("docs/configuration.md (%s) documents %s, which %s --help does not name", c.name, e, c.name)
				}
			}
		})
	}
	natsVars := natsServerVars(t)
	for _, m := range flagToken.FindAllStringSubmatch(general.String(), -1) {
		if !allFlags[m[1]] {
			t.Errorf("docs/configuration.md names --%s, which no command has", m[1])
		}
	}
	for _, e := range envNames(general.String()) {
		if !allEnv[e] && !natsVars[e] {
			t.Errorf("docs/configuration.md names %s, which no command reads", e)
		}
	}
}

// TestClickHouseDeployment runs the audit sink as it is deployed: NATS from
// deploy/nats/nats.conf with its audit user, ClickHouse (the local server,
// 18.16) with deploy/clickhouse/config.d and users.d, the sink as the
// ClickHouse user mcpdrift_audit. An observation a proxy publishes lands in
// ClickHouse; the analytics user reads it (driftctl audit) and cannot
// write. Then deploy/clickhouse/schema.sql, the replicated schema, is
// compared with the tables the sink created: the same tables and views,
// columns, sort and partition keys, engines (Replicated...), and view
// queries. What 18.16 cannot show: the grants of users.d (it ignores
// <grants>), and which String columns are LowCardinality (it has none).
func TestClickHouseDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs NATS, ClickHouse and the audit command")
	}
	bin := staticBinaries(t)
	auditPass, analyticsPass := randomSecret(t), randomSecret(t)
	ch := startDeployClickHouse(t, auditPass, analyticsPass)

	d := startNATSSingle(t)
	admin := d.connect(t, "admin")
	if _, err := bus.Setup(natsOpCtx(t, 30*time.Second), admin.js, bus.Config{Replicas: 1}); err != nil {
		t.Fatalf("bus setup as admin: %v", err)
	}
	audit := exec.Command(filepath.Join(bin, "audit"))
	audit.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+d.url("audit"), "MCPDRIFT_BUS_SETUP=check", "MCPDRIFT_LOG_LEVEL=info",
		"MCPDRIFT_CLICKHOUSE_ADDR="+ch, "MCPDRIFT_CLICKHOUSE_USER=mcpdrift_audit", "MCPDRIFT_CLICKHOUSE_PASSWORD="+auditPass,
		"MCPDRIFT_AUDIT_BATCH_AGE=100ms")
	waitLogged(t, audit, "audit", "audit sink started")

	// A proxy (its NATS user) refuses a call; the sink writes it.
	proxy := d.connect(t, "proxy")
	obs, err := proto.Marshal(&mcpdriftv1.CallObservation{EventId: "deploy-test-1", Tenant: "default", Server: "files", Proxy: "node-1",
		Tool: "read", Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_REFUSED, RefusalCode: "server_changed",
		ObservedAtUnixMs: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(natsOpCtx(t, 10*time.Second), proxy.js, bus.CallObservationSubject("default", "files"), obs, "deploy-test-1"); err != nil {
		t.Fatalf("publishing as the proxy: %v", err)
	}
	analytics := chConn(t, ch, "mcpdrift_analytics", analyticsPass)
	ctx := natsOpCtx(t, 60*time.Second)
	poll.Eventually(t, 30*time.Second, func() error {
		var n uint64
		err := analytics.QueryRow(ctx, "SELECT count() FROM mcpdrift.call_observations WHERE event_id = 'deploy-test-1'").Scan(&n)
		return awaiting(err == nil && n == 1, "the refused call in mcpdrift.call_observations", fmt.Sprint(n, err))
	})
	// refused reads calls_hourly, which its materialized view fills within
	// the same insert, but the view's part can become visible a moment
	// after the source table's.
	poll.Eventually(t, 30*time.Second, func() error {
		dc := exec.Command(filepath.Join(bin, "driftctl"), "audit", "refused", "--clickhouse", ch, "--user", "mcpdrift_analytics")
		dc.Env = append(os.Environ(), "MCPDRIFT_CLICKHOUSE_PASSWORD="+analyticsPass)
		out, err := dc.CombinedOutput()
		if err != nil {
			t.Fatalf("driftctl audit refused as mcpdrift_analytics: %v\n%s", err, out)
		}
		return awaiting(strings.Contains(string(out), "files") && strings.Contains(string(out), "server_changed"), "driftctl audit refused as mcpdrift_analytics shows the call", string(out))
	})
	err = analytics.Exec(ctx, "INSERT INTO mcpdrift.schema_migrations (version, name, server_version, applied_at) VALUES (99, 'x', 'x', now())")
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != 164 { // READONLY
		t.Fatalf("mcpdrift_analytics inserting: %v, want refused as read-only (164)", err)
	}
	if _, err := tryConn(ch, "mcpdrift_analytics", "wrong-password"); err == nil {
		t.Fatal("mcpdrift_analytics with a wrong password was let in")
	}

	// The replicated schema declares the sink's tables.
	want := parseSchemaFile(t, readRepo(t, "deploy/clickhouse/schema.sql"))
	got := map[string]chObject{}
	rows, err := analytics.Query(ctx, "SELECT name, create_table_query FROM system.tables WHERE database = 'mcpdrift'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, q string
		if err := rows.Scan(&name, &q); err != nil {
			t.Fatal(err)
		}
		o, err := parseCreate(q)
		if err != nil {
			t.Fatalf("the sink's %s: %v\n%s", name, err, q)
		}
		got[name] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sortedMapKeys(want), sortedMapKeys(got)) {
		t.Fatalf("schema.sql declares %v; the sink created %v", sortedMapKeys(want), sortedMapKeys(got))
	}
	for _, name := range sortedMapKeys(want) {
		w, g := want[name], got[name]
		t.Run("schema_"+name, func(t *testing.T) {
			if !w.onCluster {
				t.Errorf("schema.sql: %s is not created ON CLUSTER", name)
			}
			if w.kind != g.kind {
				t.Fatalf("%s is a %s in schema.sql, a %s in the sink", name, w.kind, g.kind)
			}
			if w.kind == "view" {
				if w.to != g.to || w.query != g.query {
					t.Errorf("view %s: schema.sql TO %s AS %s\nsink: TO %s AS %s", name, w.to, w.query, g.to, g.query)
				}
				return
			}
			if !strings.HasPrefix(w.engine, "Replicated") || strings.TrimPrefix(w.engine, "Replicated") != g.engine {
				t.Errorf("%s: engine %s in schema.sql, %s in the sink: want Replicated%s", name, w.engine, g.engine, g.engine)
			}
			if w.partitionBy != g.partitionBy || w.orderBy != g.orderBy {
				t.Errorf("%s: schema.sql PARTITION BY %q ORDER BY %q; sink PARTITION BY %q ORDER BY %q", name, w.partitionBy, w.orderBy, g.partitionBy, g.orderBy)
			}
			if len(w.columns) != len(g.columns) {
				t.Fatalf("%s: schema.sql has %d columns %v, the sink %d %v", name, len(w.columns), w.columns, len(g.columns), g.columns)
			}
			for i := range w.columns {
				if w.columns[i].name != g.columns[i].name || onOldServer(w.columns[i].typ) != g.columns[i].typ {
					t.Errorf("%s column %d: schema.sql %s %s (%s on 18.16), sink %s %s", name, i, w.columns[i].name, w.columns[i].typ,
						onOldServer(w.columns[i].typ), g.columns[i].name, g.columns[i].typ)
				}
			}
		})
	}
}

// startDeployClickHouse runs clickhouse-server with deploy/clickhouse's
// config.d and users.d (and the SHA-256 of the passwords in its
// environment), on free loopback ports, and returns the native address.
func startDeployClickHouse(t *testing.T, auditPass, analyticsPass string) string {
	t.Helper()
	files := map[string][]byte{}
	for _, sub := range []string{"config.d", "users.d"} {
		files[sub+"/mcpdrift.xml"] = []byte(readRepo(t, "deploy/clickhouse/"+sub+"/mcpdrift.xml"))
	}
	srv := chtest.StartWith(t, files, []string{
		"CLICKHOUSE_MCPDRIFT_AUDIT_PASSWORD_SHA256=" + sha256OfString(auditPass),
		"CLICKHOUSE_MCPDRIFT_ANALYTICS_PASSWORD_SHA256=" + sha256OfString(analyticsPass),
	})
	poll.Eventually(t, 60*time.Second, func() error {
		c, err := tryConn(srv.Addr, "mcpdrift_audit", auditPass)
		if err == nil {
			_ = c.Close()
		}
		return awaiting(err == nil, "clickhouse-server with deploy/clickhouse answering mcpdrift_audit", fmt.Sprint(err))
	})
	return srv.Addr
}

func tryConn(addr, user, pass string) (driver.Conn, error) {
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Username: user, Password: pass}, DialTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func chConn(t *testing.T, addr, user, pass string) driver.Conn {
	t.Helper()
	c, err := tryConn(addr, user, pass)
	if err != nil {
		t.Fatalf("connecting to clickhouse as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitLogged starts cmd and waits until it logs msg at info; it is stopped
// with SIGINT when the test ends.
func waitLogged(t *testing.T, cmd *exec.Cmd, name, msg string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen, scanned := make(chan struct{}), make(chan struct{})
	var tail []string
	var mu sync.Mutex
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			var line struct{ Message string }
			mu.Lock()
			tail = append(tail, sc.Text())
			mu.Unlock()
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == msg {
				once.Do(func() { close(seen) })
			}
		}
	}()
	stopOnCleanup(t, cmd, name, scanned)
	poll.Eventually(t, 60*time.Second, func() error {
		select {
		case <-seen:
			return nil
		default:
			mu.Lock()
			defer mu.Unlock()
			return awaiting(false, name+" logs "+msg, strings.Join(tail, "\n"))
		}
	})
}

// chObject is a table or materialized view as its CREATE statement says.
type chObject struct {
	kind                 string // table or view
	columns              []chColumn
	engine               string // the engine's name, without arguments
	partitionBy, orderBy string
	to, query            string // a view's target and SELECT
	onCluster            bool
}

type chColumn struct{ name, typ string }

func (c chColumn) String() string { return c.name + " " + c.typ }

var createHead = regexp.MustCompile(`^CREATE (TABLE|MATERIALIZED VIEW) (?:IF NOT EXISTS )?\w+\.(\w+)( ON CLUSTER '[^']*')? ?`)

// parseSchemaFile reads the CREATE TABLE and CREATE MATERIALIZED VIEW
// statements of a SQL file, by name.
func parseSchemaFile(t *testing.T, sql string) map[string]chObject {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	out := map[string]chObject{}
	for _, stmt := range strings.Split(b.String(), ";") {
		stmt = strings.Join(strings.Fields(stmt), " ")
		if stmt == "" || strings.HasPrefix(stmt, "CREATE DATABASE") {
			continue
		}
		m := createHead.FindStringSubmatch(stmt)
		if m == nil {
			t.Fatalf("schema.sql: not a CREATE TABLE or MATERIALIZED VIEW: %.80s", stmt)
		}
		o, err := parseCreate(stmt)
		if err != nil {
			t.Fatalf("schema.sql %s: %v", m[2], err)
		}
		out[m[2]] = o
	}
	return out
}

// parseCreate reads one CREATE statement: the sink's (as the server shows
// it) or one of schema.sql.
func parseCreate(stmt string) (chObject, error) {
	stmt = strings.Join(strings.Fields(stmt), " ")
	m := createHead.FindStringSubmatch(stmt)
	if m == nil {
		return chObject{}, errors.New("not a CREATE TABLE or MATERIALIZED VIEW")
	}
	o := chObject{onCluster: m[3] != ""}
	rest := stmt[len(m[0]):]
	if m[1] == "MATERIALIZED VIEW" {
		o.kind = "view"
		to, ok := strings.CutPrefix(rest, "TO ")
		if !ok {
			return o, errors.New("a view without TO")
		}
		o.to, rest, _ = strings.Cut(to, " ")
		if strings.HasPrefix(rest, "(") { // the server lists the view's columns
			_, after, err := parenSplit(rest)
			if err != nil {
				return o, err
			}
			rest = strings.TrimSpace(after)
		}
		q, ok := strings.CutPrefix(rest, "AS ")
		if !ok {
			return o, errors.New("a view without AS SELECT")
		}
		o.query = q
		return o, nil
	}
	o.kind = "table"
	cols, after, err := parenSplit(rest)
	if err != nil {
		return o, err
	}
	for _, c := range splitTopLevel(cols) {
		name, typ, _ := strings.Cut(strings.TrimSpace(c), " ")
		if i := indexTopLevel(typ, " CODEC("); i >= 0 {
			typ = typ[:i]
		}
		o.columns = append(o.columns, chColumn{name, strings.TrimSpace(typ)})
	}
	eng, ok := strings.CutPrefix(strings.TrimSpace(after), "ENGINE = ")
	if !ok {
		return o, errors.New("no ENGINE")
	}
	end := strings.IndexAny(eng, "( ")
	if end < 0 {
		end = len(eng)
	}
	o.engine, eng = eng[:end], eng[end:]
	if strings.HasPrefix(eng, "(") {
		if _, eng, err = parenSplit(eng); err != nil {
			return o, err
		}
	}
	o.partitionBy = ddlClause(eng, "PARTITION BY ")
	o.orderBy = ddlClause(eng, "ORDER BY ")
	return o, nil
}

// ddlClauseWords end a table's clauses.
var ddlClauseWords = []string{" PARTITION BY ", " ORDER BY ", " PRIMARY KEY ", " SAMPLE BY ", " TTL ", " SETTINGS "}

func ddlClause(s, kw string) string {
	s = " " + s + " "
	i := indexTopLevel(s, " "+kw)
	if i < 0 {
		return ""
	}
	v := s[i+len(kw)+1:]
	end := len(v)
	for _, w := range ddlClauseWords {
		if j := indexTopLevel(v, w); j >= 0 && j < end {
			end = j
		}
	}
	return strings.TrimSpace(v[:end])
}

// parenSplit splits "(inside) after" at the parenthesis matching the first.
func parenSplit(s string) (inside, after string, err error) {
	depth := 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:], nil
			}
		}
	}
	return "", "", errors.New("unbalanced parentheses")
}

// splitTopLevel splits at commas outside parentheses and quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, start, quoted := 0, 0, false
	for i, r := range s {
		switch {
		case r == '\'':
			quoted = !quoted
		case quoted:
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// indexTopLevel finds sub outside parentheses.
func indexTopLevel(s, sub string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		}
		if depth == 0 && strings.HasPrefix(s[i:], sub) {
			return i
		}
	}
	return -1
}

// onOldServer is a current server's column type as the sink declares it on
// a server without LowCardinality and DateTime64 (services/audit/internal/schema).
func onOldServer(typ string) string {
	if inner, ok := strings.CutPrefix(typ, "LowCardinality("); ok {
		typ = strings.TrimSuffix(inner, ")")
	}
	if strings.HasPrefix(typ, "DateTime64(3, ") {
		typ = "DateTime(" + strings.TrimPrefix(typ, "DateTime64(3, ")
	}
	return typ
}

// natsServerVars are the variables the NATS configurations read: the
// passwords of deploy/nats/auth.conf, and the leaf node's
// (deploy/nats/leaf).
func natsServerVars(t testing.TB) map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"deploy/nats/auth.conf", "deploy/nats/leaf/auth.conf", "deploy/nats/leaf/leaf.conf"} {
		for _, m := range natsVarRef.FindAllStringSubmatch(readRepo(t, f), -1) {
			out[m[1]] = true
		}
	}
	return out
}

// natsVarRef is a reference to an environment variable in a NATS
// configuration.
var natsVarRef = regexp.MustCompile(`\$(MCPDRIFT_[A-Z0-9_]+)`)

// deployFiles lists the files under deploy/ (relative to the repository),
// those with one of the suffixes when given; compiled binaries and Go
// sources are left out.
func deployFiles(t testing.TB, suffixes ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "go.mod") {
			return nil
		}
		if len(suffixes) == 0 || slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(rel, s) }) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readRepo(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func yamlDocs(t testing.TB, rel string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(readRepo(t, rel)))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}

// envFile reads KEY=VALUE lines (comments and blank lines skipped).
func envFile(t testing.TB, rel string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(readRepo(t, rel), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", rel, line)
		}
		out[k] = v
	}
	return out
}

func yamlList(v any) []any {
	l, _ := v.([]any)
	return l
}

func yamlMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func yamlStrings(v any) []string {
	var out []string
	for _, x := range yamlList(v) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func firstOf(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[0]
}

func sortedCopy(l []string) []string {
	l = slices.Clone(l)
	sort.Strings(l)
	return l
}

func sortedMapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func randomSecret(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sha256OfString(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// xmlWellFormed reads every token of an XML document.
func xmlWellFormed(b []byte) error {
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestDeployXML: every XML file under deploy/ is well formed.
func TestDeployXML(t *testing.T) {
	for _, f := range deployFiles(t, ".xml") {
		if err := xmlWellFormed([]byte(readRepo(t, f))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
