#!/usr/bin/env bash
# Installs a ClickHouse server and client (Debian's clickhouse-server and
# clickhouse-client packages) for the audit sink's tests, which start a
# private server of their own (services/internal/chtest). Idempotent: does
# nothing when both are installed. Needs root (or sudo) and apt.
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
if { have clickhouse-server && have clickhouse-client; } || have clickhouse; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps: clickhouse-server is missing and installing it needs root" >&2; exit 1; }
  sudo="sudo"
fi
echo "deps: installing clickhouse-server and clickhouse-client with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends clickhouse-server clickhouse-client >&2
# The package may start a system server on port 9000; the tests do not use it.
