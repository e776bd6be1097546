package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/admin"
	"github.com/mcpdrift/mcpdrift/services/drift/internal/driftsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

const (
	readSecret  = "read-secret-0123456789"
	writeSecret = "write-secret-0123456789"
)

type stack struct {
	t   *testing.T
	api string
	srv *natstest.Server
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startStackWith(t, nil)
}

// startStackWith starts the service with edit applied to its Config.
func startStackWith(t *testing.T, edit func(*Config)) *stack {
	t.Helper()
	srv := natstest.Start(t)
	tokens, err := admin.ParseTokens("reader:read:" + readSecret + ",alice:write:" + writeSecret)
	if err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := Config{Service: options.Service{NATSURL: srv.ClientURL(), Replicas: 1, BusSetup: bus.SetupCreate, LogLevel: "warn"},
		HTTPAddr: "127.0.0.1:0", Tokens: tokens, LogOutput: io.Discard, Drift: driftsvc.Config{},
		Ready: func(a net.Addr) { addr <- a }}
	if edit != nil {
		edit(&cfg)
	}
	exited := make(chan struct{})
	go func() { defer close(exited); done <- serve(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-exited // done may have been read below, when serve failed
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		default:
		}
	})
	select {
	case a := <-addr:
		return &stack{t: t, api: "http://" + a.String(), srv: srv}
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the drift service did not start")
	}
	return nil
}

// do sends body as JSON (none when nil).
func (s *stack) do(method, path, secret string, body any) (int, []byte) {
	s.t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return s.doRaw(method, path, secret, b)
}

// doRaw sends body as it is (none when empty).
func (s *stack) doRaw(method, path, secret string, body []byte) (int, []byte) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.api+path, bytes.NewReader(body))
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *stack) observe(server, eventID, fixture string, at time.Time) string {
	s.t.Helper()
	return s.observeVariant(server, "v0", eventID, fixture, at)
}

func (s *stack) observeVariant(server, variant, eventID, fixture string, at time.Time) string {
	s.t.Helper()
	_, js := s.srv.Connect(s.t)
	// The service made the bus; binding in check mode changes nothing
	// (a second setup updates each stream while the service creates its
	// consumers, which nats-server's stream update races with).
	h, err := bus.Bind(context.Background(), js, bus.SetupCheck, bus.Config{}, bus.Manifests)
	if err != nil {
		s.t.Fatal(err)
	}
	raw, err := os.ReadFile(fixture)
	if err != nil {
		s.t.Fatal(err)
	}
	sf, err := surface.Parse(raw, surface.Options{Form: surface.FormLatest})
	if err != nil {
		s.t.Fatal(err)
	}
	hash := sf.Hash.String()
	if _, err := h.Manifests.PutBytes(context.Background(), bus.ManifestName(hash), raw); err != nil {
		s.t.Fatal(err)
	}
	data, _ := proto.Marshal(&mcpdriftv1.Fingerprint{CanonicalForm: surface.FormLatest.String(), EventId: eventID, Tenant: "acme", Server: server, Variant: variant,
		ObservedAtUnixMs: at.UnixMilli(), SurfaceHash: hash})
	if _, err := bus.Publish(context.Background(), js, bus.FingerprintSubject("acme", server), data, eventID); err != nil {
		s.t.Fatal(err)
	}
	return hash
}

func (s *stack) waitStatus(server, status string) admin.Show {
	s.t.Helper()
	var sv admin.ServerShow
	poll.Eventually(s.t, 10*time.Second, func() error {
		code, body := s.do("GET", "/v1/servers/acme/"+server+"?variant=v0", readSecret, nil)
		sv = admin.ServerShow{}
		if code != 200 || json.Unmarshal(body, &sv) != nil || len(sv.Variants) != 1 || string(sv.Variants[0].Record.Status) != status {
			return fmt.Errorf("status of %s is not %s: %d %s", server, status, code, body)
		}
		return nil
	})
	return sv.Variants[0]
}

func errorCode(body []byte) string {
	var e admin.Error
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

func TestAdminAPI(t *testing.T) {
	s := startStack(t)
	nc, _ := s.srv.Connect(t)
	actions, err := nc.SubscribeSync(bus.Prefix + ".admin.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	fx := "../internal/surface/testdata/real/memory/"
	t0 := time.Now()
	a := s.observe("mem", "o1", fx+"2025.8.4.json", t0)
	s.waitStatus("mem", "verified")

	// Follow verdicts live, as driftctl tail does.
	req, _ := http.NewRequest("GET", s.api+"/v1/verdicts", nil)
	req.Header.Set("Authorization", "Bearer "+readSecret)
	tail, err := http.DefaultClient.Do(req)
	if err != nil || tail.StatusCode != 200 {
		t.Fatalf("tail: %v %v", err, tail.Status)
	}
	defer tail.Body.Close()
	lines := bufio.NewScanner(tail.Body)

	b := s.observe("mem", "o2", fx+"2025.9.25.json", t0.Add(time.Second))
	show := s.waitStatus("mem", "changed")
	if show.Serve || show.Record.LiveHash != b || show.Diff == nil || !show.Diff.Drift {
		t.Fatalf("after drift: %+v", show)
	}
	// The first sight's verdict may reach the tail first: it is published
	// just after the record that waitStatus saw.
	for i := 0; ; i++ {
		if !lines.Scan() || i == 3 {
			t.Fatalf("tail did not deliver the drift verdict: %q", lines.Text())
		}
		if strings.Contains(lines.Text(), `"STATUS_CHANGED"`) {
			break
		}
	}

	tests := []struct {
		name, method, path, secret string
		body                       any
		status                     int
		code                       string
	}{
		{"no_token", "GET", "/v1/servers", "", nil, 401, "unauthenticated"},
		{"bad_token", "GET", "/v1/servers", "nope-nope-nope-nope", nil, 401, "unauthenticated"},
		{"read_cannot_approve", "POST", "/v1/servers/acme/mem/approve", readSecret, admin.ApproveRequest{Hash: b}, 403, "forbidden"},
		{"read_cannot_quarantine", "POST", "/v1/servers/acme/mem/quarantine", readSecret, nil, 403, "forbidden"},
		{"stale_hash", "POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: a}, 409, "stale_hash"},
		{"not_a_hash", "POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: "latest"}, 400, "bad_request"},
		{"unknown_server", "GET", "/v1/servers/acme/nope", readSecret, nil, 404, "not_found"},
		{"unknown_variant", "GET", "/v1/servers/acme/mem?variant=default", readSecret, nil, 404, "not_found"},
		{"approve_unknown_variant", "POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: b, Variant: "default"}, 404, "not_found"},
		{"quarantine_unknown_server", "POST", "/v1/servers/acme/notes/quarantine", writeSecret, nil, 404, "not_found"},
		{"bad_id", "GET", "/v1/servers/acme/a.b", readSecret, nil, 400, "invalid_id"},
		{"bad_variant", "GET", "/v1/servers/acme/mem/diff?variant=a.b", readSecret, nil, 400, "invalid_id"},
		{"variant_in_path", "GET", "/v1/servers/acme/mem/v0", readSecret, nil, 404, "not_found"},
		{"no_endpoint", "GET", "/v2/whatever", readSecret, nil, 404, "not_found"},
		{"list", "GET", "/v1/servers", readSecret, nil, 200, ""},
		{"diff", "GET", "/v1/servers/acme/mem/diff", readSecret, nil, 200, ""},
		{"approve", "POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: b}, 200, ""},
		{"history", "GET", "/v1/servers/acme/mem/history", readSecret, nil, 200, ""},
		{"quarantine", "POST", "/v1/servers/acme/mem/quarantine", writeSecret, admin.QuarantineRequest{Reason: "incident 7"}, 200, ""},
		{"quarantine_preemptive", "POST", "/v1/servers/acme/notes/quarantine", writeSecret, admin.QuarantineRequest{Preemptive: true}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := s.do(tt.method, tt.path, tt.secret, tt.body)
			if status != tt.status || errorCode(body) != tt.code {
				t.Fatalf("%s %s: %d %s, want %d %q", tt.method, tt.path, status, body, tt.status, tt.code)
			}
		})
	}
	_, body := s.do("GET", "/v1/servers/acme/mem/history", readSecret, nil)
	var hists []struct {
		Variant   string           `json:"variant"`
		Baselines []map[string]any `json:"baselines"`
	}
	if err := json.Unmarshal(body, &hists); err != nil || len(hists) != 1 || hists[0].Variant != "v0" {
		t.Fatalf("history: %s", body)
	}
	if hist := hists[0].Baselines; len(hist) != 2 || hist[1]["approved_by"] != "alice" {
		t.Fatalf("history: %s", body)
	}
	if show := s.waitStatus("mem", "quarantined"); show.Record.Actor != "alice" {
		t.Fatalf("quarantine actor: %+v", show.Record)
	}

	// Every request was audited, the refused ones included, with who did it.
	seen := map[string]bool{}
	for {
		m, err := actions.NextMsg(time.Second)
		if err != nil {
			break
		}
		var act map[string]any
		if err := json.Unmarshal(m.Data, &act); err != nil {
			t.Fatalf("admin action is not JSON: %s", m.Data)
		}
		seen[fmt.Sprint(act["action"], " ", act["actor"], " ", act["ok"], " ", act["error_code"])] = true
	}
	for _, want := range []string{"approve reader false forbidden", "approve alice false stale_hash", "approve alice true ", "quarantine alice true ",
		"status anonymous false unauthenticated", "quarantine alice false not_found", "approve alice false not_found"} {
		if !seen[want] {
			t.Errorf("no admin action %q among %v", want, seen)
		}
	}
}

// TestAdminAPIVariants: the API names a server; where an action could mean
// several variants it answers variant_ambiguous with the candidates in the
// error body, and ?variant= or "variant" picks one.
func TestAdminAPIVariants(t *testing.T) {
	s := startStack(t)
	fx := "../internal/surface/testdata/real/memory/"
	t0 := time.Now()
	s.observeVariant("mem", "v0", "o1", fx+"2025.8.4.json", t0)
	s.waitStatus("mem", "verified")
	b := s.observeVariant("mem", "v1", "o2", fx+"2025.9.25.json", t0.Add(time.Second))
	s.observeVariant("mem", "v0", "o3", fx+"2026.8.31.json", t0.Add(2*time.Second))
	s.waitStatus("mem", "changed")
	var sv admin.ServerShow
	poll.Eventually(t, 10*time.Second, func() error {
		_, body := s.do("GET", "/v1/servers/acme/mem", readSecret, nil)
		sv = admin.ServerShow{}
		_ = json.Unmarshal(body, &sv)
		if len(sv.Variants) < 2 {
			return fmt.Errorf("the second variant has not shown: %+v", sv)
		}
		return nil
	})
	if v1 := sv.Variants[1]; v1.Record.Status != "changed" || v1.Record.Reason != "variant_unmatched" || v1.Serve || v1.Diff == nil || sv.Serve {
		t.Fatalf("a new variant with items no variant approved: %+v", v1)
	}

	status, body := s.do("GET", "/v1/servers/acme/mem/diff", readSecret, nil)
	var e admin.Error
	_ = json.Unmarshal(body, &e)
	if status != 409 || e.Error.Code != "variant_ambiguous" || strings.Join(e.Error.Candidates, ",") != "v0,v1" {
		t.Fatalf("diff of two drifted variants: %d %s", status, body)
	}
	status, body = s.do("GET", "/v1/servers/acme/mem/diff?variant=v1", readSecret, nil)
	var d admin.DiffShow
	if status != 200 || json.Unmarshal(body, &d) != nil || d.Variant != "v1" || d.Report == nil || !d.Drift {
		t.Fatalf("diff of a named variant: %d %s", status, body)
	}
	status, body = s.do("POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: b})
	if status != 200 || json.Unmarshal(body, &sv) != nil || strings.Join(sv.Approved, ",") != "v1" {
		t.Fatalf("approve by hash: %d %s", status, body)
	}
	status, body = s.do("GET", "/v1/servers", readSecret, nil)
	var list []admin.ServerShow
	if status != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 || len(list[0].Variants) != 2 || !list[0].Serve {
		t.Fatalf("list: %d %s", status, body)
	}
}

func TestConfigErrors(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"--posture", "yolo"}, getenv, &stderr); err == nil ||
		!strings.Contains(err.Error(), "posture") || !strings.Contains(err.Error(), "no admin tokens") {
		t.Fatalf("bad config: %v", err)
	}
	env["MCPDRIFT_ADMIN_TOKENS"] = "ops:read:a-secret-that-must-not-show"
	stderr.Reset()
	if err := run(context.Background(), []string{"--help"}, getenv, &stderr); !errors.Is(err, options.ErrHelp) || strings.Contains(stderr.String(), "a-secret") {
		t.Fatalf("--help: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"--ops-addr ADDR", "MCPDRIFT_OPS_ADDR", "/metrics"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr.String())
		}
	}
	env["MCPDRIFT_ADMIN_TOKENS"] = "x:admin:short"
	if err := run(context.Background(), nil, getenv, &stderr); err == nil || !strings.Contains(err.Error(), "16 characters") {
		t.Fatalf("weak token: %v", err)
	}
}

// TestOpsEndpoints runs the service with an ops listener, does known work
// (a first sight, a drift, a malformed fingerprint, admin requests allowed,
// denied and failed) and checks that the metrics moved by exactly that, that
// they are the ones docs/metrics.md lists, and that readiness follows NATS.
func TestOpsEndpoints(t *testing.T) {
	var logs syncbuf.Buffer
	s := startStackWith(t, func(c *Config) {
		c.OpsAddr, c.LogOutput, c.LogLevel = "127.0.0.1:0", &logs, "info"
	})
	addr := opstest.Addr(t, logs.String)
	if status, body := opstest.Get(t, addr, "/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q", status, body)
	}
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK)

	fx := "../internal/surface/testdata/real/memory/"
	t0 := time.Now()
	a := s.observe("mem", "o1", fx+"2025.8.4.json", t0)
	s.waitStatus("mem", "verified")
	b := s.observe("mem", "o2", fx+"2025.9.25.json", t0.Add(time.Second))
	s.waitStatus("mem", "changed")
	_, js := s.srv.Connect(t)
	if _, err := bus.Publish(context.Background(), js, bus.FingerprintSubject("acme", "mem"), []byte("\xff not protobuf"), "garbage"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		method, path, secret string
		body                 any
		status               int
	}{
		{"GET", "/v1/servers", "", nil, 401},                                                      // status denied
		{"POST", "/v1/servers/acme/mem/approve", readSecret, admin.ApproveRequest{Hash: b}, 403},  // approve denied
		{"POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: a}, 409}, // approve failed: stale hash
		{"GET", "/v1/servers/acme/nope/history", readSecret, nil, 404},                            // history failed
		{"POST", "/v1/servers/acme/mem/approve", writeSecret, admin.ApproveRequest{Hash: b}, 200}, // approve ok
		{"GET", "/v1/servers", readSecret, nil, 200},                                              // status ok
		{"POST", "/v1/servers/acme/mem/quarantine", writeSecret, admin.QuarantineRequest{}, 200},  // quarantine ok
	} {
		if status, body := s.do(r.method, r.path, r.secret, r.body); status != r.status {
			t.Fatalf("%s %s = %d %s, want %d", r.method, r.path, status, body, r.status)
		}
	}
	s.waitStatus("mem", "quarantined")

	const fps = "mcpdrift_drift_fingerprints_total"
	opstest.WaitValue(t, addr, 1, fps, "result", "dead_lettered")
	opstest.WaitValue(t, addr, 1, "mcpdrift_drift_verdicts_total", "status", "quarantined")
	opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", "drift")
	fams := opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_ack_pending", "consumer", "drift")
	fams.Require(t, 2, fps, "result", "ok")
	fams.Require(t, 0, fps, "result", "retried")
	fams.Require(t, 1, fps, "result", "dead_lettered")
	fams.Require(t, 1, "mcpdrift_drift_dead_letters_total", "code", "malformed_event")
	fams.Require(t, 0, "mcpdrift_drift_dead_letters_total", "code", "subject_mismatch")
	// first sight, drift, approve, quarantine
	fams.Require(t, 2, "mcpdrift_drift_verdicts_total", "status", "verified")
	fams.Require(t, 1, "mcpdrift_drift_verdicts_total", "status", "changed")
	fams.Require(t, 1, "mcpdrift_drift_verdicts_total", "status", "quarantined")
	fams.Require(t, 0, "mcpdrift_drift_verdicts_total", "status", "pending")
	// the four records, the server record's claim of the first sight
	// (which carries the first surface's risk), the risk of the drifted
	// surface and the hold
	fams.Require(t, 7, "mcpdrift_drift_status_writes_total")
	fams.Require(t, 0, "mcpdrift_drift_cas_conflicts_total")
	fams.Require(t, 2, "mcpdrift_drift_observation_lag_seconds") // the fingerprints applied
	// the fleet: the one variant quarantined, its server held
	fams = opstest.WaitValue(t, addr, 1, "mcpdrift_drift_variants", "status", "quarantined")
	fams.Require(t, 0, "mcpdrift_drift_variants", "status", "verified")
	fams.Require(t, 0, "mcpdrift_drift_variants", "status", "changed")
	fams.Require(t, 1, "mcpdrift_drift_servers_held")
	fams.Require(t, 1, "mcpdrift_ready")
	fams.Require(t, 1, "mcpdrift_ready_check", "check", "nats")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "status", "result", "denied")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "status", "result", "ok")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "approve", "result", "denied")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "approve", "result", "failed")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "approve", "result", "ok")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "quarantine", "result", "ok")
	fams.Require(t, 1, "mcpdrift_drift_admin_actions_total", "action", "history", "result", "failed")
	fams.Require(t, 0, "mcpdrift_consumer_info_errors_total", "consumer", "drift")
	// waitStatus polls show (404 before the first sight): at least one ok per wait.
	if got, _ := fams.Value("mcpdrift_drift_admin_actions_total", "action", "show", "result", "ok"); got < 3 {
		t.Errorf("show ok = %v, want at least one per wait for a status (3)", got)
	}
	if diff := opstest.Diff(opstest.DocNames(t, "../../docs/metrics.md", "drift", "every service", "consumers"), fams.Names("mcpdrift_")); diff != "" {
		t.Errorf("docs/metrics.md and the drift service's metrics differ:\n%s", diff)
	}

	// NATS goes away: not ready; it comes back on the same port: ready again.
	opstest.NATSOutage(t, addr, s.srv)
}

func TestOpsAddressInUse(t *testing.T) {
	srv := natstest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tokens, _ := admin.ParseTokens("reader:read:" + readSecret)
	err = serve(context.Background(), Config{Service: options.Service{NATSURL: srv.ClientURL(), OpsAddr: ln.Addr().String(), Replicas: 1, BusSetup: bus.SetupCreate, LogLevel: "warn"},
		HTTPAddr: "127.0.0.1:0", Tokens: tokens, LogOutput: io.Discard})
	if !errors.Is(err, ops.ErrAddrInUse) {
		t.Fatalf("serve = %v, want ops.ErrAddrInUse", err)
	}
}

// TestNATSCredentials: the drift role can authenticate with a credentials
// file; one that cannot be read stops the start with an error naming it,
// and the NATS password in the URL never shows in the error.
func TestNATSCredentials(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "drift.creds")
	env := map[string]string{"MCPDRIFT_ADMIN_TOKENS": "ops:write:0123456789abcdef0123", "MCPDRIFT_NATS_CREDS": missing}
	getenv := func(k string) string { return env[k] }
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"--nats-url", "nats://drift:s3cret-pw@127.0.0.1:1"}, getenv, &stderr)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("run with an unreadable credentials file: %v, want an error naming %s", err, missing)
	}
	if strings.Contains(err.Error(), "s3cret-pw") || strings.Contains(stderr.String(), "s3cret-pw") {
		t.Errorf("the NATS password shows: %v\n%s", err, stderr.String())
	}
}
