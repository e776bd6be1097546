#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: each scripts/deps.d/*.sh
# (ClickHouse, the npm MCP peers, ...) is run in order and must be idempotent
# and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
for s in scripts/deps.d/*.sh; do
	[ -e "$s" ] || continue
	echo "== deps: $s" >&2
	bash "$s"
done
