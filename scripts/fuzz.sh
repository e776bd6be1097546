#!/usr/bin/env bash
# Runs every Fuzz target in the services module for the given time each.
set -euo pipefail
cd "$(dirname "$0")/../services"
t=${1:-30s}
for pkg in $(go list ./...); do
  for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "== $pkg $f ($t)"
    go test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$t"
  done
done
