#!/usr/bin/env bash
# `make dev`: a local Kubernetes with the operator and an example Valkey cluster, in one command.
#
#  1. builds what is missing: control-plane binaries, the Valkey images, bin/devcluster, bin/manager
#  2. starts the dev cluster in the background (bin/devcluster up: etcd, kube-apiserver,
#     kube-scheduler, kube-controller-manager and 6 virtual-kubelet nodes over 3 zones whose pods
#     run as Docker containers); all state, pids and logs under .dev/
#  3. installs the CRDs, starts the operator (logs: .dev/logs/manager.log), applies examples/
#  4. shows progress until every ValkeyCluster is Active, then how to reach it
#
# Idempotent: run it again to finish or refresh a partly running setup. `make dev-down` undoes it.
# Env: VALKEY_IMAGE, VALKEY9_IMAGE, DEV_TIMEOUT (seconds to wait for Active, default 180),
#      DEV_EXAMPLES (files to apply, default: examples/valkeyimage.yaml examples/valkeyconfig.yaml
#      examples/valkeycluster.yaml), MANAGER_ARGS (extra operator flags).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
state="$root/.dev"
export VALKEY_IMAGE="${VALKEY_IMAGE:-valkey-operator/valkey:8.0}"
export VALKEY9_IMAGE="${VALKEY9_IMAGE:-valkey-operator/valkey:9.1}"
timeout_s="${DEV_TIMEOUT:-180}"
examples="${DEV_EXAMPLES:-examples/valkeyimage.yaml examples/valkeyconfig.yaml examples/valkeycluster.yaml}"
say() { printf '\033[1mdev:\033[0m %s\n' "$*"; }
# since START_NS: seconds elapsed, one decimal
since() { local d=$(( ($(date +%s%N) - $1) / 100000000 )); printf '%d.%d' $((d / 10)) $((d % 10)); }

# 1. Build what is missing.
hack/build-controlplane.sh
if ! docker image inspect "$VALKEY_IMAGE" >/dev/null 2>&1; then
	say "building Valkey images"
	hack/valkey-image/build.sh
fi
say "building bin/devcluster and bin/manager"
go build -o bin/devcluster ./cmd/devcluster
manager_ok=1
if ! go build -o bin/manager ./cmd/manager; then
	manager_ok=0
	say "WARNING: cmd/manager does not build; continuing without the operator"
fi

# 2. The cluster.
kubeconfig=$(bin/devcluster up --quiet)
export KUBECONFIG="$kubeconfig"
say "cluster up; KUBECONFIG=$KUBECONFIG"
kubectl get nodes -L topology.kubernetes.io/zone

# 3. CRDs, operator, examples.
kubectl apply -f crds/ >/dev/null
kubectl wait --for condition=established --timeout=60s crd --all >/dev/null
say "CRDs installed: $(kubectl get crd -o name | tr '\n' ' ')"

mkdir -p "$state/logs" "$state/pids"
manager_running() {
	local pid
	pid=$(cat "$state/pids/manager.pid" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'bin/manager'
}
# A rebuilt operator replaces the running one.
manager_sum=$(sha256sum bin/manager 2>/dev/null | cut -d' ' -f1 || true)
if [[ $manager_ok == 1 ]] && manager_running && [[ $manager_sum != "$(cat "$state/pids/manager.sum" 2>/dev/null)" ]]; then
	say "operator binary changed: restarting it"
	kill -TERM "$(cat "$state/pids/manager.pid")" || true
	for _ in $(seq 100); do manager_running || break; sleep 0.1; done
fi
if [[ $manager_ok == 1 ]] && ! manager_running; then
	# The operator runs on the host; pod addresses on the dev network are reachable from here.
	# shellcheck disable=SC2086
	setsid bin/manager --namespace=default --leader-elect=false \
		--metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081 \
		${MANAGER_ARGS:-} >>"$state/logs/manager.log" 2>&1 </dev/null &
	echo $! >"$state/pids/manager.pid"
	echo "$manager_sum" >"$state/pids/manager.sum"
	sleep 1
	if ! manager_running; then
		manager_ok=0
		say "WARNING: the operator exited at start; last log lines:"
		tail -n 20 "$state/logs/manager.log" || true
	else
		say "operator running (pid $(cat "$state/pids/manager.pid"), log .dev/logs/manager.log)"
	fi
fi

applied=$(date +%s%N)
# shellcheck disable=SC2086
kubectl apply $(for f in $examples; do printf -- '-f %s ' "$f"; done)

# 4. Progress until Active.
if [[ $manager_ok != 1 ]]; then
	say "operator not running: the ValkeyClusters stay as they are. See .dev/logs/manager.log"
	kubectl get valkeyclusters,valkeynodes -A
	exit 1
fi
deadline=$(( $(date +%s) + timeout_s ))
last=""
while :; do
	states=$(kubectl get valkeyclusters -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}={.status.state}{" "}{end}')
	nodes=$(kubectl get valkeynodes -A --no-headers 2>/dev/null | wc -l)
	pods=$(kubectl get pods -A --no-headers 2>/dev/null | awk '$3 ~ /1\/1/' | wc -l)
	line="clusters: ${states:-none} | valkeynodes: $nodes | ready pods: $pods"
	if [[ $line != "$last" ]]; then
		printf '  [%6ss] %s\n' "$(since "$applied")" "$line"
		last=$line
	fi
	if [[ -n $states ]] && ! grep -qv '=Active$' <<<"$(tr ' ' '\n' <<<"$states" | sed '/^$/d')"; then
		break
	fi
	progressed=1
	if (( $(date +%s) > deadline )); then
		say "not Active after ${timeout_s}s; operator log tail:"
		tail -n 30 "$state/logs/manager.log" || true
		kubectl get valkeyclusters,valkeynodes,pods -A
		exit 1
	fi
	sleep 0.5
done
if [[ -z ${progressed:-} ]]; then
	say "already Active"
else
	say "Active $(since "$applied")s after kubectl apply"
fi

kubectl get valkeyclusters,valkeynodes -A
cluster=$(kubectl get valkeyclusters -o jsonpath='{.items[0].metadata.name}')
ip=$(kubectl get pods -l "app.kubernetes.io/instance=$cluster" -o jsonpath='{.items[0].status.podIP}' 2>/dev/null || true)
[[ -n $ip ]] || ip=$(kubectl get valkeynodes -o jsonpath='{.items[0].status.podIP}')
cat <<MSG

Reach it:
  export KUBECONFIG=$KUBECONFIG
  kubectl get valkeyclusters,valkeynodes,pods -o wide
  PASS=\$(kubectl get secret $cluster-auth -o jsonpath='{.data.password}' | base64 -d)
  valkey-cli -c -h $ip -p 6379 --user default --pass "\$PASS" cluster info     # pod IPs are reachable from this host
  kubectl exec -it \$(kubectl get pods -o name | head -1) -- valkey-cli -c -h $ip --user default --pass "\$PASS" ping
  kubectl logs \$(kubectl get pods -o name | head -1)
Logs: .dev/logs/ (operator: manager.log). Stop everything: make dev-down
MSG
