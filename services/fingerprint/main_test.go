package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/fingerprint/internal/fpsvc"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelpDocumentsEveryOption(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env(nil), &out); err != nil {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, o := range settingsOptions(new(settings)) {
		if !strings.Contains(help, "--"+o.Flag+" ") || !strings.Contains(help, o.Env) {
			t.Errorf("--help does not document --%s and %s", o.Flag, o.Env)
		}
	}
	for _, want := range []string{"MCPDRIFT_NATS_URL", "(default nats://127.0.0.1:4222)", "(default 30s)", "(default fingerprint)"} {
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
			return s.natsURL == "nats://127.0.0.1:4222" && s.replicas == 1 && s.logLevel == "info" && s.svc == fpsvc.DefaultConfig
		}},
		{name: "env", env: map[string]string{"MCPDRIFT_NATS_URL": "nats://n1:4222", "MCPDRIFT_REPLICAS": "3", "MCPDRIFT_FINGERPRINT_ACK_WAIT": "1m"},
			check: func(s *settings) bool {
				return s.natsURL == "nats://n1:4222" && s.replicas == 3 && s.svc.AckWait == time.Minute
			}},
		{name: "flag_wins_over_env", args: []string{"--workers", "7"}, env: map[string]string{"MCPDRIFT_FINGERPRINT_WORKERS": "3"},
			check: func(s *settings) bool { return s.svc.Workers == 7 }},
		{name: "bad_env", env: map[string]string{"MCPDRIFT_FINGERPRINT_MAX_DELIVER": "many"}, wantErr: "MCPDRIFT_FINGERPRINT_MAX_DELIVER"},
		{name: "bad_duration", args: []string{"--ack-wait", "30"}, wantErr: "not a duration"},
		{name: "unknown_flag", args: []string{"--nope"}, wantErr: "usage"},
		{name: "stray_argument", args: []string{"extra"}, wantErr: "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := parse(tc.args, env(tc.env), &bytes.Buffer{})
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
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := bus.Publish(ctx, js, bus.ListObservationSubject("acme", "memory"), data, obs.EventId); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the observation stream never appeared; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		m, err := js.Stream(ctx, bus.StreamFingerprints)
		if err == nil {
			if _, err := m.GetLastMsgForSubject(ctx, bus.FingerprintSubject("acme", "memory")); err == nil {
				break
			} else if err != jetstream.ErrMsgNotFound {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fingerprint; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
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
