#!/usr/bin/env bash
# make scale: the scale simulation of docs/scale.md. Builds the services and
# the harness, then runs services/proxy/fleetscale on a 3-node NATS cluster
# from deploy/nats/cluster, writing results.json, results.csv and the PNG
# plots into docs/scale (or $SCALE_OUT). Extra arguments go to the harness
# (go run ./services/proxy/fleetscale --help lists them), e.g.
#   scripts/scale.sh --sizes 200x10 --rates 100 --duration 10s --recovery -1
# (--sites N: leaf nodes in the topology, default 10; --sites 0: none.)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
if ! .data/bin/nats-server --version >/dev/null 2>&1; then
  bash scripts/deps.d/nats-server.sh
fi
mkdir -p bin
$GO build -o bin/ ./services/fingerprint ./services/drift ./services/audit ./services/proxy/fleetscale
# The fleet holds an outbox slot lock per gate and a connection per proxy,
# the leaf nodes a connection per proxy: raise the open-file limit as far as
# allowed (the harness raises it further, hard limit included, when it runs
# as root, and says so when it cannot).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec bin/fleetscale --out "${SCALE_OUT:-docs/scale}" "$@"
