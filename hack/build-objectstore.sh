#!/usr/bin/env bash
# Builds SeaweedFS's weed binary, the dev cluster's S3-compatible object store, from its Go
# module (pinned in hack/objectstore/go.mod) into bin/objectstore/weed. No prebuilt binary
# can be downloaded here. A stamp holding the hash of the module's inputs makes a warm run a
# no-op; the Go build cache makes a rebuild after a version bump cheaper.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/hack/objectstore"
out="$root/bin/objectstore"

want=$( (cd "$src" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs sha256sum; go version) | sha256sum | cut -d' ' -f1)
have=$(cat "$out/.stamp" 2>/dev/null || true)
if [ -x "$out/weed" ] && [ "$want" = "$have" ]; then
  echo "objectstore: up to date in bin/objectstore"
  exit 0
fi

mkdir -p "$out"
start=$(date +%s)
echo "objectstore: building weed"
# The server's main package is named as a tool in go.mod, so the module's own go.sum pins
# every dependency of the build.
(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/weed" github.com/seaweedfs/seaweedfs/weed)
echo "$want" > "$out/.stamp"
echo "objectstore: built in $(( $(date +%s) - start ))s"
