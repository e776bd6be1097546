#!/usr/bin/env bash
# Captures published versions of the MCP reference servers, of
# chrome-devtools-mcp and of @playwright/mcp, with `driftctl capture`, as real-world fixtures for the
# fingerprint engine and the classified diff:
#
#   services/internal/surface/testdata/real/<server>/<version>.json
#   services/internal/surface/testdata/real/README.md
#
# Each version is installed with npm under .data/npm/ (ignored by git) and
# started with node on the package's bin entry, so capturing needs no
# network. Each version is captured twice; a version whose two captures
# differ, or that fails to start or answer, is reported and skipped, and the
# script exits 1 after trying the rest. Fixtures are never edited. The
# directory is replaced as a whole at the end, so it always holds one run.
#
# Usage: scripts/capture-fixtures.sh
# Environment:
#   DRIFTCTL      command that runs driftctl, from services/ (default: go run ./driftctl)
#   MCPDRIFT_NPM  where packages are installed (default: .data/npm)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
npm_dir=${MCPDRIFT_NPM:-$root/.data/npm}
out_dir=$root/services/internal/surface/testdata/real
read -r -a driftctl <<<"${DRIFTCTL:-go run ./driftctl}"

# npm resolves the servers' dependency ranges (notably the MCP SDK, which
# generates much of what a server advertises) as of this instant, so a rerun
# installs the same trees the committed fixtures came from. Move it forward
# deliberately, and recapture everything when you do.
npm_before=2026-11-22T15:00:00Z

# filesystem needs an allowed directory; a fixed one keeps output stable.
fs_root=/tmp/mcpdrift-fs-fixture

versions_memory="0.6.2 2025.4.25 2025.8.4 2025.9.25 2025.11.25 2026.1.26 2026.8.31"
versions_filesystem="0.6.2 2025.1.14 2025.3.28 2025.7.1 2025.8.21 2025.11.25 2026.1.14 2026.8.31"
versions_everything="0.6.2 2025.3.19 2025.7.1 2025.9.25 2025.11.25 2026.1.26 2026.8.31"
# Every 1.x release. 1.10.0 shipped without one of its dependencies and
# cannot start; it is listed so that the README says so.
versions_chrome_devtools="1.0.1 1.1.0 1.1.1 1.2.0 1.3.0 1.4.0 1.5.0 1.6.0 1.7.0 1.8.0 1.9.0 1.10.0 1.10.1 1.11.0"
# The last fourteen releases.
versions_playwright="0.0.70 0.0.71 0.0.72 0.0.73 0.0.74 0.0.75 0.0.76 0.0.77 0.0.78 0.0.79 0.0.80 0.0.81 0.0.82 0.0.83"

# pkg SERVER: the npm package of a server.
pkg() {
	case $1 in
	chrome-devtools) echo chrome-devtools-mcp ;;
	playwright) echo @playwright/mcp ;;
	*) echo "@modelcontextprotocol/server-$1" ;;
	esac
}

log() { printf 'capture-fixtures: %s\n' "$*" >&2; }

# skip SERVER VERSION REASON: records a version that yields no fixture.
skip() {
	log "skipping $1@$2: $3"
	skipped+=("- \`$(pkg "$1")@$2\`: $3")
	failed=1
}

# install_pkg SERVER VERSION: installs the package once per npm_before into
# its own directory and prints that directory.
install_pkg() {
	local pkg dir=$npm_dir/$1/$2
	pkg=$(pkg "$1")
	if [[ "$(cat "$dir/.installed-before" 2>/dev/null)" != "$npm_before" ]]; then
		rm -rf "$dir"
		mkdir -p "$dir"
		echo '{"private":true}' >"$dir/package.json"
		(cd "$dir" && npm install --no-audit --no-fund --loglevel=error --save-exact \
			--before="$npm_before" "$pkg@$2" >&2) || return 1
		echo "$npm_before" >"$dir/.installed-before"
	fi
	echo "$dir"
}

# server_args SERVER BIN: the arguments after the bin entry.
server_args() {
	case $1 in
	filesystem) echo "$fs_root" ;;
	# Versions that choose a transport from argv default to stdio; say so.
	everything) if grep -q 'process.argv' "$2"; then echo stdio; fi ;;
	# It starts no browser until a tool is called; keep it from reporting usage.
	chrome-devtools) echo --no-usage-statistics ;;
	esac
}

# json_get FILE EXPR: evaluates a JavaScript expression over the parsed file `d`.
json_get() { node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"; }

count_js='(k, item) => d[k] ? d[k].pages.reduce((n, p) => n + (p[item] || []).length, 0) + (d[k].pages.length > 1 ? " (" + d[k].pages.length + " pages)" : "") : "-"'

# Fail once, up front, rather than once per version if driftctl does not build.
if [[ -z "${DRIFTCTL:-}" ]]; then
	(cd "$root/services" && go build -o /dev/null ./driftctl)
fi

mkdir -p "$fs_root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/real
mkdir -p "$stage"
unset MEMORY_FILE_PATH NODE_OPTIONS # read by the servers or node; keep captures independent of the caller
failed=0
rows=()
skipped=()

for server in memory filesystem everything chrome-devtools playwright; do
	versions_var=versions_${server//-/_}
	for version in ${!versions_var}; do
		if ! dir=$(install_pkg "$server" "$version"); then
			skip "$server" "$version" "npm install failed"
			continue
		fi
		pkg_dir=$dir/node_modules/$(pkg "$server")
		bin=$pkg_dir/$(node -p 'const b = require(process.argv[1]).bin; (typeof b === "string" ? b : Object.values(b)[0]).replace(/^\.\//, "")' "$pkg_dir/package.json")
		read -r -a args <<<"$(server_args "$server" "$bin")"
		ok=1
		for run in 1 2; do
			if ! (cd "$root/services" && "${driftctl[@]}" capture -- node "$bin" "${args[@]}" >"$tmp/$run.json" 2>"$tmp/$run.err"); then
				skip "$server" "$version" "capture failed: $(grep -v '^\s*$' "$tmp/$run.err" | tail -n 1)"
				ok=0
				break
			fi
		done
		if ((ok)) && ! cmp -s "$tmp/1.json" "$tmp/2.json"; then
			cp "$tmp/1.json" "$dir/capture-1.json"
			cp "$tmp/2.json" "$dir/capture-2.json"
			skip "$server" "$version" "two captures differ; they are kept as $dir/capture-{1,2}.json"
			ok=0
		fi
		((ok)) || continue
		mkdir -p "$stage/$server"
		f=$stage/$server/$version.json
		cp "$tmp/1.json" "$f"
		# chrome-devtools-mcp and @playwright/mcp bundle the SDK rather than depend on it.
		sdk=$(node -p 'require(process.argv[1]).version' "$dir/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null || echo bundled)
		rel_bin=${bin#"$dir/node_modules/"}
		rows+=("| \`$server/$version.json\` | \`$(pkg "$server")@$version\` | $sdk | \`$(json_get "$f" 'd.initialize.protocolVersion')\` | \`driftctl capture -- node $rel_bin${args[*]:+ ${args[*]}}\` | $(json_get "$f" "($count_js)('tools', 'tools')") | $(json_get "$f" "($count_js)('prompts', 'prompts')") | $(json_get "$f" "($count_js)('resources', 'resources')") | $(json_get "$f" "($count_js)('resourceTemplates', 'resourceTemplates')") |")
		log "captured $server@$version"
	done
done

{
	cat <<EOF
# Real-world captures

What published versions of the MCP reference servers (memory, filesystem,
everything), of chrome-devtools-mcp and of @playwright/mcp advertise over stdio,
captured by \`driftctl capture\` (package \`services/internal/capture\`) with
its defaults: protocol version 2025-06-18, client capabilities \`{}\`.
Each file is the capture format: every \`result\` is the server's bytes,
unedited. Regenerate all of them with \`scripts/capture-fixtures.sh\`.

- Captured: $(date -u +%Y-%m-%d), with node $(node --version), on linux.
- Installed: \`npm install --save-exact --before=$npm_before PACKAGE@VERSION\`,
  one directory per version. Most versions depend on the MCP SDK (and some
  on zod-to-json-schema) by caret ranges, so the same server version can
  advertise differently depending on the day it is installed; \`--before\`
  pins that, and the SDK column records what was resolved ("bundled":
  chrome-devtools-mcp, and @playwright/mcp through playwright, ship the SDK
  inside their own code).
- Run: \`node\` on the package's bin entry (path below, relative to
  \`node_modules/\`), working directory \`services/\`; filesystem is given the
  allowed directory \`$fs_root\`, an empty directory the script creates;
  chrome-devtools-mcp is given \`--no-usage-statistics\` (its tools list is the
  same without it).
- Each version was captured twice and the two captures were identical bytes.
- Counts are items over all pages; "-" means the server does not advertise
  the capability, so the list was not queried.

| fixture | package | SDK | protocol | command | tools | prompts | resources | templates |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
EOF
	printf '%s\n' "${rows[@]}"
	# Versions whose captures are byte-identical: no drift between them.
	same=
	if ((${#rows[@]})); then
		same=$(cd "$stage" && sha256sum ./*/*.json | sort | awk '
			{ f = substr($2, 3); if ($1 == h) g = g ", `" f "`"; else { if (g ~ /,/) print "- " g; g = "`" f "`" } h = $1 }
			END { if (g ~ /,/) print "- " g }')
	fi
	if [[ -n "$same" ]]; then
		printf '\nByte-identical captures (no drift expected between them):\n\n%s\n' "$same"
	fi
	if ((${#skipped[@]})); then
		printf '\nNot captured:\n\n'
		printf '%s\n' "${skipped[@]}"
	fi
} >"$stage/README.md"

rm -rf "$out_dir"
mkdir -p "$(dirname "$out_dir")"
cp -r "$stage" "$out_dir"
exit "$failed"
