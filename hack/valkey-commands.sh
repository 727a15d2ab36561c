#!/usr/bin/env bash
# Writes valkeyops/model/commands/valkey-<major.minor>.txt from each local Valkey image (COMMAND on
# a throwaway server, password "commands"). Run it after adding or upgrading an image; the integration suite
# fails while a file differs from its server.
set -euo pipefail
cd "$(dirname "$0")/.."
for image in "${VALKEY_IMAGE:-valkey-operator/valkey:8.0}" "${VALKEY9_IMAGE:-valkey-operator/valkey:9.1}"; do
	id=$(docker run -d --rm "$image" valkey-server --port 6379 --requirepass commands --save "")
	trap 'docker kill "$id" >/dev/null 2>&1 || true' EXIT
	ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$id")
	version=$(docker exec "$id" valkey-server --version | sed -E 's/.*v=([0-9]+\.[0-9]+).*/\1/')
	for _ in $(seq 50); do valkey-cli -h "$ip" --no-auth-warning -a commands ping >/dev/null 2>&1 && break; sleep 0.1; done
	go run ./hack/valkey-commands -addr "$ip:6379" -out "valkeyops/model/commands/valkey-$version.txt"
	echo "valkeyops/model/commands/valkey-$version.txt from $image"
	docker kill "$id" >/dev/null
done
