// Package e2e holds the end-to-end tests: a private dev cluster (real control plane,
// virtual-kubelet nodes running pods as Docker containers), the operator built from
// cmd/manager running as a real process, the real kubectl driving everything, and real
// Valkey servers checked with valkey-cli and a cluster-mode client.
//
// The test files carry the build tag e2e, so `go test ./...` (the unit tier) leaves them
// out. Run: make e2e, or go test -tags e2e ./e2e/... -count=1 -timeout 30m (needs
// bin/controlplane, the Valkey image VALKEY_IMAGE and valkey-cli on the host: make
// prerequisites). With DEVCLUSTER_REUSE=1 the tests use the cluster `make dev` left running
// instead; stop its operator first, since the tests run their own. -short skips the suite,
// except when CI is set: there it fails.
package e2e
