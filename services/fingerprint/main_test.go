package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/fingerprint/internal/fpsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestHelpDocumentsEveryOption(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env(nil), &out); options.Status(err) != options.ExitOK {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, o := range settingsOptions(new(settings)) {
		if !strings.Contains(help, "--"+o.Flag+" ") || !strings.Contains(help, o.Env) {
			t.Errorf("--help does not document --%s and %s", o.Flag, o.Env)
		}
	}
	for _, want := range []string{"MCPDRIFT_NATS_URL", "--ops-addr ADDR", "MCPDRIFT_OPS_ADDR", "/metrics", "(default nats://127.0.0.1:4222)", "(default 30s)", "(default fingerprint)"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}

func TestSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(*settings) bool
	}{
		{name: "defaults", check: func(s *settings) bool {
			return s.NATSURL == "nats://127.0.0.1:4222" && s.Replicas == 1 && s.LogLevel == "info" && reflect.DeepEqual(s.svc, fpsvc.DefaultConfig)
		}},
		{name: "env", env: map[string]string{"MCPDRIFT_NATS_URL": "nats://n1:4222", "MCPDRIFT_REPLICAS": "3", "MCPDRIFT_FINGERPRINT_ACK_WAIT": "1m"},
			check: func(s *settings) bool {
				return s.NATSURL == "nats://n1:4222" && s.Replicas == 3 && s.svc.AckWait == time.Minute
			}},
		{name: "flag_wins_over_env", args: []string{"--workers", "7"}, env: map[string]string{"MCPDRIFT_FINGERPRINT_WORKERS": "3"},
			check: func(s *settings) bool { return s.svc.Workers == 7 }},
		{name: "bad_env", env: map[string]string{"MCPDRIFT_FINGERPRINT_MAX_DELIVER": "many"}, wantErr: "MCPDRIFT_FINGERPRINT_MAX_DELIVER"},
		{name: "bad_duration", args: []string{"--ack-wait", "30"}, wantErr: "not a duration"},
		{name: "unknown_flag", args: []string{"--nope"}, wantErr: "usage"},
		{name: "stray_argument", args: []string{"extra"}, wantErr: "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(tc.args, env(tc.env), &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parse = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("settings %+v", s)
			}
		})
	}
}

func TestInvalidConfigFailsBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"log_level", []string{"--log-level", "loud"}, "log level"},
		{"replicas", []string{"--replicas", "4", "--replicas", "9"}, "replicas"},
		{"op_timeout_past_ack_wait", []string{"--ack-wait", "5s", "--op-timeout", "6s"}, "op timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An unroutable URL: reaching it would hang, so failing fast proves
			// the config is checked first.
			err := run(context.Background(), append(tc.args, "--nats-url", "nats://192.0.2.1:4222"), env(nil), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want a config error about %s", err, tc.want)
			}
		})
	}
}

func TestRunFingerprintsUntilCancelled(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	// Joined however the test ends: done is buffered, so the goroutine
	// never blocks on it.
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	go func() {
		defer close(exited)
		done <- run(ctx, nil, env(map[string]string{"MCPDRIFT_NATS_URL": srv.ClientURL(), "MCPDRIFT_LOG_LEVEL": "debug"}), &logs)
	}()

	capture, err := os.ReadFile("../internal/surface/testdata/real/memory/2025.9.25.json")
	if err != nil {
		t.Fatal(err)
	}
	obs := &mcpdriftv1.ListObservation{EventId: "obs-1", Tenant: "acme", Server: "memory", Proxy: "p1", Variant: "v1", Capture: capture}
	data, err := proto.Marshal(obs)
	if err != nil {
		t.Fatal(err)
	}
	// Publish once run has created the streams.
	if err := poll.Until(20*time.Second, func() error {
		if _, err := bus.Publish(ctx, js, bus.ListObservationSubject("acme", "memory"), data, obs.EventId); err != nil {
			return fmt.Errorf("publishing the observation: %w", err)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; logs:\n%s", err, logs.String())
	}
	if err := poll.Until(20*time.Second, func() error {
		m, err := js.Stream(ctx, bus.StreamFingerprints)
		if err != nil {
			return err
		}
		if _, err := m.GetLastMsgForSubject(ctx, bus.FingerprintSubject("acme", "memory")); err != nil {
			if err != jetstream.ErrMsgNotFound {
				t.Fatal(err)
			}
			return fmt.Errorf("no fingerprint on %s", bus.FingerprintSubject("acme", "memory"))
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; logs:\n%s", err, logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	for _, want := range []string{`"message":"fingerprint service started"`, `"processed":1`, `"service":"fingerprint"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
}

// TestOpsEndpoints runs the command with --ops-addr, does known work (one
// surface fingerprinted, one rejected, one observation dead-lettered) and
// checks that the metrics moved by exactly that, that they are the ones
// docs/metrics.md lists, and that readiness follows the NATS connection.
func TestOpsEndpoints(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	// Joined however the test ends: done is buffered, so the goroutine
	// never blocks on it.
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	go func() {
		defer close(exited)
		done <- run(ctx, []string{"--ops-addr", "127.0.0.1:0"}, env(map[string]string{
			"MCPDRIFT_NATS_URL": srv.ClientURL(), "MCPDRIFT_FINGERPRINT_DRAIN_TIMEOUT": "2s",
		}), &logs)
	}()
	addr := opstest.Addr(t, logs.String)
	if status, body := opstest.Get(t, addr, "/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q", status, body)
	}
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK) // the streams exist from here

	capture, err := os.ReadFile("../internal/surface/testdata/real/memory/2025.9.25.json")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, obs *mcpdriftv1.ListObservation) {
		t.Helper()
		data, err := proto.Marshal(obs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(ctx, js, subject, data, obs.EventId); err != nil {
			t.Fatal(err)
		}
	}
	publish(bus.ListObservationSubject("acme", "memory"),
		&mcpdriftv1.ListObservation{EventId: "obs-ok", Tenant: "acme", Server: "memory", Proxy: "p1", Variant: "v1", Capture: capture})
	publish(bus.ListObservationSubject("acme", "broken"),
		&mcpdriftv1.ListObservation{EventId: "obs-rejected", Tenant: "acme", Server: "broken", Proxy: "p1", Variant: "v1", Capture: []byte(`{"tools":`)})
	publish(bus.ListObservationSubject("acme", "other"), // a body that claims another server
		&mcpdriftv1.ListObservation{EventId: "obs-mismatch", Tenant: "acme", Server: "memory", Proxy: "p1", Variant: "v1", Capture: capture})

	const obsTotal = "mcpdrift_fingerprint_observations_total"
	opstest.WaitValue(t, addr, 1, obsTotal, "result", "ok")
	opstest.WaitValue(t, addr, 1, obsTotal, "result", "rejected")
	opstest.WaitValue(t, addr, 1, obsTotal, "result", "dead_lettered")
	opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", "fingerprint")
	fams := opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_ack_pending", "consumer", "fingerprint")
	fams.Require(t, 1, obsTotal, "result", "ok")
	fams.Require(t, 1, obsTotal, "result", "rejected")
	fams.Require(t, 1, obsTotal, "result", "dead_lettered")
	fams.Require(t, 1, "mcpdrift_fingerprint_dead_letters_total", "code", bus.CodeSubjectMismatch)
	fams.Require(t, 0, "mcpdrift_fingerprint_dead_letters_total", "code", bus.CodeMalformedEvent)
	fams.Require(t, 0, "mcpdrift_fingerprint_dead_letters_total", "code", bus.CodeRetriesExhausted)
	fams.Require(t, 0, "mcpdrift_fingerprint_retries_total")
	fams.Require(t, 2, "mcpdrift_fingerprint_duration_seconds") // the dead letter was never fingerprinted
	fams.Require(t, 0, "mcpdrift_consumer_info_errors_total", "consumer", "fingerprint")
	if diff := opstest.Diff(opstest.DocNames(t, "../../docs/metrics.md", "fingerprint", "every service", "consumers"), fams.Names("mcpdrift_")); diff != "" {
		t.Errorf("docs/metrics.md and the fingerprint service's metrics differ:\n%s", diff)
	}

	// NATS goes away: not ready; it comes back on the same port: ready again.
	opstest.NATSOutage(t, addr, srv)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestOpsAddressInUse(t *testing.T) {
	srv := natstest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(context.Background(), []string{"--ops-addr", ln.Addr().String()}, env(map[string]string{"MCPDRIFT_NATS_URL": srv.ClientURL()}), &bytes.Buffer{})
	if !errors.Is(err, ops.ErrAddrInUse) {
		t.Fatalf("run = %v, want ops.ErrAddrInUse", err)
	}
}

// TestRunPartitioned: with --partitions 4 and --bus-setup create the command
// partitions the streams and consumes every partition's consumer; a later
// start that says other partitions, under --bus-setup check, stops with
// partitions_mismatch before consuming.
func TestRunPartitioned(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	done, exited := make(chan error, 1), make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	go func() {
		defer close(exited)
		done <- run(ctx, []string{"--partitions", "4", "--partition-set", "0-3"},
			env(map[string]string{"MCPDRIFT_NATS_URL": srv.ClientURL()}), &logs)
	}()
	if err := poll.Until(20*time.Second, func() error {
		for i := range 4 {
			if _, err := js.Consumer(ctx, bus.StreamObservations, bus.PartitionDurable(bus.ConsumerFingerprint, i)); err != nil {
				return fmt.Errorf("consumer of partition %d: %w", i, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v; logs:\n%s", err, logs.String())
	}
	if p, err := bus.StreamPartitions(ctx, js, bus.StreamObservations, 0); err != nil || p != 4 {
		t.Fatalf("the observations have %d partitions (%v), want 4", p, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	var out syncbuf.Buffer
	err := run(context.Background(), []string{"--partitions", "2", "--bus-setup", "check"},
		env(map[string]string{"MCPDRIFT_NATS_URL": srv.ClientURL()}), &out)
	if err == nil || !strings.Contains(err.Error(), bus.CodePartitionsMismatch) {
		t.Fatalf("run with 2 partitions on a bus of 4: %v, want %s", err, bus.CodePartitionsMismatch)
	}
}
