# Valkey operator. `make dev` runs the main job (a local Kubernetes with the operator and a
# Valkey cluster); `make test` runs every test. Both install or build what they need first.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

export CGO_ENABLED ?= 0
export TESTCONTAINERS_RYUK_DISABLED := true
export KUBEBUILDER_ASSETS ?= $(CURDIR)/bin/controlplane
export VALKEY_IMAGE ?= valkey-operator/valkey:8.0
export VALKEY9_IMAGE ?= valkey-operator/valkey:9.1

GO_TEST := go test -count=1
IMAGE ?= valkey-operator:dev
# Where `make dev` runs the operator: cluster (its image as deploy/'s Deployment) or host.
OPERATOR ?= cluster
export IMAGE OPERATOR
BASE_IMAGE ?= scratch

.PHONY: all build image controlplane objectstore valkey-image valkey-tools prerequisites lint \
	unit envtest integration e2e test bench bench-day2 bench-fleet bench-backup dev dev-down clean

# Test tiers. Untagged test files are unit tests: pure functions, planners, renderers; no API
# server, no Docker; `go test ./...` runs exactly them. A test file that needs a real
# kube-apiserver, or the dev cluster (its control plane and Docker), starts with
# `//go:build envtest`; ENVTEST_PKGS lists the packages holding such files. integration/'s
# test files start with `//go:build integration` (Valkey containers) and e2e/'s with
# `//go:build e2e` (the dev cluster and the operator): tiers of their own.
ENVTEST_PKGS = $(shell git ls-files -co --exclude-standard '*_test.go' | xargs -r grep -l '^//go:build envtest$$' 2>/dev/null \
	| xargs -r -n1 dirname | sort -u | sed 's|^|./|')

all: build

## build: compile every package, the operator binary into bin/manager and the kubectl plugin
## into bin/kubectl-valkey (copy it onto PATH: `kubectl valkey status CLUSTER`)
build:
	go build ./...
	go build -trimpath -ldflags='-s -w' -o bin/manager ./cmd/manager
	go build -trimpath -ldflags='-s -w' -o bin/kubectl-valkey ./cmd/kubectl-valkey

## image: the operator's container image (static binary on BASE_IMAGE, non-root)
image: build
	DOCKER_BUILDKIT=0 docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .

## controlplane: etcd, kube-apiserver, kube-scheduler, kube-controller-manager from Go modules
controlplane:
	hack/build-controlplane.sh

## objectstore: SeaweedFS's weed (the dev cluster's S3-compatible object store) from its Go module
objectstore:
	hack/build-objectstore.sh

## valkey-image: Valkey 8.0 and 9.1 images built locally from Debian packages
valkey-image:
	hack/valkey-image/build.sh

## valkey-tools: valkey-cli and rclone on the host (benchmarks and e2e checks use them)
valkey-tools:
	hack/valkey-image/install-tools.sh

prerequisites: controlplane objectstore valkey-image valkey-tools

# PROMQLCHECK: a module of its own (Prometheus's PromQL parser stays out of the operator's
# module graph) whose test checks the PromQL of examples/monitoring/ against the series the
# operator and the exporter serve. `go test ./...` at the root skips nested modules, so lint
# and unit name it; the go command fetches its modules on first use.
PROMQLCHECK := hack/promqlcheck

## lint: gofmt and go vet (with every tier's tag, so tagged test files are vetted too)
lint:
	@files=(); while IFS= read -r f; do [[ -e $$f ]] && files+=("$$f"); done \
		< <(git ls-files -co --exclude-standard '*.go'); \
	bad=$$(gofmt -l "$${files[@]}"); \
	if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	go vet -tags envtest,integration,e2e ./...
	cd $(PROMQLCHECK) && go vet ./...

## unit: the untagged tests: no control plane, no Docker, no Valkey; and the dashboard's and
## alert rules' PromQL (hack/promqlcheck)
unit:
	$(GO_TEST) -timeout 5m ./...
	cd $(PROMQLCHECK) && $(GO_TEST) -timeout 5m ./...

## envtest: tests tagged envtest: CRDs, manager and reconciler on a real kube-apiserver,
## and the dev cluster's own tests (its control plane and Docker pods)
envtest: controlplane objectstore valkey-image
	$(GO_TEST) -tags envtest -timeout 20m $(ENVTEST_PKGS)

## integration: valkeyops against real Valkey containers (no Kubernetes)
integration: objectstore valkey-image valkey-tools
	$(GO_TEST) -tags integration -timeout 30m ./integration/...

## e2e: the dev cluster driven by the real kubectl (one test installs the operator's image from deploy/)
e2e: prerequisites build image
	$(GO_TEST) -tags e2e -timeout 45m ./e2e/...

## test: every tier
test: lint prerequisites
	$(MAKE) --no-print-directory unit envtest integration e2e

## bench: our bootstrap and rebalance side by side with valkey-cli
bench: valkey-image valkey-tools
	go run ./hack/bench

## bench-fleet: many clusters, one operator: time to Active, operator RSS/CPU, idle API and Valkey traffic, teardown
bench-fleet: prerequisites image
	go run ./hack/bench-day2 -fleet

## bench-day2: an Active cluster's recovery from a lost primary, a rolling replacement, and a scale-out vs valkey-cli
bench-day2: prerequisites
	go run ./hack/bench-day2

## bench-backup: issue #25's full-size proof: a backup under a writer, restores into 3, 2 and 4 shards, a kept schedule, vs valkey-cli --rdb + rclone and a pipelined re-write (-keys, -versions, -tls-versions, -schedule-runs)
bench-backup: prerequisites image
	WITH_RCLONE=1 hack/valkey-image/install-tools.sh
	go run ./hack/bench-backup $(BENCH_BACKUP_FLAGS)

## dev: local Kubernetes + operator (installed from deploy/; OPERATOR=host: on the host) + an
## example 3x1 cluster, then how to reach it
dev: prerequisites build
	hack/dev/up.sh

## dev-down: stop everything `make dev` started and remove its state
dev-down:
	hack/dev/down.sh

clean: dev-down
	rm -rf bin/manager
