#!/usr/bin/env bash
# make diff-releases: fingerprint two published releases of the
# reference filesystem server (captured from npm into the test fixtures) and show
# the classified drift between them.
set -euo pipefail
cd "$(dirname "$0")/.."
fx=services/internal/surface/testdata/real/filesystem
old=${OLD:-$fx/2026.1.14.json}
new=${NEW:-$fx/2026.8.31.json}
echo "== fingerprint of $old"
bin/driftctl fingerprint "$old"
echo "== fingerprint of $new"
bin/driftctl fingerprint "$new"
echo "== what changed (driftctl diff; exit status 1 means drift)"
set +e
bin/driftctl diff "$old" "$new"
status=$?
set -e
echo "== driftctl diff exited $status"
[ "$status" -le 1 ]
