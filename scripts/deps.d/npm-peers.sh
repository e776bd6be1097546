#!/usr/bin/env bash
# Installs the real MCP peers the end-to-end tests run (services/e2e,
# peers_test.go): the reference servers server-everything and
# server-filesystem, the TypeScript SDK (the client the tests drive) and the
# inspector's CLI, at the versions pinned in scripts/npm-peers/package-lock.json,
# into .data/npm-peers (ignored by git) with `npm ci`.
#
# npm runs in the node scripts/deps.d/node.sh installs (.data/node, or
# MCPDRIFT_NODE) when it is there: the conformance suite and its
# dependencies require node 22 or later. The peers themselves are plain
# JavaScript; the other e2e tests run them in the machine's node (20 or
# later).
#
# Idempotent: a stamp file holds the hash of the lockfile and node's major
# version it was installed from; when both are unchanged it exits at once.
#
# Usage: scripts/deps.d/npm-peers.sh   (make deps runs it)
# Environment:
#   MCPDRIFT_NPM_PEERS  where to install (default: .data/npm-peers); the tests
#                       read the same variable.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/scripts/npm-peers
dest=${MCPDRIFT_NPM_PEERS:-$root/.data/npm-peers}
stamp=$dest/.installed

log() { printf 'npm-peers: %s\n' "$*" >&2; }

pinned_node=${MCPDRIFT_NODE:-$root/.data/node}/bin
if [[ -x "$pinned_node/node" ]]; then
	export PATH="$pinned_node:$PATH"
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "node and npm are needed (node 20 or later); install them, e.g. apt-get install nodejs npm"
	exit 1
fi
want="$(sha256sum "$src/package-lock.json" "$src/package.json" | cut -d' ' -f1 | tr '\n' ' ')node-$(node -p 'process.versions.node.split(".")[0]')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$dest/node_modules" ]]; then
	exit 0
fi

log "installing into $dest"
rm -rf "$dest"
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >&2)
echo "$want" >"$stamp"
log "installed: $(cd "$dest" && node -p 'Object.keys(require("./package.json").dependencies).map(n => n + "@" + JSON.parse(require("fs").readFileSync("node_modules/" + n + "/package.json", "utf8")).version).join(" ")')"
