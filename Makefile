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
BASE_IMAGE ?= scratch

.PHONY: all build image controlplane valkey-image valkey-tools prerequisites lint \
	unit integration e2e test bench dev dev-down clean

all: build

## build: compile every package and the operator binary into bin/manager
build:
	go build ./...
	go build -trimpath -ldflags='-s -w' -o bin/manager ./cmd/manager

## image: the operator's container image (static binary on BASE_IMAGE, non-root)
image: build
	DOCKER_BUILDKIT=0 docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .

## controlplane: etcd, kube-apiserver, kube-scheduler, kube-controller-manager from Go modules
controlplane:
	hack/build-controlplane.sh

## valkey-image: Valkey 8.0 and 9.1 images built locally from Debian packages
valkey-image:
	hack/valkey-image/build.sh

## valkey-tools: valkey-cli on the host (benchmarks and e2e checks use it)
valkey-tools:
	hack/valkey-image/install-tools.sh

prerequisites: controlplane valkey-image valkey-tools

## lint: gofmt and go vet
lint:
	@bad=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	go vet ./...

## unit: unit tests, the envtest suites on the real API server, and the dev cluster's own tests
unit: controlplane valkey-image
	$(GO_TEST) -timeout 20m $$(go list ./... | grep -v -e /integration -e /e2e)

## integration: valkeyops against real Valkey containers (no Kubernetes)
integration: valkey-image valkey-tools
	$(GO_TEST) -timeout 30m ./integration/...

## e2e: the dev cluster driven by the real kubectl
e2e: prerequisites build
	$(GO_TEST) -timeout 30m ./e2e/...

## test: every suite
test: lint prerequisites
	$(MAKE) --no-print-directory unit integration e2e

## bench: our bootstrap and rebalance side by side with valkey-cli
bench: valkey-image valkey-tools
	go run ./hack/bench

## dev: local Kubernetes + operator + an example 3x1 cluster, then how to reach it
dev: prerequisites build
	hack/dev/up.sh

## dev-down: stop everything `make dev` started and remove its state
dev-down:
	hack/dev/down.sh

clean: dev-down
	rm -rf bin/manager
