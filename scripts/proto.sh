#!/usr/bin/env bash
# Regenerates the Go code of the bus contract from proto/mcpdrift/v1/*.proto.
#   scripts/proto.sh          write proto/mcpdriftv1/*.pb.go
#   scripts/proto.sh --check  fail if the committed code is out of date
# Installs what it needs when missing: protoc from Debian's protobuf-compiler
# (3.21.12 on bookworm), and protoc-gen-go at the version pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO_VERSION=v1.36.12
bin="$PWD/.data/bin"
mkdir -p "$bin"
if ! command -v protoc >/dev/null; then
  echo "proto: installing protoc (apt-get install protobuf-compiler)" >&2
  { apt-get update -qq && apt-get install -y -qq protobuf-compiler; } >/dev/null
fi
if [ ! -x "$bin/protoc-gen-go" ] || [ "$("$bin/protoc-gen-go" --version)" != "protoc-gen-go $PROTOC_GEN_GO_VERSION" ]; then
  echo "proto: installing protoc-gen-go $PROTOC_GEN_GO_VERSION" >&2
  GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
fi
out=proto
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
PATH="$bin:$PATH" protoc -I proto --go_out="$out" --go_opt=module=github.com/mcpdrift/mcpdrift/proto proto/mcpdrift/v1/*.proto
if [ "${1:-}" = "--check" ]; then
  if ! diff -ru -x doc.go proto/mcpdriftv1 "$out/mcpdriftv1"; then
    echo "proto: generated code is out of date; run make proto and commit the result" >&2
    exit 1
  fi
  echo "proto: generated code is up to date"
fi
