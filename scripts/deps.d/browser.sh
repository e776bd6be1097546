#!/usr/bin/env bash
# Installs the browser the review console's end-to-end test drives
# (services/drift/internal/console, browser_test.go): Debian's chromium
# (apt-get, as root) and playwright-core from npm at the version pinned in
# scripts/browser/package-lock.json, into .data/browser (ignored by git).
# playwright-core downloads no browser: the test points it at
# /usr/bin/chromium.
#
# Idempotent: does nothing when chromium is installed and the stamp file
# holds the hash of the lockfile and node's major version it was installed
# from.
#
# Environment:
#   MCPDRIFT_BROWSER_DIR  where to install playwright-core (default:
#                         .data/browser); the test reads the same variable.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/scripts/browser
dest=${MCPDRIFT_BROWSER_DIR:-$root/.data/browser}
stamp=$dest/.installed

log() { printf 'browser: %s\n' "$*" >&2; }

if ! [ -x /usr/bin/chromium ]; then
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || { log "chromium is missing and installing it needs root: apt-get install chromium"; exit 1; }
		sudo="sudo"
	fi
	log "installing chromium with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends chromium >&2
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	log "node and npm are needed (node 20 or later); install them, e.g. apt-get install nodejs npm"
	exit 1
fi
want="$(sha256sum "$src/package-lock.json" "$src/package.json" | cut -d' ' -f1 | tr '\n' ' ')node-$(node -p 'process.versions.node.split(".")[0]')"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d "$dest/node_modules/playwright-core" ]]; then
	exit 0
fi
log "installing playwright-core into $dest"
rm -rf "$dest"
mkdir -p "$dest"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
(cd "$dest" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2)
echo "$want" >"$stamp"
log "installed: playwright-core $(node -p "require('$dest/node_modules/playwright-core/package.json').version")"
