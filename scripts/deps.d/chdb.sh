#!/usr/bin/env bash
# Installs chDB (the npm package chdb and its engine, @chdb/lib-linux-x64-gnu:
# a current ClickHouse, 26.x, as a library) at the versions pinned in
# scripts/chdb/package-lock.json, into .data/chdb (ignored by git). The audit
# sink's TestCurrentClickHouse (services/audit/internal/sink) runs the
# production schema (deploy/clickhouse/schema.sql), the sink's rows and every
# query of docs/analytics.md in it.
#
# `npm install` from the lockfile rather than `npm ci`: chdb names an engine
# package per platform as optional dependencies, and the ones for other
# platforms than linux-x64 are not on the registry, so a lockfile cannot list
# them and `npm ci` refuses it. The installed versions are checked against
# the pins below.
#
# Idempotent: a stamp file holds the hash of the lockfile and node's major
# version it was installed from; when both are unchanged it exits at once.
#
# Usage: scripts/deps.d/chdb.sh   (make deps runs it)
# Environment:
#   MCPDRIFT_CHDB  where to install (default: .data/chdb); the test reads the
#                  same variable.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/scripts/chdb
dest=${MCPDRIFT_CHDB:-$root/.data/chdb}
stamp=$dest/.installed

log() { printf 'chdb: %s\n' "$*" >&2; }

if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
	log "chDB is pinned for Linux x86-64 only (its engine package for $(uname -s)-$(uname -m) is not on the registry); skipped"
	exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "node and npm are needed (node 18 or later); install them, e.g. apt-get install nodejs npm"
	exit 1
fi
want="$(sha256sum "$src/package-lock.json" "$src/package.json" | cut -d' ' -f1 | tr '\n' ' ')node-$(node -p 'process.versions.node.split(".")[0]')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$dest/node_modules" ]]; then
	exit 0
fi

log "installing into $dest (about 550 MB)"
rm -rf "$dest"
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm install --no-audit --no-fund --loglevel=error >&2)
got=$(cd "$dest" && node -p 'const v = n => require("./node_modules/" + n + "/package.json").version; v("chdb") + " " + v("@chdb/lib-linux-x64-gnu")')
pinned=$(cd "$src" && node -p 'const d = require("./package.json").dependencies; d["chdb"] + " " + d["@chdb/lib-linux-x64-gnu"]')
if [[ "$got" != "$pinned" ]]; then
	log "installed chdb and engine $got, pinned $pinned"
	exit 1
fi
engine=$(cd "$dest" && node -e 'const { Session } = require("chdb"); const s = new Session(); process.stdout.write(s.query("SELECT version()", "TSV").trim()); s.close()')
echo "$want" >"$stamp"
log "installed: chdb $got, ClickHouse $engine"
