#!/usr/bin/env bash
# Starts only the dev cluster (no operator, no examples) and prints the kubeconfig path.
# For e2e runs against a long-lived cluster: DEVCLUSTER_REUSE=1 go test -tags e2e ./e2e/...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
hack/build-controlplane.sh >&2
hack/build-objectstore.sh >&2
go build -o bin/devcluster ./cmd/devcluster
exec bin/devcluster up "$@"
