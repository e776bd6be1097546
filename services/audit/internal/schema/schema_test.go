package schema

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpdrift/mcpdrift/services/internal/chtest"
)

func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }

// objects lists the tables and views of a database with their DDL.
func objects(t *testing.T, conn driver.Conn, db string) map[string]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT name, create_table_query FROM system.tables WHERE database = ?", db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, q string
		if err := rows.Scan(&n, &q); err != nil {
			t.Fatal(err)
		}
		out[n] = q
	}
	return out
}

func migrationRows(t *testing.T, conn driver.Conn, db string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM "+db+".schema_migrations FINAL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateTwiceIsNoOp(t *testing.T) {
	srv := chtest.Shared(t)
	db := srv.Database(t)
	conn := srv.Conn(t)
	ctx := context.Background()
	first, err := Migrate(ctx, conn, Options{Database: db})
	if err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	if len(first.Applied) != len(Migrations) {
		t.Fatalf("first run applied %v, want every migration", first.Applied)
	}
	before := objects(t, conn, db)
	for _, want := range append(slices.Clone(Tables), "schema_migrations", "calls_hourly", "calls_hourly_mv", "verdicts_hourly", "verdicts_hourly_mv") {
		if _, ok := before[want]; !ok {
			t.Errorf("table %s missing after migrate; have %v", want, before)
		}
	}
	second, err := Migrate(ctx, conn, Options{Database: db})
	if err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if len(second.Applied) != 0 {
		t.Errorf("second run applied %v, want nothing", second.Applied)
	}
	after := objects(t, conn, db)
	if len(after) != len(before) {
		t.Errorf("objects changed: %d before, %d after", len(before), len(after))
	}
	for n, q := range before {
		if after[n] != q {
			t.Errorf("%s changed:\n%s\n%s", n, q, after[n])
		}
	}
	if n := migrationRows(t, conn, db); n != uint64(len(Migrations)) {
		t.Errorf("schema_migrations has %d versions, want %d", n, len(Migrations))
	}
}

// TestMigrateFromVersion1: a database made by the first release (version 1
// only) gets alert_code and agent, and keeps its rows.
func TestMigrateFromVersion1(t *testing.T) {
	srv := chtest.Shared(t)
	db := srv.Database(t)
	conn := srv.Conn(t)
	ctx := context.Background()
	all := Migrations
	Migrations = all[:1]
	_, err := Migrate(ctx, conn, Options{Database: db})
	Migrations = all
	if err != nil {
		t.Fatalf("migrating to version 1: %v", err)
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".call_observations (event_id, at, at_ms, tenant, server, tool, outcome)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("old", time.Now(), int64(1), "acme", "fs", "read", "forwarded"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	res, err := Migrate(ctx, conn, Options{Database: db})
	if err != nil {
		t.Fatalf("migrating to the latest version: %v", err)
	}
	if !slices.Equal(res.Applied, []uint32{2, 3, 4, 5}) {
		t.Errorf("applied %v, want [2 3 4 5]", res.Applied)
	}
	var code, agent string
	if err := conn.QueryRow(ctx, "SELECT alert_code, agent FROM "+db+".call_observations WHERE event_id = 'old'").Scan(&code, &agent); err != nil || code != "" || agent != "" {
		t.Errorf("the old row's alert_code and agent: %q, %q, %v; want empty", code, agent, err)
	}
	if err := conn.QueryRow(ctx, "SELECT policy_action FROM "+db+".call_observations WHERE event_id = 'old'").Scan(&code); err != nil || code != "" {
		t.Errorf("the old row's policy_action: %q, %v; want empty", code, err)
	}
	var compact uint8
	if err := conn.QueryRow(ctx, "SELECT count(), max(compact) FROM "+db+".list_observations WHERE surface_hash = '' AND session = ''").Scan(new(uint64), &compact); err != nil || compact != 0 {
		t.Errorf("list_observations' compact, surface_hash and session (version 5): %d, %v; want the columns", compact, err)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	srv := chtest.Shared(t)
	db := srv.Database(t)
	const instances = 4
	var wg sync.WaitGroup
	errs := make([]error, instances)
	for i := range instances {
		// A connection each, as separate sink instances have.
		conn, err := clickhouse.Open(srv.Options("default"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		wg.Go(func() { _, errs[i] = Migrate(context.Background(), conn, Options{Database: db}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	conn := srv.Conn(t)
	if n := migrationRows(t, conn, db); n != uint64(len(Migrations)) {
		t.Errorf("schema_migrations has %d versions, want %d", n, len(Migrations))
	}
	vs, err := Applied(context.Background(), conn, db)
	if err != nil || len(vs) != len(Migrations) {
		t.Errorf("Applied = %v, %v", vs, err)
	}
}

func TestFeaturesOf(t *testing.T) {
	for _, tc := range []struct {
		version              string
		lc, codecs, ttl, d64 bool
	}{
		{"18.16.1", false, false, false, false},
		{"19.1.6", false, true, false, false},
		{"19.6.2.11", true, true, true, false},
		{"20.1.2.4", true, true, true, true},
		{"24.8.4.13", true, true, true, true},
		{"garbage", false, false, false, false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			f := FeaturesOf(tc.version)
			if f.LowCardinality != tc.lc || f.Codecs != tc.codecs || f.TTL != tc.ttl || f.DateTime64 != tc.d64 {
				t.Errorf("FeaturesOf(%q) = %+v", tc.version, f)
			}
		})
	}
}

// TestDDLForCurrentServers renders the DDL a current server gets: it uses
// every newer feature. (Only the server installed here runs it for real.)
func TestDDLForCurrentServers(t *testing.T) {
	d := ddl{f: FeaturesOf("24.8.1"), db: "audit", ttl: 90}
	all := ""
	for _, m := range Migrations {
		for _, q := range m.Statements(d) {
			all += q + "\n"
		}
	}
	for _, want := range []string{"LowCardinality(String)", "DateTime64(3, 'UTC')", "CODEC(Delta, ZSTD(1))", "TTL toDateTime(at) + INTERVAL 90 DAY"} {
		if !contains(all, want) {
			t.Errorf("DDL for 24.8 lacks %q", want)
		}
	}
	old := ddl{f: FeaturesOf("18.16.1"), db: "audit"}
	for _, m := range Migrations {
		for _, q := range m.Statements(old) {
			for _, bad := range []string{"LowCardinality", "DateTime64", "CODEC", "TTL"} {
				if contains(q, bad) {
					t.Errorf("DDL for 18.16 uses %s: %s", bad, q)
				}
			}
		}
	}
}

func TestRetentionNeedsTTL(t *testing.T) {
	srv := chtest.Shared(t)
	conn := srv.Conn(t)
	f, err := Detect(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Migrate(context.Background(), conn, Options{Database: srv.Database(t), RetentionDays: 30})
	if f.TTL && err != nil {
		t.Errorf("retention on %s: %v", f.Version, err)
	}
	if !f.TTL && (err == nil || !errorsIs(err, ErrUnsupported)) {
		t.Errorf("retention on %s: got %v, want ErrUnsupported", f.Version, err)
	}
}

func TestInvalidDatabase(t *testing.T) {
	for _, name := range []string{"", "1abc", "a-b", "a;DROP", "x.y"} {
		if err := ValidDatabase(name); err == nil {
			t.Errorf("ValidDatabase(%q) = nil", name)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
