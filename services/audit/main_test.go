package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"google.golang.org/protobuf/proto"

	"github.com/mcpdrift/mcpdrift/proto/mcpdriftv1"
	"github.com/mcpdrift/mcpdrift/services/audit/internal/sink"
	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/cmdtest"
	"github.com/mcpdrift/mcpdrift/services/internal/natstest"
	"github.com/mcpdrift/mcpdrift/services/internal/ops"
	"github.com/mcpdrift/mcpdrift/services/internal/ops/opstest"
	"github.com/mcpdrift/mcpdrift/services/internal/options"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
	"github.com/mcpdrift/mcpdrift/services/internal/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(cmdtest.Main(func() int { return chtest.Main(m) })) }

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
	for _, want := range []string{"MCPDRIFT_CLICKHOUSE_PASSWORD", "--ops-addr ADDR", "MCPDRIFT_OPS_ADDR", "/metrics", "(default 127.0.0.1:9000)", "(default digest)", "(default 20000)", "(default mcpdrift)"} {
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
			return s.chAddr == "127.0.0.1:9000" && s.svc == sink.DefaultConfig && s.retention == 0
		}},
		{name: "env", env: map[string]string{"MCPDRIFT_CLICKHOUSE_ADDR": "ch:9000", "MCPDRIFT_AUDIT_BATCH_SIZE": "500", "MCPDRIFT_CLICKHOUSE_PASSWORD": "pw"},
			check: func(s *settings) bool { return s.chAddr == "ch:9000" && s.svc.BatchSize == 500 && s.chPass == "pw" }},
		{name: "flag_wins_over_env", args: []string{"--batch-age", "2s"}, env: map[string]string{"MCPDRIFT_AUDIT_BATCH_AGE": "5s"},
			check: func(s *settings) bool { return s.svc.BatchAge == 2*time.Second }},
		{name: "bad_env", env: map[string]string{"MCPDRIFT_AUDIT_BATCH_SIZE": "many"}, wantErr: "MCPDRIFT_AUDIT_BATCH_SIZE"},
		{name: "bad_duration", args: []string{"--batch-age", "30"}, wantErr: "not a duration"},
		{name: "unknown_flag", args: []string{"--nope"}, wantErr: "usage"},
		{name: "stray_argument", args: []string{"extra"}, wantErr: "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parse(tc.args, env(tc.env), &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
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

func TestInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		env        map[string]string
	}{
		{"arguments", "arguments \"everything\"", map[string]string{"MCPDRIFT_AUDIT_ARGUMENTS": "everything"}},
		{"database", "invalid_database", map[string]string{"MCPDRIFT_AUDIT_DATABASE": "a-b"}},
		{"retention", "retention days -1", map[string]string{"MCPDRIFT_AUDIT_RETENTION_DAYS": "-1"}},
		{"log_level", "log level", map[string]string{"MCPDRIFT_LOG_LEVEL": "loud"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), nil, env(tc.env), &bytes.Buffer{})
			if err == nil || !strings.HasPrefix(err.Error(), "config: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want config: ...%s", err, tc.want)
			}
		})
	}
}

// TestKilledMidBatchLosesNothing runs the real command, lets it write one
// batch and hold the next, kills it with SIGKILL, and starts it again: every
// event ends up in ClickHouse exactly once (as distinct rows).
func TestKilledMidBatchLosesNothing(t *testing.T) {
	bin := cmdtest.Path(t, "audit")
	ch := chtest.Shared(t)
	db := ch.Database(t)
	b := natstest.StartBus(t)
	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	count := func(q string) uint64 {
		var n uint64
		if err := conn.QueryRow(context.Background(), strings.ReplaceAll(q, "DB.", db+".")).Scan(&n); err != nil {
			return 0 // the tables appear when the command has migrated
		}
		return n
	}
	obs := sink.Consumers[0]
	consumer := func() (ackPending, pending int, floor uint64) {
		c, err := b.JS.Consumer(context.Background(), obs.Stream, obs.Durable)
		if err != nil {
			return -1, -1, 0
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return -1, -1, 0
		}
		return info.NumAckPending, int(info.NumPending), info.AckFloor.Stream
	}
	start := func(extra ...string) (*exec.Cmd, *syncbuf.Buffer) {
		cmd := exec.Command(bin)
		logs := new(syncbuf.Buffer)
		cmd.Stdout, cmd.Stderr = logs, logs
		cmd.Env = append(os.Environ(), "MCPDRIFT_NATS_URL="+b.ClientURL(), "MCPDRIFT_CLICKHOUSE_ADDR="+ch.Addr,
			"MCPDRIFT_AUDIT_DATABASE="+db, "MCPDRIFT_AUDIT_BATCH_SIZE=400")
		cmd.Env = append(cmd.Env, extra...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, logs
	}
	waitFor := func(logs *syncbuf.Buffer, cond func() error) {
		t.Helper()
		if err := poll.Until(90*time.Second, cond); err != nil {
			t.Fatalf("%v; logs:\n%s", err, logs.String())
		}
	}

	// First run: batches of 400, and a batch age long enough that the
	// remainder stays held until the kill.
	first, logs := start("MCPDRIFT_AUDIT_BATCH_AGE=50s")
	const n = 600
	for i := range n {
		ev := &mcpdriftv1.CallObservation{EventId: fmt.Sprintf("k-%d", i), Tenant: "acme", Server: "fs", Tool: "read",
			Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED, ObservedAtUnixMs: 1_760_000_000_000 + int64(i)}
		data, _ := proto.Marshal(ev)
		if _, err := bus.Publish(context.Background(), b.JS, bus.CallObservationSubject("acme", "fs"), data, ev.EventId); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(logs, func() error {
		ap, p, floor := consumer()
		if rows := count("SELECT count() FROM DB.call_observations FINAL"); rows != 400 || ap != n-400 || p != 0 || floor == 0 {
			return fmt.Errorf("%d rows, %d unacked, %d pending, ack floor %d; want one batch of 400 written and the rest held", rows, ap, p, floor)
		}
		return nil
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	if got := count("SELECT count() FROM DB.call_observations FINAL"); got != 400 {
		t.Fatalf("%d rows after the kill, want 400", got)
	}

	// Second run: JetStream redelivers what the killed instance held once
	// the (now short) ack wait passes.
	second, logs2 := start("MCPDRIFT_AUDIT_BATCH_AGE=50ms", "MCPDRIFT_AUDIT_ACK_WAIT=2s", "MCPDRIFT_AUDIT_WRITE_TIMEOUT=1s")
	waitFor(logs2, func() error {
		ap, p, _ := consumer()
		if events := count("SELECT uniqExact(event_id) FROM DB.call_observations"); ap != 0 || p != 0 || events != n {
			return fmt.Errorf("%d events written, %d unacked, %d pending; want all %d written and acked", events, ap, p, n)
		}
		return nil
	})
	if got := count("SELECT count() FROM DB.call_observations FINAL"); got != n {
		t.Errorf("%d rows (FINAL), want %d", got, n)
	}
	if err := second.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("audit exited with %v after SIGINT; logs:\n%s", err, logs2.String())
	}
	if !strings.Contains(logs2.String(), `"message":"audit sink stopped"`) {
		t.Errorf("no stop line in the logs:\n%s", logs2.String())
	}
}

// TestOpsEndpoints runs the command with --ops-addr and batches of 5, does
// known work and checks that the metrics moved by exactly that, that they
// are the ones docs/metrics.md lists, and that readiness follows ClickHouse
// and NATS.
func TestOpsEndpoints(t *testing.T) {
	ch := chtest.Start(t) // its own server: the test stops it
	db := ch.Database(t)
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
			"MCPDRIFT_NATS_URL": srv.ClientURL(), "MCPDRIFT_CLICKHOUSE_ADDR": ch.Addr, "MCPDRIFT_AUDIT_DATABASE": db,
			// A batch is written when it holds 5 rows, not by age: the
			// batch counts below are exact.
			"MCPDRIFT_AUDIT_BATCH_SIZE": "5", "MCPDRIFT_AUDIT_BATCH_AGE": "50s",
			"MCPDRIFT_AUDIT_MAX_RETRY_DELAY": "500ms", "MCPDRIFT_AUDIT_DRAIN_TIMEOUT": "5s",
		}), &logs)
	}()
	addr := opstest.Addr(t, logs.String)
	if status, body := opstest.Get(t, addr, "/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz = %d %q", status, body)
	}
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK) // migrated, the streams exist

	publish := func(subject string, data []byte, id string) {
		t.Helper()
		if _, err := bus.Publish(ctx, js, subject, data, id); err != nil {
			t.Fatal(err)
		}
	}
	call := func(id string) {
		t.Helper()
		data, _ := proto.Marshal(&mcpdriftv1.CallObservation{EventId: id, Tenant: "acme", Server: "fs", Tool: "read",
			Outcome: mcpdriftv1.CallOutcome_CALL_OUTCOME_FORWARDED, ObservedAtUnixMs: 1_760_000_000_000})
		publish(bus.CallObservationSubject("acme", "fs"), data, id)
	}
	const rows = "mcpdrift_audit_rows_written_total"
	check := func(fams opstest.Families, want map[string]float64) {
		t.Helper()
		for key, w := range want {
			name, labels, _ := strings.Cut(key, " ")
			var lv []string
			if labels != "" {
				lv = strings.Split(labels, "=")
			}
			fams.Require(t, w, name, lv...)
		}
	}

	// One batch: three calls, a verdict, an admin action.
	for i := range 3 {
		call(fmt.Sprintf("c-%d", i))
	}
	v, _ := bus.MarshalJSON(&mcpdriftv1.Verdict{EventId: "v-1", Tenant: "acme", Server: "fs", Variant: "default",
		Status: mcpdriftv1.Status_STATUS_VERIFIED, AtUnixMs: 1_760_000_000_000})
	publish(bus.VerdictSubject("acme", "fs"), v, "v-1")
	a, _ := bus.MarshalJSON(&mcpdriftv1.AdminAction{EventId: "a-1", Tenant: "acme", Server: "fs", Action: "approve",
		Actor: "alice", Ok: true, AtUnixMs: 1_760_000_000_000})
	publish(bus.AdminSubject("acme", "fs"), a, "a-1")
	fams := opstest.WaitValue(t, addr, 1, "mcpdrift_audit_batches_total")
	check(fams, map[string]float64{
		rows + " table=call_observations": 3, rows + " table=verdicts": 1, rows + " table=admin_actions": 1,
		rows + " table=list_observations": 0, rows + " table=dead_letters": 0,
		"mcpdrift_audit_batch_seconds": 1, "mcpdrift_audit_rows_held": 0, "mcpdrift_audit_write_failures_total": 0,
	})

	// Four calls are held in the next batch; an undecodable event is
	// dead-lettered, and its dead letter, read back from the bus, is the
	// fifth row.
	for i := range 4 {
		call(fmt.Sprintf("d-%d", i))
	}
	opstest.WaitValue(t, addr, 4, "mcpdrift_audit_rows_held")
	publish(bus.CallObservationSubject("acme", "fs"), []byte("\xff not protobuf"), "garbage")
	fams = opstest.WaitValue(t, addr, 2, "mcpdrift_audit_batches_total")
	check(fams, map[string]float64{
		rows + " table=call_observations": 7, rows + " table=dead_letters": 1,
		"mcpdrift_audit_dead_letters_total code=malformed_event": 1, "mcpdrift_audit_dead_letters_total code=subject_mismatch": 0,
		"mcpdrift_audit_batch_seconds": 2, "mcpdrift_audit_rows_held": 0, "mcpdrift_audit_write_failures_total": 0,
	})
	for _, k := range sink.Consumers {
		opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_pending", "consumer", k.Durable)
		fams = opstest.WaitValue(t, addr, 0, "mcpdrift_consumer_ack_pending", "consumer", k.Durable)
		check(fams, map[string]float64{"mcpdrift_consumer_info_errors_total consumer=" + k.Durable: 0})
	}
	if diff := opstest.Diff(opstest.DocNames(t, "../../docs/metrics.md", "audit", "every service", "consumers"), fams.Names("mcpdrift_")); diff != "" {
		t.Errorf("docs/metrics.md and the audit sink's metrics differ:\n%s", diff)
	}

	// ClickHouse goes away: not ready, a batch is held and its writes fail;
	// it comes back: ready, and the batch is written.
	ch.Stop()
	if body := opstest.WaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable); !strings.Contains(body, "clickhouse: clickhouse not reachable") {
		t.Errorf("GET /readyz without ClickHouse = %q, want it to name the clickhouse check", body)
	}
	for i := range 5 {
		call(fmt.Sprintf("e-%d", i))
	}
	opstest.WaitValue(t, addr, 5, "mcpdrift_audit_rows_held")
	poll.Eventually(t, opstest.Wait, func() error {
		if n, _ := opstest.Scrape(t, addr).Value("mcpdrift_audit_write_failures_total"); n == 0 {
			return errors.New("no write failure counted with ClickHouse down")
		}
		return nil
	})
	if err := ch.Restart(); err != nil {
		t.Fatal(err)
	}
	opstest.WaitStatus(t, addr, "/readyz", http.StatusOK)
	fams = opstest.WaitValue(t, addr, 12, rows, "table", "call_observations")
	check(fams, map[string]float64{"mcpdrift_audit_batches_total": 3, "mcpdrift_audit_batch_seconds": 3, "mcpdrift_audit_rows_held": 0})

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Unroutable NATS: the ops listener fails first and stops the start.
	err = run(context.Background(), []string{"--ops-addr", ln.Addr().String(), "--nats-url", "nats://192.0.2.1:4222"}, env(nil), &bytes.Buffer{})
	if !errors.Is(err, ops.ErrAddrInUse) {
		t.Fatalf("run = %v, want ops.ErrAddrInUse", err)
	}
}
