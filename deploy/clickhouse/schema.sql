-- mcpdrift audit schema for a replicated ClickHouse cluster (current
-- servers: LowCardinality, DateTime64, codecs; ClickHouse Keeper or
-- ZooKeeper). Run it once, as an administrator, before the first audit
-- sink starts:
--
--   clickhouse client --host ch-1 --user admin --password --multiquery < deploy/clickhouse/schema.sql
--
-- Every table is created ON CLUSTER '{cluster}' on every replica, with the
-- columns, sort keys and partitions the audit sink's migration 1 declares
-- (services/audit/internal/schema). The sink then applies its migrations
-- as usual: every statement is CREATE ... IF NOT EXISTS, so these tables are
-- kept, and it records version 1 in schema_migrations. A later migration
-- that adds a table needs its replicated form added here first, the same
-- way. services/e2e TestClickHouseReplicatedSchema checks that this file
-- declares exactly the service's tables and columns.
--
-- One shard, every node a replica: the sink inserts into these tables by
-- name, and ReplacingMergeTree collapses an event's copies only within a
-- shard. docs/deployment.md explains sharding (Distributed tables) and
-- retention (TTL).

CREATE DATABASE IF NOT EXISTS mcpdrift ON CLUSTER '{cluster}';

CREATE TABLE IF NOT EXISTS mcpdrift.schema_migrations ON CLUSTER '{cluster}' (
    version UInt32,
    name String,
    server_version String,
    applied_at DateTime('UTC')
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
ORDER BY version;

CREATE TABLE IF NOT EXISTS mcpdrift.list_observations ON CLUSTER '{cluster}' (
    event_id String,
    at DateTime64(3, 'UTC'),
    at_ms Int64 CODEC(Delta, ZSTD(1)),
    tenant LowCardinality(String),
    server LowCardinality(String),
    variant LowCardinality(String),
    proxy LowCardinality(String),
    agent LowCardinality(String),
    session String,
    surface_hash String,
    compact UInt8,
    capture_bytes UInt32,
    capture_sha256 String,
    stream_seq UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(at) ORDER BY (tenant, server, event_id);

CREATE TABLE IF NOT EXISTS mcpdrift.call_observations ON CLUSTER '{cluster}' (
    event_id String,
    at DateTime64(3, 'UTC'),
    at_ms Int64 CODEC(Delta, ZSTD(1)),
    tenant LowCardinality(String),
    server LowCardinality(String),
    proxy LowCardinality(String),
    tool LowCardinality(String),
    outcome LowCardinality(String),
    refusal_code LowCardinality(String),
    alert_code LowCardinality(String),
    agent LowCardinality(String),
    policy_rule LowCardinality(String),
    policy_action LowCardinality(String),
    policy_reason String,
    risk_mode LowCardinality(String),
    shadow_rule LowCardinality(String),
    shadow_action LowCardinality(String),
    approval_id String,
    approval_outcome LowCardinality(String),
    approval_actor LowCardinality(String),
    latency_us Int64,
    arguments_digest String,
    arguments String CODEC(ZSTD(3)),
    stream_seq UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(at) ORDER BY (tenant, server, event_id);

CREATE TABLE IF NOT EXISTS mcpdrift.verdicts ON CLUSTER '{cluster}' (
    event_id String,
    at DateTime64(3, 'UTC'),
    at_ms Int64 CODEC(Delta, ZSTD(1)),
    tenant LowCardinality(String),
    server LowCardinality(String),
    variant LowCardinality(String),
    status LowCardinality(String),
    previous_status LowCardinality(String),
    serve UInt8,
    posture LowCardinality(String),
    on_drift LowCardinality(String),
    baseline_version Int64,
    baseline_hash String,
    live_hash String,
    severity LowCardinality(String),
    benign UInt8,
    reason_code LowCardinality(String),
    reason String,
    actor LowCardinality(String),
    stream_seq UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(at) ORDER BY (tenant, server, event_id);

CREATE TABLE IF NOT EXISTS mcpdrift.admin_actions ON CLUSTER '{cluster}' (
    event_id String,
    at DateTime64(3, 'UTC'),
    at_ms Int64 CODEC(Delta, ZSTD(1)),
    tenant LowCardinality(String),
    server LowCardinality(String),
    variant LowCardinality(String),
    action LowCardinality(String),
    actor LowCardinality(String),
    role LowCardinality(String),
    hash String,
    ok UInt8,
    error_code LowCardinality(String),
    error_message String,
    stream_seq UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(at) ORDER BY (tenant, server, event_id);

CREATE TABLE IF NOT EXISTS mcpdrift.dead_letters ON CLUSTER '{cluster}' (
    event_id String,
    at DateTime64(3, 'UTC'),
    at_ms Int64 CODEC(Delta, ZSTD(1)),
    service LowCardinality(String),
    subject String,
    stream_sequence String,
    error_code LowCardinality(String),
    error_message String,
    stream_seq UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(at) ORDER BY (service, event_id);

-- Hourly rollups. A materialized view runs on the replica that receives the
-- insert (not on replicas that fetch the part), so every replica has the
-- view, and the rollup table is replicated like the others.
CREATE TABLE IF NOT EXISTS mcpdrift.calls_hourly ON CLUSTER '{cluster}' (
    hour DateTime('UTC'),
    tenant LowCardinality(String),
    server LowCardinality(String),
    tool LowCardinality(String),
    outcome LowCardinality(String),
    refusal_code LowCardinality(String),
    calls AggregateFunction(uniqExact, String),
    max_latency_us AggregateFunction(max, Int64)
) ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(hour) ORDER BY (tenant, server, tool, outcome, refusal_code, hour);

CREATE MATERIALIZED VIEW IF NOT EXISTS mcpdrift.calls_hourly_mv ON CLUSTER '{cluster}' TO mcpdrift.calls_hourly AS
SELECT toStartOfHour(toDateTime(at)) AS hour, tenant, server, tool, outcome, refusal_code,
       uniqExactState(event_id) AS calls, maxState(latency_us) AS max_latency_us
FROM mcpdrift.call_observations GROUP BY hour, tenant, server, tool, outcome, refusal_code;

CREATE TABLE IF NOT EXISTS mcpdrift.verdicts_hourly ON CLUSTER '{cluster}' (
    hour DateTime('UTC'),
    tenant LowCardinality(String),
    server LowCardinality(String),
    status LowCardinality(String),
    reason_code LowCardinality(String),
    verdicts AggregateFunction(uniqExact, String)
) ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')
PARTITION BY toYYYYMM(hour) ORDER BY (tenant, server, status, reason_code, hour);

CREATE MATERIALIZED VIEW IF NOT EXISTS mcpdrift.verdicts_hourly_mv ON CLUSTER '{cluster}' TO mcpdrift.verdicts_hourly AS
SELECT toStartOfHour(toDateTime(at)) AS hour, tenant, server, status, reason_code,
       uniqExactState(event_id) AS verdicts
FROM mcpdrift.verdicts GROUP BY hour, tenant, server, status, reason_code;

-- Retention: raw events expire, the hourly rollups stay. For a year, on
-- every raw table (list_observations, call_observations, verdicts,
-- admin_actions, dead_letters):
--
--   ALTER TABLE mcpdrift.call_observations ON CLUSTER '{cluster}'
--       MODIFY TTL toDateTime(at) + INTERVAL 365 DAY;
--
-- Partitions are monthly: with
--
--   ALTER TABLE mcpdrift.call_observations ON CLUSTER '{cluster}'
--       MODIFY SETTING ttl_only_drop_parts = 1;
--
-- expired parts are dropped whole instead of rewritten.
