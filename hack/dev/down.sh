#!/usr/bin/env bash
# `make dev-down`: stops the operator and the dev cluster, removes its containers, Docker network
# and .dev/ state. Safe to run when nothing is running.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
state="$root/.dev"

pid=$(cat "$state/pids/manager.pid" 2>/dev/null || true)
if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'bin/manager'; then
	kill -TERM "$pid"
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	echo "dev-down: operator stopped"
fi
if [[ -x bin/devcluster ]]; then
	bin/devcluster down
else
	go run ./cmd/devcluster down
fi
