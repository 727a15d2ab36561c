// Package testenv starts a real kube-apiserver and etcd (the binaries `make controlplane`
// builds into bin/controlplane) through controller-runtime's envtest, with the project's
// CRDs installed, for tests that need a real API server.
package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gomomento/valkey-operator/crds"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig for the real kubectl.
	Kubeconfig string
}

// AssetsDir is where `make controlplane` puts the binaries, unless KUBEBUILDER_ASSETS says otherwise.
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "bin", "controlplane")
}

// Start brings up etcd and kube-apiserver with every CRD installed and Established, and stops
// them when the test ends. A missing binary fails the test: a skipped suite must not pass for a
// green one.
func Start(t testing.TB) *Env {
	t.Helper()
	dir := AssetsDir()
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		_, err := os.Stat(filepath.Join(dir, bin))
		require.NoErrorf(t, err, "control-plane binary %s missing in %s: run `make controlplane`", bin, dir)
	}
	log.SetLogger(logr.Discard())
	defs, err := crds.Definitions()
	require.NoError(t, err)

	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDs:                     defs,
		AttachControlPlaneOutput: os.Getenv("TESTENV_VERBOSE") != "",
	}
	cfg, err := env.Start()
	require.NoError(t, err, "starting envtest control plane")
	t.Cleanup(func() { _ = env.Stop() })

	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	raw, err := user.KubeConfig()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	return &Env{Config: cfg, Kubeconfig: path}
}
