#!/usr/bin/env bash
# Builds nats-server into .data/bin from its Go module, at the version
# services/go.mod requires (the one the in-process test server runs), for the
# tests that boot the deploy/nats configurations as real processes.
# Idempotent: does nothing when .data/bin/nats-server is that version.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$PWD/.data/bin"
version=$(cd services && go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
if [ -x "$bin/nats-server" ] && [ "$("$bin/nats-server" --version 2>/dev/null)" = "nats-server: $version" ]; then
  exit 0
fi
echo "deps: building nats-server $version into .data/bin" >&2
mkdir -p "$bin"
(cd services && CGO_ENABLED=0 go build -trimpath -o "$bin/nats-server.tmp" github.com/nats-io/nats-server/v2)
mv "$bin/nats-server.tmp" "$bin/nats-server"
"$bin/nats-server" --version >&2
