package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// runCLIEnv runs driftctl in-process with the given environment.
func runCLIEnv(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	code = report(&errb, err)
	return out.String(), errb.String(), code
}

// busLines parses bus-setup's output into name -> the rest of its line.
func busLines(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[2] != "replicas" {
			t.Fatalf("line %q: want NAME KIND replicas N STATE\n%s", line, out)
		}
		m[f[0]] = strings.Join(f[1:], " ")
	}
	if len(m) != len(bus.Objects()) {
		t.Fatalf("%d objects, want %d:\n%s", len(m), len(bus.Objects()), out)
	}
	return m
}

func wantStates(t *testing.T, out string, want map[string]string) {
	t.Helper()
	got := busLines(t, out)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
}

func allStates(state string, replicas string) map[string]string {
	return map[string]string{
		bus.StreamObservations: "stream replicas " + replicas + " " + state,
		bus.StreamFingerprints: "stream replicas " + replicas + " " + state,
		bus.StreamVerdicts:     "stream replicas " + replicas + " " + state,
		bus.StreamAdmin:        "stream replicas " + replicas + " " + state,
		bus.BucketStatus:       "kv replicas " + replicas + " " + state,
		bus.BucketBaselines:    "kv replicas " + replicas + " " + state,
		bus.BucketPolicy:       "kv replicas " + replicas + " " + state,
		bus.BucketManifests:    "object-store replicas " + replicas + " " + state,
	}
}

func TestBusSetup(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.ClientURL()

	// --check on an empty server names every object missing.
	out, errOut, code := runCLIEnv(t, nil, "bus-setup", "--check", "--nats-url", url)
	if code != 1 {
		t.Fatalf("check on an empty server: code %d, want 1\n%s%s", code, out, errOut)
	}
	wantStates(t, out, allStates("missing", "-"))
	for _, o := range bus.Objects() {
		if !strings.Contains(errOut, o.String()) {
			t.Errorf("check: stderr does not name %s %s: %s", o.Kind, o.Name, errOut)
		}
	}
	if !strings.HasPrefix(errOut, "driftctl: bus_incomplete: missing ") {
		t.Errorf("check: stderr %q", errOut)
	}

	// Setup from nothing, with the URL and replicas from the environment.
	env := map[string]string{"MCPDRIFT_NATS_URL": url, "MCPDRIFT_REPLICAS": "1"}
	out, errOut, code = runCLIEnv(t, env, "bus-setup")
	if code != 0 {
		t.Fatalf("setup: code %d\n%s%s", code, out, errOut)
	}
	wantStates(t, out, allStates("created", "1"))

	// What the services check is there.
	_, js := srv.Connect(t)
	ctx := context.Background()
	if _, err := bus.Bind(ctx, js, bus.SetupCheck, bus.Config{}, bus.Objects()...); err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(ctx, bus.BucketStatus); err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(ctx, bus.BucketBaselines); err != nil {
		t.Fatal(err)
	}
	if _, err := js.ObjectStore(ctx, bus.BucketManifests); err != nil {
		t.Fatal(err)
	}

	// A second run changes nothing.
	out, errOut, code = runCLIEnv(t, env, "bus-setup")
	if code != 0 {
		t.Fatalf("second setup: code %d\n%s%s", code, out, errOut)
	}
	wantStates(t, out, allStates("unchanged", "1"))

	// A stream changed by hand is put back, and only it.
	s, err := js.Stream(ctx, bus.StreamVerdicts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLIEnv(t, nil, "bus-setup", "--nats-url", url)
	if code != 0 {
		t.Fatalf("setup after a change: code %d\n%s%s", code, out, errOut)
	}
	want := allStates("unchanged", "1")
	want[bus.StreamVerdicts] = "stream replicas 1 updated"
	wantStates(t, out, want)

	// --check now succeeds.
	out, errOut, code = runCLIEnv(t, nil, "bus-setup", "--check", "--nats-url", url)
	if code != 0 || errOut != "" {
		t.Fatalf("check after setup: code %d\n%s%s", code, out, errOut)
	}
	wantStates(t, out, allStates("exists", "1"))
}

// TestBusSetupRoles runs bus-setup under a role that may read the streams but
// not create them, as the services' roles (deploy/nats/auth.conf).
func TestBusSetupRoles(t *testing.T) {
	opts := natstest.Options(t)
	opts.Users = []*server.User{
		{Username: "admin", Password: "admin-pw"},
		{Username: "reader", Password: "reader-pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}},
	}
	srv := natstest.StartWith(t, opts)
	addr := strings.TrimPrefix(srv.ClientURL(), "nats://")
	admin := "nats://admin:admin-pw@" + addr
	reader := "nats://reader:reader-pw@" + addr

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"reader_check_empty", []string{"--check", "--nats-url", reader}, 1, "missing", "driftctl: bus_incomplete:"},
		{"reader_setup", []string{"--nats-url", reader}, 2, "", "driftctl: permission_denied:"},
		{"wrong_password", []string{"--nats-url", "nats://admin:nope@" + addr}, 2, "", "driftctl: permission_denied:"},
		{"admin_setup", []string{"--nats-url", admin}, 0, "created", ""},
		{"reader_check", []string{"--check", "--nats-url", reader}, 0, "exists", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLIEnv(t, nil, append([]string{"bus-setup"}, tt.args...)...)
			if code != tt.code || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("code %d (want %d)\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if strings.Contains(errOut, "-pw") || strings.Contains(errOut, "nope") {
				t.Fatalf("a password is printed: %s", errOut)
			}
		})
	}
}

func TestBusSetupErrors(t *testing.T) {
	singleSrv := natstest.Start(t)
	single := singleSrv.ClientURL()

	noJS := natstest.Options(t)
	noJS.JetStream = false
	withoutJetStream := natstest.StartWith(t, noJS).ClientURL()

	// A port nothing listens on, and a listener that never speaks NATS.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "nats://" + l.Addr().String()
	l.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	t.Cleanup(func() { silent.Close(); <-accepted })
	go func() {
		defer close(accepted)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()

	creds := filepath.Join(t.TempDir(), "missing.creds")

	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{"help", nil, []string{"--help"}, 0, "Usage: driftctl bus-setup"},
		{"unreachable", nil, []string{"--nats-url", refused, "--timeout", "5s"}, 2, "driftctl: nats_unreachable:"},
		{"unreachable_check", nil, []string{"--check", "--nats-url", refused}, 2, "driftctl: nats_unreachable:"},
		{"silent_timeout", nil, []string{"--nats-url", "nats://" + silent.Addr().String(), "--timeout", "1s"}, 2, "driftctl: nats_unreachable: no NATS server"},
		{"replicas_3_single_node", nil, []string{"--nats-url", single, "--replicas", "3"}, 2, "driftctl: replicas_unavailable:"},
		{"replicas_zero", nil, []string{"--nats-url", single, "--replicas", "0"}, 2, "driftctl: invalid_replicas:"},
		{"replicas_9", nil, []string{"--nats-url", single, "--replicas", "9"}, 2, "driftctl: invalid_replicas:"},
		{"replicas_env_text", map[string]string{"MCPDRIFT_NATS_URL": single, "MCPDRIFT_REPLICAS": "three"}, nil, 2, "driftctl: invalid_replicas:"},
		{"no_jetstream", nil, []string{"--nats-url", withoutJetStream}, 2, "driftctl: jetstream_unavailable:"},
		{"creds_missing", map[string]string{"MCPDRIFT_NATS_CREDS": creds}, []string{"--nats-url", single}, 2, "driftctl: creds_unreadable:"},
		{"bad_timeout", nil, []string{"--nats-url", single, "--timeout", "0s"}, 2, "driftctl: usage:"},
		{"site_without_tenant", nil, []string{"--nats-url", single, "--site"}, 2, "driftctl: usage: --site: invalid_id"},
		{"site_bad_hub_domain", nil, []string{"--nats-url", single, "--site", "--tenant", "default", "--hub-domain", "a.b"}, 2, "driftctl: usage: --site: invalid_id"},
		{"tenant_without_site", nil, []string{"--nats-url", single, "--tenant", "default"}, 2, "driftctl: usage: --tenant and --hub-domain set up a site"},
		{"extra_argument", nil, []string{"--nats-url", single, "now"}, 2, "driftctl: usage:"},
		{"bad_flag", nil, []string{"--frob"}, 2, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLIEnv(t, tt.env, append([]string{"bus-setup"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("code %d (want %d)\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
		})
	}

	// None of the failures above created anything.
	_, js := singleSrv.Connect(t)
	if _, err := js.Stream(context.Background(), bus.StreamObservations); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after failed runs the server has %s: %v", bus.StreamObservations, err)
	}
}
