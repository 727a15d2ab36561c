#!/usr/bin/env bash
# Installs valkey-cli (Debian package valkey-tools 8.0.x from bookworm-backports) on the host; the
# benchmark and the e2e checks use it. Idempotent: does nothing when valkey-cli is already there.
set -euo pipefail

if command -v valkey-cli >/dev/null 2>&1; then
	echo "install-tools: $(valkey-cli --version) present, skipping" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
list=/etc/apt/sources.list.d/backports.list
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
	echo "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm-backports main" >"$list"
fi
apt-get update -qq
apt-get install -y -qq -t bookworm-backports valkey-tools >/dev/null
echo "install-tools: installed $(valkey-cli --version)" >&2
