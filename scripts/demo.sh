#!/usr/bin/env bash
# make demo: a scripted rug pull against the stack that make run started
# (bin/stack demo): verified, the sample server changes, changed, tools
# withheld and a call refused, the diff, approve, verified again, and the
# audit rows of all of it read back from ClickHouse.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${MCPDRIFT_STACK_BIN_DIR:-bin}/stack" demo "$@"
