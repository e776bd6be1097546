#!/usr/bin/env bash
# Installs promtool (Debian's prometheus package) for the test that checks
# the alerting rules in deploy/prometheus (promtool check rules, promtool
# test rules). Idempotent: does nothing when promtool is on the PATH. Needs
# root (or sudo) and apt.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps: promtool is missing and installing it (Debian's prometheus package) needs root" >&2; exit 1; }
  sudo="sudo"
fi
echo "deps: installing promtool (Debian's prometheus package) with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# The package ships a Prometheus server too; its service is not used by the
# tests (without systemd it does not start at all).
$sudo apt-get install -y -qq --no-install-recommends prometheus >&2
command -v promtool >/dev/null 2>&1 || { echo "deps: the prometheus package is installed but promtool is not on the PATH" >&2; exit 1; }
