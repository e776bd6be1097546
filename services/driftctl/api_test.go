package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/surface"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

const (
	readTok  = "reader-token-0123456789"
	writeTok = "writer-token-0123456789"
)

// startDrift builds and runs the real drift command against an in-process
// NATS, with env added to its environment, and returns its admin API URL.
func startDrift(t *testing.T, natsURL string, env ...string) string {
	t.Helper()
	cmd := exec.Command(cmdtest.Path(t, "drift"))
	cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+natsURL, "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0",
		"MCPDRIFT_ADMIN_TOKENS=ops:read:"+readTok+",alice:write:"+writeTok)
	cmd.Env = append(cmd.Env, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	scanned := make(chan struct{}) // stderr read to its end: the process exited
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg       string `json:"message"`
				AdminAddr string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.AdminAddr != "" {
				select {
				case addr <- line.AdminAddr:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		exited := make(chan struct{})
		go func() { <-scanned; _ = cmd.Wait(); close(exited) }() // Wait only after the reads
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("drift did not stop on SIGINT within 10s")
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatal("drift did not report its admin address")
	}
	return ""
}

// variantA and variantB are listing variants as proxies name them.
const (
	variantA = "v1a2b3c4d5e6f"
	variantB = "v9f8e7d6c5b4a"
)

func publishFingerprint(t *testing.T, srv *natstest.Server, server, eventID, fixture string, at time.Time) string {
	t.Helper()
	return publishVariant(t, srv, server, variantA, eventID, fixture, at)
}

func publishVariant(t *testing.T, srv *natstest.Server, server, variant, eventID, fixture string, at time.Time) string {
	t.Helper()
	_, js := srv.Connect(t)
	// Check mode: the drift command set the bus up, and a second setup's
	// stream updates race nats-server's consumer creation under -race.
	h, err := bus.Bind(context.Background(), js, bus.SetupCheck, bus.Config{}, bus.Manifests)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	s, err := surface.Parse(raw, surface.Options{Form: surface.FormLatest})
	if err != nil {
		t.Fatal(err)
	}
	hash := s.Hash.String()
	if _, err := h.Manifests.PutBytes(context.Background(), bus.ManifestName(hash), raw); err != nil {
		t.Fatal(err)
	}
	data, _ := proto.Marshal(&mcpdriftv1.Fingerprint{CanonicalForm: surface.FormLatest.String(), EventId: eventID, Tenant: "acme", Server: server, Variant: variant,
		ObservedAtUnixMs: at.UnixMilli(), SurfaceHash: hash})
	if _, err := bus.Publish(context.Background(), js, bus.FingerprintSubject("acme", server), data, eventID); err != nil {
		t.Fatal(err)
	}
	return hash
}

func TestAdminCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the drift command")
	}
	srv := natstest.Start(t)
	api := startDrift(t, srv.ClientURL())
	env := map[string]string{"MCPDRIFT_API": api, "MCPDRIFT_TOKEN": readTok}
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
		code := report(&errb, err)
		return out.String(), errb.String(), code
	}
	fx := "../internal/surface/testdata/real/filesystem/"
	t0 := time.Now()
	a := publishFingerprint(t, srv, "fs", "o1", fx+"2026.1.14.json", t0)
	poll.Eventually(t, wait, func() error {
		return contains("status", "verified", func() string { out, _, _ := cli("status"); return out })
	})

	// Follow verdicts while the server drifts.
	tctx, stopTail := context.WithCancel(context.Background())
	var tailOut, tailErr syncbuf.Buffer
	tailDone := make(chan error, 1)
	tailExited := make(chan struct{})
	t.Cleanup(func() { stopTail(); <-tailExited })
	go func() {
		defer close(tailExited)
		tailDone <- run(tctx, []string{"tail"}, func(k string) string { return env[k] }, strings.NewReader(""), &tailOut, &tailErr)
	}()
	poll.Eventually(t, wait, func() error { return contains("tail's stderr", "following verdicts", tailErr.String) })
	b := publishFingerprint(t, srv, "fs", "o2", fx+"2026.8.31.json", t0.Add(time.Second))
	poll.Eventually(t, wait, func() error {
		return contains("show acme fs", `"status": "changed"`, func() string { out, _, _ := cli("show", "acme", "fs"); return out })
	})
	poll.Eventually(t, wait, func() error { return contains("tail", "STATUS_CHANGED", tailOut.String) })
	stopTail()
	if err := <-tailDone; err != nil {
		t.Fatalf("tail: %v", err)
	}

	out, _, code := cli("diff", "--live", "acme", "fs")
	if code != 0 || !strings.Contains(out, "annotation_risk_raised") || !strings.Contains(out, "move_file") {
		t.Fatalf("diff --live: %d %.300s", code, out)
	}
	_, errOut, code := cli("approve", "--hash", b, "acme", "fs")
	if code != 2 || !strings.Contains(errOut, "driftctl: forbidden:") {
		t.Fatalf("approve with a read token: %d %s", code, errOut)
	}
	env["MCPDRIFT_TOKEN"] = writeTok
	_, errOut, code = cli("approve", "--hash", a, "acme", "fs")
	if code != 2 || !strings.Contains(errOut, "driftctl: stale_hash:") {
		t.Fatalf("approve of a stale hash: %d %s", code, errOut)
	}
	out, _, code = cli("approve", "--hash", b, "acme", "fs")
	if code != 0 || !strings.Contains(out, `"status": "verified"`) || !strings.Contains(out, `"baseline_version": 2`) {
		t.Fatalf("approve: %d %s", code, out)
	}
	out, _, code = cli("history", "acme", "fs")
	if code != 0 || strings.Count(out, `"version"`) != 2 || !strings.Contains(out, `"approved_by": "alice"`) {
		t.Fatalf("history: %d %s", code, out)
	}
	out, _, code = cli("quarantine", "--reason", "incident 9", "acme", "fs")
	if code != 0 || !strings.Contains(out, `"status": "quarantined"`) {
		t.Fatalf("quarantine: %d %s", code, out)
	}
	out, _, _ = cli("status")
	if !strings.Contains(out, "quarantined") || !strings.Contains(out, "false") {
		t.Fatalf("status table:\n%s", out)
	}
	_, errOut, code = cli("show", "acme", "nope")
	if code != 2 || !strings.Contains(errOut, "driftctl: not_found:") {
		t.Fatalf("show of an unknown server: %d %s", code, errOut)
	}
	env["MCPDRIFT_API"] = "http://127.0.0.1:1"
	if _, errOut, code = cli("status"); code != 2 || !strings.Contains(errOut, "api_unreachable") {
		t.Fatalf("status with no service: %d %s", code, errOut)
	}
}
