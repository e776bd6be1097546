package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpdrift/mcpdrift/services/internal/bus"
	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
	"github.com/mcpdrift/mcpdrift/services/internal/poll"
)

// TestAuditFullArguments: proxies run with --arguments full, on stdio and on
// HTTP, and the audit command with --arguments full, on the real pipeline
// and a real ClickHouse: the audit stores each call's arguments, with the
// secret among them redacted, beside their digest.
func TestAuditFullArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	ch, db, natsURL := startAudited(t, "MCPDRIFT_AUDIT_ARGUMENTS=full")

	const token = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
	// stdio: the mcptest server, tool "read".
	a := startProxy(t, natsURL, "audit-stdio", "--arguments", "full")
	a.init()
	if _, err := fmt.Fprintln(a.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error {
		got := a.call("tools/call", `{"name":"read","arguments":{"path":"/tmp/stdio","auth":"`+token+`"}}`)
		return awaiting(!strings.Contains(got, `"isError":true`), "the stdio proxy serves read", got)
	})
	// HTTP: a Go SDK server, tool "echo".
	_, upURL := httpUpstream(t, nil)
	base := runHTTPProxy(t, "audit-http", "--nats-url", natsURL, "--upstream", "web="+upURL, "--arguments", "full")
	cs := httpClient(t, base+"/web/mcp", "2025-11-25")
	poll.Eventually(t, wait, func() error {
		got, isErr := echo(cs, "through http "+token)
		return awaiting(!isErr, "the HTTP proxy serves echo", got)
	})

	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	for _, c := range []struct{ server, tool, want string }{
		{"files", "read", `"path":"/tmp/stdio"`},
		{"web", "echo", `"text":"through http [REDACTED]"`},
	} {
		poll.Eventually(t, wait, func() error {
			var args, digest string
			err := conn.QueryRow(context.Background(), `SELECT arguments, arguments_digest FROM `+db+`.call_observations FINAL
				WHERE server = ? AND tool = ? AND outcome = 'forwarded' AND arguments != '' ORDER BY at_ms DESC LIMIT 1`, c.server, c.tool).Scan(&args, &digest)
			if err != nil {
				return awaiting(false, fmt.Sprintf("the audit stores the arguments of %s/%s", c.server, c.tool), err.Error())
			}
			if strings.Contains(args, token) {
				t.Fatalf("the audit stored a secret: %s", args)
			}
			return awaiting(strings.Contains(args, c.want) && strings.HasPrefix(digest, "sha256:"), fmt.Sprintf("the audit stores the arguments of %s/%s", c.server, c.tool), args+" "+digest)
		})
	}
}

// startAudited runs the pipeline and the audit command (with env besides
// its connections) into a database of its own on the shared ClickHouse,
// and returns the ClickHouse, the database and the NATS URL.
func startAudited(t *testing.T, env ...string) (*chtest.Server, string, string) {
	t.Helper()
	ch := chtest.Shared(t)
	db := ch.Database(t)
	natsURL := startPipeline(t).nc.ConnectedUrl()
	runService(t, "audit", append([]string{"MCPDRIFT_NATS_URL=" + natsURL, "MCPDRIFT_LOG_LEVEL=info", "MCPDRIFT_CLICKHOUSE_ADDR=" + ch.Addr,
		"MCPDRIFT_AUDIT_DATABASE=" + db, "MCPDRIFT_AUDIT_BATCH_AGE=200ms"}, env...)...)
	return ch, db, natsURL
}

// TestCompactListingsEndToEnd: real proxies, fingerprint, drift and audit
// commands and a real ClickHouse. Once the pipeline has confirmed a
// surface, every re-listing of it (a session's second tools/list, another
// proxy's first) travels compact: the audit has a row for every listing,
// naming its hash, and the fingerprint service fingerprinted only the
// listings that travelled whole.
func TestCompactListingsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the commands, and a ClickHouse server")
	}
	ch, db, natsURL := startAudited(t)
	a := startProxy(t, natsURL, "compact-1")
	a.init()
	poll.Eventually(t, wait, func() error {
		got := a.call("tools/list", "{}")
		return awaiting(strings.Contains(got, `"name":"read"`), "the first proxy serves the baseline", got)
	})
	for range 3 {
		if got := a.call("tools/list", "{}"); !strings.Contains(got, `"name":"read"`) {
			t.Fatalf("a re-listing: %s", got)
		}
	}
	b := startProxy(t, natsURL, "compact-2")
	b.init()
	if got := b.call("tools/list", "{}"); !strings.Contains(got, `"name":"read"`) {
		t.Fatalf("the second proxy's listing: %s", got)
	}

	conn, err := clickhouse.Open(ch.Options(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, wait, func() error {
		var whole, compact, hashes uint64
		if err := conn.QueryRow(context.Background(), `SELECT countIf(compact = 0), countIf(compact = 1), uniqExact(surface_hash)
			FROM `+db+`.list_observations WHERE server = 'files' AND proxy IN ('compact-1', 'compact-2')`).Scan(&whole, &compact, &hashes); err != nil {
			return awaiting(false, "the audit's listing rows", err.Error())
		}
		fp, err := js.Stream(context.Background(), bus.StreamFingerprints)
		if err != nil {
			return err
		}
		info, err := fp.Info(context.Background())
		if err != nil {
			return err
		}
		// The first listing travels whole (two, when the agent's came
		// before the verdict on the proxy's own); the first proxy's three
		// re-listings and the second proxy's listing travel compact.
		var perProxy string
		_ = conn.QueryRow(context.Background(), `SELECT toString(groupArray(concat(proxy, ':', toString(compact)))) FROM `+db+`.list_observations WHERE server = 'files'`).Scan(&perProxy)
		got := fmt.Sprintf("%d whole, %d compact, %d hashes; %d fingerprints; %s", whole, compact, hashes, info.State.Msgs, perProxy)
		return awaiting(whole >= 1 && whole <= 2 && compact >= 4 && hashes == 1 && info.State.Msgs == whole,
			"every listing audited with its one hash, only the whole ones fingerprinted", got)
	})
}
