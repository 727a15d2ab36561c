// Package controlplane is a separate module that builds the Kubernetes control-plane
// binaries (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) from Go modules.
//
// Prebuilt binaries cannot be downloaded on the machines this project runs on, so the
// tests and the local dev cluster use these instead. Each sub-folder is a tiny main that
// calls the upstream command constructor; `make controlplane` builds them into
// bin/controlplane/ and skips the build when they are up to date.
package controlplane
