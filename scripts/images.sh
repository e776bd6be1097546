#!/usr/bin/env bash
# Builds the mcpdrift container image, or, where no container engine runs,
# the very same static binaries the image would hold.
#
#   scripts/images.sh                # the image with docker or podman; without one, the binaries into .data/static
#   scripts/images.sh binaries DIR   # only the static binaries, into DIR (what the Dockerfile's build stage runs)
#   scripts/images.sh check DIR      # check that every binary in DIR is a statically linked ELF
#
# Environment: IMAGE (default mcpdrift), TAG (default: git describe, or dev),
# ENGINE (docker or podman; default: the first of them that answers),
# GOOS and GOARCH (cross-compile the binaries).
#
# The build flags live here and only here: deploy/docker/Dockerfile calls
# "scripts/images.sh binaries /out", so the image and the binaries built
# without an engine come from the same command.
set -euo pipefail
cd "$(dirname "$0")/.."

# The commands, as packages under services/; each becomes a binary of its name.
COMMANDS=(proxy fingerprint drift audit notify driftctl)
# And probe (deploy/docker/probe, a module of its own): the HTTP health check
# that compose runs inside the shell-less image.
TOOLS=(probe)

binaries() {
  local out=$1
  mkdir -p "$out"
  local pkgs=()
  for c in "${COMMANDS[@]}"; do pkgs+=("./services/$c"); done
  # Static (no cgo: the net and os/user packages use their pure-Go code),
  # without build paths, without symbol tables and DWARF.
  local flags=(-trimpath -ldflags "-s -w")
  CGO_ENABLED=0 go build "${flags[@]}" -o "$out/" "${pkgs[@]}"
  out=$(cd "$out" && pwd)
  (cd deploy/docker/probe && CGO_ENABLED=0 GOWORK=off go build "${flags[@]}" -o "$out/probe" .)
  echo "images: built ${COMMANDS[*]} ${TOOLS[*]} into $out (CGO_ENABLED=0, -trimpath, -ldflags \"-s -w\")"
}

# check: an ELF with no program interpreter (PT_INTERP) is statically linked.
check() {
  local dir=$1 bad=0 how
  for c in "${COMMANDS[@]}" "${TOOLS[@]}"; do
    local f="$dir/$c"
    if [ ! -x "$f" ]; then echo "images: $f is missing" >&2; bad=1; continue; fi
    if command -v readelf >/dev/null 2>&1; then
      how=readelf
      if readelf -lW "$f" | grep -q 'INTERP'; then echo "images: $f has a program interpreter: not static" >&2; bad=1; fi
    elif command -v file >/dev/null 2>&1; then
      how=file
      if ! file -b "$f" | grep -q 'statically linked'; then echo "images: $f: $(file -b "$f")" >&2; bad=1; fi
    else
      echo "images: neither readelf nor file is installed: cannot check $f (services/e2e TestStaticBinaries checks it with debug/elf)" >&2
      return 1
    fi
  done
  [ "$bad" = 0 ] || return 1
  echo "images: every binary in $dir is a statically linked ELF (checked with $how)"
  ls -l "$dir" | awk 'NR > 1 {printf "  %-12s %6.1f MiB\n", $9, $5 / 1048576}'
}

engine() {
  local candidates=(docker podman)
  [ -n "${ENGINE:-}" ] && candidates=("$ENGINE")
  for e in "${candidates[@]}"; do
    command -v "$e" >/dev/null 2>&1 || continue
    if "$e" info >/dev/null 2>&1; then echo "$e"; return 0; fi
    echo "images: $e is installed but does not answer ($e info fails: no daemon or no access)" >&2
  done
  return 1
}

case "${1:-image}" in
binaries)
  [ $# -eq 2 ] || { echo "usage: scripts/images.sh binaries DIR" >&2; exit 2; }
  binaries "$2"
  ;;
check)
  [ $# -eq 2 ] || { echo "usage: scripts/images.sh check DIR" >&2; exit 2; }
  check "$2"
  ;;
image)
  image=${IMAGE:-mcpdrift}
  tag=${TAG:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
  if e=$(engine); then
    "$e" build -f deploy/docker/Dockerfile -t "$image:$tag" .
    echo "images: built $image:$tag with $e (binaries in /usr/local/bin: ${COMMANDS[*]})"
  else
    echo "images: no container engine answers (docker, podman): the image was NOT built."
    echo "images: building the same static binaries with the same flags instead."
    binaries .data/static
    check .data/static
    echo "images: to build the image, run this script where docker or podman runs, or: docker build -f deploy/docker/Dockerfile -t $image:$tag ."
  fi
  ;;
*)
  echo "usage: scripts/images.sh [image | binaries DIR | check DIR]" >&2
  exit 2
  ;;
esac
