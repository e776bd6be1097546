#!/usr/bin/env bash
# make run: the whole mcpdrift pipeline on this machine (bin/stack): an
# embedded NATS server with JetStream under .data/run, the fingerprint, drift
# and audit services, the admin API, and a proxy in front of a sample MCP
# server. Ctrl-C stops it all; the next run resumes with the same state.
#
# ClickHouse (for the audit service): MCPDRIFT_CLICKHOUSE_ADDR when set;
# otherwise a local server started by scripts/clickhouse.sh (which installs
# Debian's clickhouse-server when it is missing and it can), and stopped again
# on exit when this script started it. MCPDRIFT_RUN_CLICKHOUSE=off runs
# without one: audit events then wait in JetStream.
#
# Environment: MCPDRIFT_STACK_DIR (data directory), MCPDRIFT_STACK_BIN_DIR
# (where the commands are; default bin/), and every other setting of
# `bin/stack --help`. Arguments are passed to bin/stack.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MCPDRIFT_STACK_BIN_DIR:-bin}
ch=${MCPDRIFT_CLICKHOUSE_ADDR:-}
started_ch=
if [ -z "$ch" ] && [ "${MCPDRIFT_RUN_CLICKHOUSE:-auto}" != off ]; then
  if scripts/clickhouse.sh status >/dev/null 2>&1; then
    ch=127.0.0.1:${CLICKHOUSE_PORT:-9000}
  elif scripts/clickhouse.sh start; then
    ch=127.0.0.1:${CLICKHOUSE_PORT:-9000}
    started_ch=1
  else
    echo "run: no local ClickHouse could be started (see above); running without the audit service" >&2
  fi
fi
if [ -n "$started_ch" ]; then
  trap 'scripts/clickhouse.sh stop' EXIT
fi
status=0
"$bin/stack" ${ch:+--clickhouse-addr "$ch"} "$@" || status=$?
exit "$status"
