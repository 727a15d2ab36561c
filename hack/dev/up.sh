#!/usr/bin/env bash
# `make dev`: a local Kubernetes with the operator and an example Valkey cluster, in one command.
#
#  1. builds what is missing: control-plane binaries, the object store, the Valkey images,
#     bin/devcluster, and the operator's image (`make image`; OPERATOR=host: only bin/manager)
#  2. starts the dev cluster in the background (bin/devcluster up: etcd, kube-apiserver,
#     kube-scheduler, kube-controller-manager and 6 virtual-kubelet nodes over 3 zones whose pods
#     run as Docker containers) and an S3-compatible object store (SeaweedFS, bin/objectstore/weed)
#     with a bucket ready, whose endpoint and keys it writes to .dev/object-store.env (mode 0600);
#     all state, pids and logs under .dev/
#  3. installs the operator as the README tells users: `kubectl apply -f crds/`, then
#     `kubectl apply -f deploy/` (its Deployment runs the local image; no registry is needed),
#     and waits until it is ready; then applies examples/
#  4. shows progress until every ValkeyCluster is Active, then how to reach it
#
# OPERATOR=host runs the operator binary on the host instead, under deploy/'s ServiceAccount
# (a token in .dev/operator.kubeconfig; log in .dev/logs/manager.log): quicker to iterate on.
# It applies deploy/ but its Deployment, and scales that to zero so that only one operator acts.
#
# Idempotent: run it again to finish or refresh a partly running setup (a rebuilt image restarts
# the operator's pods). `make dev-down` undoes it.
# Env: OPERATOR (cluster, default, or host), VALKEY_IMAGE, VALKEY9_IMAGE, IMAGE (the operator's
#      image, default valkey-operator:dev), DEV_TIMEOUT (seconds to wait for Active, default 180),
#      DEV_EXAMPLES (files to apply, default: examples/valkeyimage.yaml examples/valkeyconfig.yaml
#      examples/valkeycluster.yaml), MANAGER_ARGS (extra operator flags, OPERATOR=host only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
state="$root/.dev"
export VALKEY_IMAGE="${VALKEY_IMAGE:-valkey-operator/valkey:8.0}"
export VALKEY9_IMAGE="${VALKEY9_IMAGE:-valkey-operator/valkey:9.1}"
mode="${OPERATOR:-cluster}"
image="${IMAGE:-valkey-operator:dev}"
timeout_s="${DEV_TIMEOUT:-180}"
examples="${DEV_EXAMPLES:-examples/valkeyimage.yaml examples/valkeyconfig.yaml examples/valkeycluster.yaml}"
say() { printf '\033[1mdev:\033[0m %s\n' "$*"; }
# since START_NS: seconds elapsed, one decimal
since() { local d=$(( ($(date +%s%N) - $1) / 100000000 )); printf '%d.%d' $((d / 10)) $((d % 10)); }
case $mode in
cluster | host) ;;
*) say "OPERATOR must be cluster or host, not '$mode'"; exit 2 ;;
esac
# The namespace and Deployment of deploy/.
op_ns=valkey-operator
op_deploy=deployment/valkey-operator

# 1. Build what is missing.
hack/build-controlplane.sh
hack/build-objectstore.sh
if ! docker image inspect "$VALKEY_IMAGE" >/dev/null 2>&1; then
	say "building Valkey images"
	hack/valkey-image/build.sh
fi
say "building bin/devcluster and the operator (${mode})"
go build -o bin/devcluster ./cmd/devcluster
manager_ok=1
if [[ $mode == cluster ]]; then
	build_log=$(mktemp)
	if ! make --no-print-directory image IMAGE="$image" >"$build_log" 2>&1; then
		manager_ok=0
		say "WARNING: the operator image does not build; continuing without the operator:"
		tail -n 20 "$build_log"
	fi
	rm -f "$build_log"
elif ! go build -o bin/manager ./cmd/manager; then
	manager_ok=0
	say "WARNING: cmd/manager does not build; continuing without the operator"
fi

# 2. The cluster.
kubeconfig=$(bin/devcluster up --quiet)
export KUBECONFIG="$kubeconfig"
say "cluster up; KUBECONFIG=$KUBECONFIG"
# The object store's endpoint (on the Docker network's gateway: pods and this host reach it),
# its bucket and keys, written by the dev cluster.
store_env="$state/object-store.env"
store_endpoint=$(sed -n 's/^ENDPOINT=//p' "$store_env")
store_bucket=$(sed -n 's/^BUCKET=//p' "$store_env")
say "object store: $store_endpoint, bucket $store_bucket (keys in .dev/object-store.env)"
kubectl get nodes -L topology.kubernetes.io/zone
kubectl get storageclass

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
stop_host_manager() {
	manager_running || return 0
	kill -TERM "$(cat "$state/pids/manager.pid")" || true
	for _ in $(seq 100); do manager_running || break; sleep 0.1; done
}
# operator_logs prints the last log lines of whichever operator runs.
operator_logs() {
	if [[ $mode == cluster ]]; then
		kubectl -n "$op_ns" logs "$op_deploy" --all-containers --tail=30 2>&1 || true
	else
		tail -n 30 "$state/logs/manager.log" || true
	fi
}

if [[ $mode == cluster && $manager_ok == 1 ]]; then
	# One operator at a time: a host operator left by OPERATOR=host would act beside it.
	stop_host_manager
	kubectl apply -f deploy/ >/dev/null
	# The image keeps its tag when rebuilt: pods running an older build are replaced.
	want=$(docker image inspect --format '{{.Id}}' "$image")
	running=$(kubectl -n "$op_ns" get pods -l app.kubernetes.io/name=valkey-operator \
		-o jsonpath='{range .items[*]}{range .status.containerStatuses[*]}{.imageID}{"\n"}{end}{end}')
	if [[ -n $running ]] && grep -qv -x -F "$want" <<<"$running"; then
		say "operator image rebuilt: restarting its pods"
		kubectl -n "$op_ns" rollout restart "$op_deploy" >/dev/null
	fi
	if kubectl -n "$op_ns" rollout status "$op_deploy" --timeout=120s >/dev/null; then
		say "operator running in the cluster: $(kubectl -n "$op_ns" get pods -l app.kubernetes.io/name=valkey-operator --no-headers | awk '{printf "%s %s  ", $1, $2}')"
		say "its log: kubectl -n $op_ns logs $op_deploy"
	else
		manager_ok=0
		say "WARNING: the operator's Deployment is not ready after 120s:"
		kubectl -n "$op_ns" get pods -o wide || true
		operator_logs
	fi
fi

if [[ $mode == host ]]; then
	# deploy/ without its Deployment: the host process runs under the same ServiceAccount,
	# RBAC and admission policies as the pods would.
	kubectl apply $(for f in deploy/*.yaml; do [[ $f == */40-deployment.yaml ]] || printf -- '-f %s ' "$f"; done) >/dev/null
	# One operator at a time: the in-cluster one (from an earlier `make dev`) stands aside.
	if [[ $(kubectl -n "$op_ns" get "$op_deploy" --ignore-not-found -o jsonpath='{.spec.replicas}') =~ ^[1-9] ]]; then
		kubectl -n "$op_ns" scale "$op_deploy" --replicas=0 >/dev/null
		say "in-cluster operator scaled to 0 (make dev without OPERATOR=host brings it back)"
	fi
	# A rebuilt operator replaces the running one.
	manager_sum=$(sha256sum bin/manager 2>/dev/null | cut -d' ' -f1 || true)
	if [[ $manager_ok == 1 ]] && [[ $manager_sum != "$(cat "$state/pids/manager.sum" 2>/dev/null)" ]]; then
		manager_running && say "operator binary changed: restarting it"
		stop_host_manager
	fi
	if [[ $manager_ok == 1 ]] && ! manager_running; then
		# The operator runs on the host (pod addresses on the dev network are reachable from
		# here) with a ServiceAccount token that only this file holds.
		kc="$state/operator.kubeconfig"
		server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
		ca=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
		token=$(kubectl -n "$op_ns" create token valkey-operator --duration=24h)
		(
			umask 077
			cat >"$kc" <<KC
apiVersion: v1
kind: Config
clusters: [{name: dev, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: valkey-operator, user: {token: "$token"}}]
contexts: [{name: dev, context: {cluster: dev, user: valkey-operator}}]
current-context: dev
KC
		)
		# shellcheck disable=SC2086
		setsid bin/manager --kubeconfig="$kc" --namespace="$op_ns" --leader-elect=false \
			--metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081 \
			--restore-image="$image" \
			${MANAGER_ARGS:-} >>"$state/logs/manager.log" 2>&1 </dev/null &
		echo $! >"$state/pids/manager.pid"
		echo "$manager_sum" >"$state/pids/manager.sum"
		sleep 1
		if ! manager_running; then
			manager_ok=0
			say "WARNING: the operator exited at start; last log lines:"
			tail -n 20 "$state/logs/manager.log" || true
		else
			say "operator running on the host (pid $(cat "$state/pids/manager.pid"), log .dev/logs/manager.log)"
		fi
	fi
fi

applied=$(date +%s%N)
# shellcheck disable=SC2086
kubectl apply $(for f in $examples; do printf -- '-f %s ' "$f"; done)

# 4. Progress until Active.
if [[ $manager_ok != 1 ]]; then
	say "operator not running: the ValkeyClusters stay as they are"
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
		operator_logs
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
Object store (S3, reachable from pods and this host): $store_endpoint, bucket $store_bucket
  set -a; . .dev/object-store.env; set +a     # ENDPOINT, BUCKET, ACCESS_KEY, SECRET_KEY
Logs: .dev/logs/ and .dev/objectstore/weed.log; the operator's: $(if [[ $mode == cluster ]]; then echo "kubectl -n $op_ns logs $op_deploy"; else echo ".dev/logs/manager.log"; fi)
Stop everything: make dev-down
MSG
