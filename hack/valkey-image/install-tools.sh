#!/usr/bin/env bash
# Installs the host tools the benchmarks and the e2e checks use: valkey-cli (Debian package
# valkey-tools 8.0.x from bookworm-backports) and rclone (Debian's package: the S3 client of
# bench-backup's baseline, only with WITH_RCLONE=1, so that the tests install nothing they do
# not use). Idempotent: installs only what is missing.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
if command -v valkey-cli >/dev/null 2>&1; then
	echo "install-tools: $(valkey-cli --version) present, skipping" >&2
else
	list=/etc/apt/sources.list.d/backports.list
	if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		echo "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm-backports main" >"$list"
	fi
	apt-get update -qq
	apt-get install -y -qq -t bookworm-backports valkey-tools >/dev/null
	echo "install-tools: installed $(valkey-cli --version)" >&2
fi
if [[ "${WITH_RCLONE:-}" != 1 ]]; then
	:
elif command -v rclone >/dev/null 2>&1; then
	echo "install-tools: $(rclone --version | head -1) present, skipping" >&2
else
	apt-get update -qq
	apt-get install -y -qq rclone >/dev/null
	echo "install-tools: installed $(rclone --version | head -1)" >&2
fi
