// Package e2e runs the mcpdrift services as the real commands, built from
// this repository, against an in-process NATS server: what a deployment
// does, measured end to end.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
)

// build returns the directory of the service commands, built once per test
// binary (cmdtest).
func build(tb testing.TB) string {
	tb.Helper()
	return cmdtest.Dir(tb, "fingerprint", "drift", "proxy", "audit", "notify", "demoserver", "driftctl")
}

// runService starts a service command and stops it with SIGINT at the end.
func runService(tb testing.TB, name string, env ...string) {
	tb.Helper()
	cmd := exec.Command(filepath.Join(build(tb), name))
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	started, scanned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			var line struct {
				Level, Message string
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Level == "info" {
				once.Do(func() { close(started) })
			}
			if line.Level == "error" || line.Level == "fatal" {
				tb.Logf("%s: %s", name, sc.Text())
			}
		}
	}()
	stopOnCleanup(tb, cmd, name, scanned)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		tb.Fatalf("%s did not start", name)
	}
}

// stopOnCleanup stops a started command with SIGINT when the test ends and
// fails the test when it exits with an error or does not stop within 15 s.
// scanned are closed by the goroutines that read the command's pipes when
// they return: the cleanup waits for them after cmd.Wait, which closes the
// pipes, so that none outlives the test.
func stopOnCleanup(tb testing.TB, cmd *exec.Cmd, name string, scanned ...<-chan struct{}) {
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("%s exited: %v", name, err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			tb.Errorf("%s did not stop on SIGINT within 15s", name)
		}
		for _, s := range scanned {
			<-s
		}
	})
}

// pipeline is NATS plus the fingerprint and drift commands.
type pipeline struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *natstest.Server // the NATS server, to stop it
}

func startPipeline(tb testing.TB, driftEnv ...string) *pipeline {
	tb.Helper()
	b := natstest.StartBus(tb)
	nc, js, srv := b.NC, b.JS, b.Server
	env := []string{"MCPDRIFT_NATS_URL=" + srv.ClientURL(), "MCPDRIFT_LOG_LEVEL=info"}
	runService(tb, "fingerprint", env...)
	runService(tb, "drift", append(append(env, "MCPDRIFT_ADMIN_ADDR=127.0.0.1:0", "MCPDRIFT_ADMIN_TOKENS=bench:read:bench-token-0123456789"), driftEnv...)...)
	return &pipeline{nc: nc, js: js, srv: srv}
}

func observation(tb testing.TB, tenant, server, id string, capture []byte) []byte {
	tb.Helper()
	data, err := proto.Marshal(&mcpdriftv1.ListObservation{EventId: id, Tenant: tenant, Server: server, Proxy: "bench",
		Variant: "default", ObservedAtUnixMs: time.Now().UnixMilli(), Capture: capture})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestPipelineDrift: a rug pull observed by a proxy reaches a verdict through
// the real fingerprint and drift commands.
func TestPipelineDrift(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service commands")
	}
	p := startPipeline(t)
	sub, err := p.nc.SubscribeSync(bus.VerdictSubject("acme", "fs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.nc.Flush(); err != nil { // the server has the subscription before anything is published
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, fx := range []string{"2026.1.14", "2026.8.31"} {
		capture, err := os.ReadFile("../internal/surface/testdata/real/filesystem/" + fx + ".json")
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprint("obs-", i)
		if _, err := bus.Publish(ctx, p.js, bus.ListObservationSubject("acme", "fs"), observation(t, "acme", "fs", id, capture), id); err != nil {
			t.Fatal(err)
		}
		msg, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("no verdict for %s: %v", fx, err)
		}
		var v map[string]any
		if err := json.Unmarshal(msg.Data, &v); err != nil {
			t.Fatal(err)
		}
		want := []string{"STATUS_VERIFIED", "STATUS_CHANGED"}[i]
		if v["status"] != want {
			t.Fatalf("verdict after %s: %v, want %s", fx, v, want)
		}
		if i == 1 && (v["serve"] != false || v["severity"] != "critical") {
			t.Fatalf("the rug pull verdict: %v", v)
		}
	}
}

// BenchmarkPipelineLatency measures observation published → verdict received
// through the real commands at a steady rate (MCPDRIFT_BENCH_RATE per second,
// default 1000), every observation a server's first sight so that each one
// yields a verdict. The baseline in the same run is a plain JetStream
// publish → consume of the same messages on the same server.
func BenchmarkPipelineLatency(b *testing.B) {
	rate := 1000
	if v := os.Getenv("MCPDRIFT_BENCH_RATE"); v != "" {
		fmt.Sscan(v, &rate)
	}
	capture, err := os.ReadFile("../internal/surface/testdata/real/memory/2025.9.25.json")
	if err != nil {
		b.Fatal(err)
	}
	p := startPipeline(b)
	ctx := context.Background()

	measure := func(n int, publish func(i int) error, received chan int) []time.Duration {
		sent := make([]time.Time, n)
		lat := make([]time.Duration, 0, n)
		done := make(chan struct{})
		defer func() { <-done }() // also when publish fails the benchmark
		go func() {
			for range n {
				select {
				case i := <-received:
					lat = append(lat, time.Since(sent[i]))
				case <-time.After(30 * time.Second):
					b.Errorf("only %d of %d arrived", len(lat), n)
					close(done)
					return
				}
			}
			close(done)
		}()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := range n {
			<-tick.C
			sent[i] = time.Now()
			if err := publish(i); err != nil {
				b.Fatal(err)
			}
		}
		<-done
		slices.Sort(lat)
		return lat
	}
	pct := func(lat []time.Duration, q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}

	n := max(b.N, 2000)
	run := fmt.Sprint(time.Now().UnixNano())

	// Baseline: publish → consume on a stream of its own, same payloads.
	if _, err := p.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_RAW", Subjects: []string{"bench.raw.>"}}); err != nil {
		b.Fatal(err)
	}
	rawRecv := make(chan int, n)
	cons, err := p.js.CreateOrUpdateConsumer(ctx, "BENCH_RAW", jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var i int
		fmt.Sscan(m.Headers().Get("i"), &i)
		_ = m.Ack()
		rawRecv <- i
	})
	if err != nil {
		b.Fatal(err)
	}
	rawLat := measure(n, func(i int) error {
		msg := nats.NewMsg(fmt.Sprint("bench.raw.", i))
		msg.Data = observation(b, "bench", "s", "raw", capture)
		msg.Header.Set("i", fmt.Sprint(i))
		_, err := p.js.PublishMsg(ctx, msg)
		return err
	}, rawRecv)
	cc.Stop()

	// The pipeline: each observation is a new server, so each yields a verdict.
	recv := make(chan int, n)
	sub, err := p.nc.Subscribe(bus.Prefix+".drift.bench.>", func(m *nats.Msg) {
		var v struct{ Server string }
		if json.Unmarshal(m.Data, &v) == nil {
			var i int
			if _, err := fmt.Sscanf(v.Server, "s%d", &i); err == nil {
				recv <- i
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.ResetTimer()
	lat := measure(n, func(i int) error {
		server := fmt.Sprint("s", i)
		id := run + "-" + server
		_, err := p.js.Publish(ctx, bus.ListObservationSubject("bench", server), observation(b, "bench", server, id, capture), jetstream.WithMsgID(id))
		return err
	}, recv)
	b.StopTimer()
	b.ReportMetric(float64(pct(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(lat, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(pct(rawLat, 0.50).Microseconds())/1000, "raw-p50-ms")
	b.ReportMetric(float64(pct(rawLat, 0.99).Microseconds())/1000, "raw-p99-ms")
	b.ReportMetric(float64(pct(lat, 0.99))/float64(max(pct(rawLat, 0.99), 1)), "p99-ratio")
	b.ReportMetric(float64(rate), "obs/s")
}
