package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
	"github.com/mcpdrift/mcpdrift/services/notify/internal/notifysvc"
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
	for _, want := range []string{"--webhook URL", "--format FORMAT", "json, slack or cloudevents", "--filter EXPR", "(default json)",
		envWebhook, envFormat, envFilter, envName, envSecret, "Idempotency-Key", "X-Mcpdrift-Signature", "/metrics"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}

func TestSettings(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type dest struct{ name, format, filter string }
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		want   []dest
		secret string
	}{
		{name: "flags", args: []string{"--webhook", "https://a/1", "--format", "slack", "--filter", "tenant=acme", "--webhook", "http://b:9/2", "--name", "siem"},
			want: []dest{{"", "slack", "tenant=acme"}, {"siem", "json", ""}}},
		{name: "env_destination", env: map[string]string{envWebhook: "https://a/1", envFormat: "cloudevents", envFilter: "severity>=high", envName: "n"},
			want: []dest{{"n", "cloudevents", "severity>=high"}}},
		{name: "flags_win_over_env", args: []string{"--webhook", "https://b/2"}, env: map[string]string{envWebhook: "https://a/1", envFormat: "slack"},
			want: []dest{{"", "json", ""}}},
		{name: "secret_env", args: []string{"--webhook", "https://a/1"}, env: map[string]string{envSecret: "from-env"},
			want: []dest{{"", "json", ""}}, secret: "from-env"},
		{name: "secret_file", args: []string{"--webhook", "https://a/1", "--secret-file", secretFile},
			want: []dest{{"", "json", ""}}, secret: "from-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(tc.args, env(tc.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.validate(); err != nil {
				t.Fatal(err)
			}
			if len(s.svc.Destinations) != len(tc.want) || string(s.secret) != tc.secret {
				t.Fatalf("destinations %+v secret %q", s.svc.Destinations, s.secret)
			}
			for i, w := range tc.want {
				d := s.svc.Destinations[i]
				if (w.name != "" && d.Name != w.name) || d.Format != w.format || d.Filter.String() != w.filter {
					t.Errorf("destination %d: %s %s %q, want %+v", i, d.Name, d.Format, d.Filter.String(), w)
				}
			}
		})
	}
}

// TestBadInputFailsAtStart: bad input is refused before connecting (an
// unroutable NATS URL would hang), with a coded error, exit status 2, and
// never the webhook URL in it.
func TestBadInputFailsAtStart(t *testing.T) {
	const secretPath = "T0/B0/hush-hush"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no_destination", nil, nil, "no destination"},
		{"ftp_scheme", []string{"--webhook", "ftp://h/" + secretPath}, nil, notifysvc.CodeInvalidWebhook},
		{"no_scheme", []string{"--webhook", "hooks.example/" + secretPath}, nil, notifysvc.CodeInvalidWebhook},
		{"no_host", []string{"--webhook", "https:///" + secretPath}, nil, notifysvc.CodeInvalidWebhook},
		{"env_url", nil, map[string]string{envWebhook: "mailto:" + secretPath}, notifysvc.CodeInvalidWebhook},
		{"unknown_format", []string{"--webhook", "https://h/" + secretPath, "--format", "xml"}, nil, notifysvc.CodeUnknownFormat},
		{"env_format", nil, map[string]string{envWebhook: "https://h/" + secretPath, envFormat: "teams"}, notifysvc.CodeUnknownFormat},
		{"malformed_filter", []string{"--webhook", "https://h/" + secretPath, "--filter", "severity>=loud"}, nil, notifysvc.CodeInvalidFilter},
		{"filter_syntax", []string{"--webhook", "https://h/" + secretPath, "--filter", "tenant"}, nil, notifysvc.CodeInvalidFilter},
		{"second_destination", []string{"--webhook", "https://h/a", "--webhook", "https://h/" + secretPath, "--filter", "kind=x"}, nil, "webhook 2"},
		{"same_url_twice", []string{"--webhook", "https://h/" + secretPath, "--webhook", "https://h/" + secretPath}, nil, notifysvc.CodeInvalidDestination},
		{"bad_name", []string{"--webhook", "https://h/" + secretPath, "--name", "a.b"}, nil, notifysvc.CodeInvalidDestination},
		{"format_first", []string{"--format", "slack", "--webhook", "https://h/" + secretPath}, nil, "applies to the --webhook before it"},
		{"format_twice", []string{"--webhook", "https://h/" + secretPath, "--format", "slack", "--format", "json"}, nil, "given twice"},
		{"secret_file_missing", []string{"--webhook", "https://h/x", "--secret-file", "/nonexistent/secret"}, nil, CodeSecretUnreadable},
		{"two_secrets", []string{"--webhook", "https://h/x", "--secret-file", "/etc/hostname"}, map[string]string{envSecret: "x"}, "give one"},
		{"timeout_past_ack_wait", []string{"--webhook", "https://h/x", "--timeout", "2m"}, nil, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{"MCPDRIFT_NATS_URL": "nats://192.0.2.1:4222"}
			for k, v := range tc.env {
				e[k] = v
			}
			err := run(context.Background(), tc.args, env(e), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || options.Status(err) != options.ExitUsage {
				t.Fatalf("run = %v (status %d), want exit status 2 with %q", err, options.Status(err), tc.want)
			}
			if strings.Contains(err.Error(), "hush") {
				t.Errorf("the error shows the webhook URL: %v", err)
			}
		})
	}
}

// TestRunDeliversAndServesOps runs the command against a real NATS and a
// real receiver: a verdict published as the drift service does is posted,
// signed; the metrics are those docs/metrics.md lists; readiness follows
// NATS.
func TestRunDeliversAndServesOps(t *testing.T) {
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	type request struct {
		header http.Header
		body   []byte
	}
	var got atomic.Pointer[request]
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Store(&request{r.Header.Clone(), body})
	}))
	defer recv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	go func() {
		defer close(exited)
		done <- run(ctx, []string{"--ops-addr", "127.0.0.1:0", "--webhook", recv.URL + "/in", "--name", "siem", "--format", "cloudevents",
			"--filter", "status!=verified"}, env(map[string]string{
			"MCPDRIFT_NATS_URL": srv.ClientURL(), "MCPDRIFT_NOTIFY_DRAIN_TIMEOUT": "2s", envSecret: "k",
		}), &logs)
	}()
	addr := opstest.Addr(t, logs.String)
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK) // the streams and consumers exist from here
	// The consumers start with what comes after them.
	opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", "notify-siem")
	opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", "notify-siem-approvals")

	for i, st := range []mcpdriftv1.Status{mcpdriftv1.Status_STATUS_VERIFIED, mcpdriftv1.Status_STATUS_CHANGED} {
		v := &mcpdriftv1.Verdict{EventId: "verdict-acme.files.v1-" + string(rune('1'+i)), Tenant: "acme", Server: "files", Variant: "v1",
			Status: st, Severity: "high", AtUnixMs: time.Now().UnixMilli()}
		data, err := bus.MarshalJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(ctx, js, bus.VerdictSubject("acme", "files"), data, v.EventId); err != nil {
			t.Fatal(err)
		}
	}
	const events = "mcpdrift_notify_events_total"
	opstest.WaitValue(t, addr, 1, events, "destination", "siem", "result", "delivered")
	fams := opstest.WaitValue(t, addr, 1, events, "destination", "siem", "result", "filtered")
	fams.Require(t, 0, events, "destination", "siem", "result", "dead_lettered")
	fams.Require(t, 0, "mcpdrift_notify_delivery_failures_total", "destination", "siem", "reason", notifysvc.Fail5xx)
	fams.Require(t, 0, "mcpdrift_notify_dead_letters_total", "destination", "siem", "code", bus.CodeRetriesExhausted)
	fams.Require(t, 0, "mcpdrift_notify_retries_total", "destination", "siem")
	fams.Require(t, 1, "mcpdrift_notify_delivery_seconds", "destination", "siem")
	if q := got.Load(); q.header.Get(notifysvc.HeaderIdempotencyKey) != "verdict-acme.files.v1-2" ||
		q.header.Get(notifysvc.HeaderSignature) != notifysvc.Sign([]byte("k"), q.header.Get(notifysvc.HeaderTimestamp), q.body) ||
		q.header.Get("Content-Type") != "application/cloudevents+json; charset=utf-8" {
		t.Errorf("request headers %v", q.header)
	}
	if diff := opstest.Diff(opstest.DocNames(t, "../../docs/metrics.md", "notify", "every service", "consumers"), fams.Names("mcpdrift_")); diff != "" {
		t.Errorf("docs/metrics.md and the notify service's metrics differ:\n%s", diff)
	}
	if !strings.Contains(logs.String(), `"notify service started"`) || !strings.Contains(logs.String(), `"name":"siem"`) {
		t.Errorf("no start line naming the destination:\n%s", logs.String())
	}

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
