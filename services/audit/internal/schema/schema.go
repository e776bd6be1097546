// Package schema is the audit sink's ClickHouse schema: the tables, the
// hourly rollups and their materialized views, written for the server's
// version, and the versioned migrations that create them at start.
//
// Every statement is CREATE ... IF NOT EXISTS, and each applied version is
// recorded in schema_migrations (a ReplacingMergeTree keyed by version), so
// running the migrations twice, or from several sink instances at once,
// changes nothing. DDL uses what the server has: LowCardinality (19.3+
// without a setting), column codecs (19.1+), TTL (19.6+) and DateTime64
// (20.1+); on older servers (Debian's 18.16) it falls back to String,
// DateTime and no codecs. docs/analytics.md documents the schema.
package schema

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/mcpdrift/mcpdrift/services/internal/coded"
)

// ErrInvalidDatabase is the sentinel (package coded) of the error for a
// database name that is not a plain identifier.
var ErrInvalidDatabase = coded.New("invalid_database", "")

// ErrUnsupported is the sentinel (package coded) of the error when an
// option needs a newer server.
var ErrUnsupported = coded.New("unsupported_by_server", "")

var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidDatabase checks a database name: a letter or _, then up to 62 of
// A-Z a-z 0-9 _, so that it is used in DDL without quoting.
func ValidDatabase(name string) error {
	if !identPattern.MatchString(name) {
		return coded.Errorf(ErrInvalidDatabase.Code, "database %q must be a letter or _ followed by up to 62 of A-Z, a-z, 0-9 and _", name)
	}
	return nil
}

// Features are what the connected server supports.
type Features struct {
	Version        string // as SELECT version() answers
	Major, Minor   int
	LowCardinality bool // without allow_experimental_low_cardinality_type
	Codecs         bool
	TTL            bool
	DateTime64     bool
}

// FeaturesOf derives the features from a version string like "18.16.1" or
// "24.8.4.13".
func FeaturesOf(version string) Features {
	f := Features{Version: version}
	parts := strings.SplitN(version, ".", 3)
	if len(parts) >= 2 {
		f.Major, _ = strconv.Atoi(parts[0])
		f.Minor, _ = strconv.Atoi(parts[1])
	}
	at := func(major, minor int) bool { return f.Major > major || (f.Major == major && f.Minor >= minor) }
	f.Codecs = at(19, 1)
	f.LowCardinality = at(19, 3)
	f.TTL = at(19, 6)
	f.DateTime64 = at(20, 1)
	return f
}

// Detect asks the server for its version.
func Detect(ctx context.Context, conn driver.Conn) (Features, error) {
	var v string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		return Features{}, fmt.Errorf("asking the server version: %w", err)
	}
	return FeaturesOf(v), nil
}

// Options shape the DDL.
type Options struct {
	// Database holds every table; it is created when missing.
	Database string
	// RetentionDays adds a TTL to the raw event tables (not the rollups);
	// 0 keeps everything. Needs TTL support (ClickHouse 19.6+). It applies
	// when a table is created; see docs/analytics.md to change it later.
	RetentionDays int
}

// Migration is one schema version: statements run in order, each
// idempotent on its own.
type Migration struct {
	Version    uint32
	Name       string
	Statements func(d ddl) []string
}

// ddl renders types and clauses for one server and database.
type ddl struct {
	f   Features
	db  string
	ttl int
}

// str is a string column, LowCardinality when the server has it and the
// column has few distinct values.
func (d ddl) str(low bool) string {
	if low && d.f.LowCardinality {
		return "LowCardinality(String)"
	}
	return "String"
}

// time is the event time column type.
func (d ddl) time() string {
	if d.f.DateTime64 {
		return "DateTime64(3, 'UTC')"
	}
	return "DateTime('UTC')"
}

// codec is a column codec clause, empty when the server has none.
func (d ddl) codec(c string) string {
	if d.f.Codecs {
		return " CODEC(" + c + ")"
	}
	return ""
}

// retention is the TTL clause of a raw table.
func (d ddl) retention() string {
	if d.ttl <= 0 {
		return ""
	}
	return fmt.Sprintf(" TTL toDateTime(at) + INTERVAL %d DAY", d.ttl)
}

// replacing is the engine of an event table: rows with the same sort key
// (the same event) collapse when parts merge; reads use FINAL or count
// distinct event ids.
func (d ddl) replacing(order string) string {
	return "ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(at) ORDER BY (" + order + ")" + d.retention()
}

// Migrations are every schema version, in order. Never edit an applied
// one: add a version.
var Migrations = []Migration{
	{Version: 1, Name: "event tables and hourly rollups", Statements: func(d ddl) []string {
		db, lc, s := d.db, d.str(true), d.str(false)
		common := "event_id String, at " + d.time() + ", at_ms Int64" + d.codec("Delta, ZSTD(1)") + ", "
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + db + `.list_observations (` + common +
				`tenant ` + lc + `, server ` + lc + `, variant ` + lc + `, proxy ` + lc +
				`, capture_bytes UInt32, capture_sha256 ` + s + `, stream_seq UInt64) ` +
				d.replacing("tenant, server, event_id"),
			`CREATE TABLE IF NOT EXISTS ` + db + `.call_observations (` + common +
				`tenant ` + lc + `, server ` + lc + `, proxy ` + lc + `, tool ` + lc + `, outcome ` + lc +
				`, refusal_code ` + lc + `, latency_us Int64, arguments_digest ` + s +
				`, arguments ` + s + d.codec("ZSTD(3)") + `, stream_seq UInt64) ` +
				d.replacing("tenant, server, event_id"),
			`CREATE TABLE IF NOT EXISTS ` + db + `.verdicts (` + common +
				`tenant ` + lc + `, server ` + lc + `, variant ` + lc + `, status ` + lc + `, previous_status ` + lc +
				`, serve UInt8, posture ` + lc + `, on_drift ` + lc + `, baseline_version Int64, baseline_hash ` + s +
				`, live_hash ` + s + `, severity ` + lc + `, benign UInt8, reason_code ` + lc + `, reason ` + s +
				`, actor ` + lc + `, stream_seq UInt64) ` +
				d.replacing("tenant, server, event_id"),
			`CREATE TABLE IF NOT EXISTS ` + db + `.admin_actions (` + common +
				`tenant ` + lc + `, server ` + lc + `, variant ` + lc + `, action ` + lc + `, actor ` + lc +
				`, role ` + lc + `, hash ` + s + `, ok UInt8, error_code ` + lc + `, error_message ` + s +
				`, stream_seq UInt64) ` +
				d.replacing("tenant, server, event_id"),
			`CREATE TABLE IF NOT EXISTS ` + db + `.dead_letters (` + common +
				`service ` + lc + `, subject ` + s + `, stream_sequence ` + s + `, error_code ` + lc +
				`, error_message ` + s + `, stream_seq UInt64) ` +
				d.replacing("service, event_id"),
			// Hourly rollups. A materialized view sees every inserted block,
			// duplicates included, so the rollups count distinct event ids
			// (uniqExact states) and keep maxima: both are exact under
			// redelivery. Sums would not be.
			`CREATE TABLE IF NOT EXISTS ` + db + `.calls_hourly (hour DateTime('UTC'), tenant ` + lc +
				`, server ` + lc + `, tool ` + lc + `, outcome ` + lc + `, refusal_code ` + lc +
				`, calls AggregateFunction(uniqExact, String), max_latency_us AggregateFunction(max, Int64)) ` +
				`ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(hour) ORDER BY (tenant, server, tool, outcome, refusal_code, hour)`,
			`CREATE MATERIALIZED VIEW IF NOT EXISTS ` + db + `.calls_hourly_mv TO ` + db + `.calls_hourly AS ` +
				`SELECT toStartOfHour(toDateTime(at)) AS hour, tenant, server, tool, outcome, refusal_code, ` +
				`uniqExactState(event_id) AS calls, maxState(latency_us) AS max_latency_us ` +
				`FROM ` + db + `.call_observations GROUP BY hour, tenant, server, tool, outcome, refusal_code`,
			`CREATE TABLE IF NOT EXISTS ` + db + `.verdicts_hourly (hour DateTime('UTC'), tenant ` + lc +
				`, server ` + lc + `, status ` + lc + `, reason_code ` + lc +
				`, verdicts AggregateFunction(uniqExact, String)) ` +
				`ENGINE = AggregatingMergeTree PARTITION BY toYYYYMM(hour) ORDER BY (tenant, server, status, reason_code, hour)`,
			`CREATE MATERIALIZED VIEW IF NOT EXISTS ` + db + `.verdicts_hourly_mv TO ` + db + `.verdicts_hourly AS ` +
				`SELECT toStartOfHour(toDateTime(at)) AS hour, tenant, server, status, reason_code, ` +
				`uniqExactState(event_id) AS verdicts ` +
				`FROM ` + db + `.verdicts GROUP BY hour, tenant, server, status, reason_code`,
		}
	}},
	{Version: 2, Name: "alert_code of calls forwarded under the alert posture", Statements: func(d ddl) []string {
		return []string{
			`ALTER TABLE ` + d.db + `.call_observations ADD COLUMN alert_code ` + d.str(true) + ` AFTER refusal_code`,
		}
	}},
	{Version: 3, Name: "the per-call policy's decision, shadow match and approval of each call, and its agent", Statements: func(d ddl) []string {
		// One column per statement, each after the one before: ClickHouse
		// 18.16 takes that form (without IF NOT EXISTS: exec passes over a
		// column that exists), and a re-run after a partial failure adds
		// only what is missing.
		var out []string
		after := "alert_code"
		for _, c := range []struct {
			name string
			low  bool
		}{
			{"agent", true}, {"policy_rule", true}, {"policy_action", true}, {"policy_reason", false}, {"risk_mode", true},
			{"shadow_rule", true}, {"shadow_action", true}, {"approval_id", false}, {"approval_outcome", true}, {"approval_actor", true},
		} {
			out = append(out, `ALTER TABLE `+d.db+`.call_observations ADD COLUMN `+c.name+` `+d.str(c.low)+` AFTER `+after)
			after = c.name
		}
		return out
	}},
	// The calls' agent came with version 3.
	{Version: 4, Name: "agent: the authenticated agent of listings", Statements: func(d ddl) []string {
		return []string{
			`ALTER TABLE ` + d.db + `.list_observations ADD COLUMN agent ` + d.str(true) + ` AFTER proxy`,
		}
	}},
	{Version: 5, Name: "compact listings: the session, surface hash and form of each listing", Statements: func(d ddl) []string {
		// One column per statement, as version 3 (ClickHouse 18.16). A
		// compact listing (ListingSeen) has no capture: capture_bytes 0,
		// capture_sha256 "", compact 1, and the surface hash the pipeline
		// confirmed; a whole one names the hash its proxy computed.
		return []string{
			`ALTER TABLE ` + d.db + `.list_observations ADD COLUMN session ` + d.str(false) + ` AFTER agent`,
			`ALTER TABLE ` + d.db + `.list_observations ADD COLUMN surface_hash ` + d.str(false) + ` AFTER session`,
			`ALTER TABLE ` + d.db + `.list_observations ADD COLUMN compact UInt8 AFTER surface_hash`,
		}
	}},
}

// Result says what Migrate did.
type Result struct {
	Features Features
	// Applied lists the versions this run applied; empty when the schema
	// was already current.
	Applied []uint32
}

// Migrate creates the database and the migrations table, and applies every
// migration not recorded yet. Safe to run again and concurrently.
func Migrate(ctx context.Context, conn driver.Conn, opts Options) (Result, error) {
	if err := ValidDatabase(opts.Database); err != nil {
		return Result{}, err
	}
	if opts.RetentionDays < 0 {
		return Result{}, fmt.Errorf("retention days %d: must not be negative", opts.RetentionDays)
	}
	f, err := Detect(ctx, conn)
	if err != nil {
		return Result{}, err
	}
	if opts.RetentionDays > 0 && !f.TTL {
		return Result{Features: f}, coded.Errorf(ErrUnsupported.Code, "a retention (TTL) needs ClickHouse 19.6 or later; this server is %s", f.Version)
	}
	d := ddl{f: f, db: opts.Database, ttl: opts.RetentionDays}
	db := opts.Database
	for _, q := range boot(db) {
		if err := exec(ctx, conn, q); err != nil {
			return Result{Features: f}, err
		}
	}
	done, err := appliedVersions(ctx, conn, db)
	if err != nil {
		return Result{Features: f}, err
	}
	res := Result{Features: f}
	for _, m := range Migrations {
		if done[m.Version] {
			continue
		}
		for _, q := range m.Statements(d) {
			if err := exec(ctx, conn, q); err != nil {
				return res, fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
		}
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".schema_migrations (version, name, server_version, applied_at)")
		if err == nil {
			err = batch.Append(m.Version, m.Name, f.Version, time.Now().UTC())
			if err == nil {
				err = batch.Send()
			} else {
				_ = batch.Abort()
			}
		}
		if err != nil {
			return res, fmt.Errorf("recording migration %d: %w", m.Version, err)
		}
		res.Applied = append(res.Applied, m.Version)
	}
	return res, nil
}

// boot are the statements that make the database and the migrations table.
func boot(db string) []string {
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + db,
		`CREATE TABLE IF NOT EXISTS ` + db + `.schema_migrations (version UInt32, name String, ` +
			`server_version String, applied_at DateTime('UTC')) ENGINE = ReplacingMergeTree ORDER BY version`,
	}
}

// Statements returns every statement Migrate runs on a server with the
// features f, in order (the database and migrations table, then each
// migration's), without running any: for running the DDL of a server
// version elsewhere (the tests run the current one in chDB).
func Statements(f Features, opts Options) ([]string, error) {
	if err := ValidDatabase(opts.Database); err != nil {
		return nil, err
	}
	if opts.RetentionDays < 0 || (opts.RetentionDays > 0 && !f.TTL) {
		return nil, fmt.Errorf("retention days %d on ClickHouse %s: want 0, or a server with TTL", opts.RetentionDays, f.Version)
	}
	d := ddl{f: f, db: opts.Database, ttl: opts.RetentionDays}
	out := boot(opts.Database)
	for _, m := range Migrations {
		out = append(out, m.Statements(d)...)
	}
	return out, nil
}

// Applied returns the versions recorded in schema_migrations.
func Applied(ctx context.Context, conn driver.Conn, db string) ([]uint32, error) {
	if err := ValidDatabase(db); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT version FROM "+db+".schema_migrations FINAL ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("reading schema_migrations: %w", err)
	}
	defer rows.Close()
	var out []uint32
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func appliedVersions(ctx context.Context, conn driver.Conn, db string) (map[uint32]bool, error) {
	vs, err := Applied(ctx, conn, db)
	if err != nil {
		return nil, err
	}
	m := make(map[uint32]bool, len(vs))
	for _, v := range vs {
		m[v] = true
	}
	return m, nil
}

// exec runs one idempotent statement. Two instances creating the same
// object at the same moment can both pass the IF NOT EXISTS check; the
// loser's "already exists" is success.
func exec(ctx context.Context, conn driver.Conn, q string) error {
	err := conn.Exec(ctx, q)
	var ex *clickhouse.Exception
	// TABLE_ALREADY_EXISTS, DATABASE_ALREADY_EXISTS, and a column that
	// exists (ILLEGAL_COLUMN: ADD COLUMN has no IF NOT EXISTS before 19.x):
	// a concurrent migrator, or tables created from deploy/clickhouse.
	if errors.As(err, &ex) && (ex.Code == 57 || ex.Code == 82 || ex.Code == 44) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("running %.80q: %w", q, err)
	}
	return nil
}

// Tables are the event tables the sink writes, for tests and tools.
var Tables = []string{"list_observations", "call_observations", "verdicts", "admin_actions", "dead_letters"}
