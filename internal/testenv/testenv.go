// Package testenv starts a real kube-apiserver and etcd (the binaries `make controlplane`
// builds into bin/controlplane) through controller-runtime's envtest, with the project's
// CRDs installed, for tests that need a real API server. It is the one way every suite
// starts one: Start for a test, Run for a TestMain.
package testenv

import (
	"fmt"
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

// Run brings up etcd and kube-apiserver with every CRD installed and Established, and returns
// the function that stops them (and removes the kubeconfig). A missing binary is an error
// that says how to build it: a skipped suite must not pass for a green one. Run leaves
// controller-runtime's logger to the caller.
func Run() (*Env, func(), error) {
	dir := AssetsDir()
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return nil, nil, fmt.Errorf("control-plane binary %s missing in %s: run `make controlplane` (or set KUBEBUILDER_ASSETS): %w", bin, dir, err)
		}
	}
	defs, err := crds.Definitions()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDs:                     defs,
		AttachControlPlaneOutput: os.Getenv("TESTENV_VERBOSE") != "",
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting envtest control plane: %w", err)
	}
	tmp, err := os.MkdirTemp("", "testenv")
	stop := func() {
		_ = env.Stop()
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	path, err := writeKubeconfig(env, tmp)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &Env{Config: cfg, Kubeconfig: path}, stop, nil
}

// writeKubeconfig writes a kubeconfig of an admin user into dir.
func writeKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, raw, 0o600)
}

// Start is Run for one test: the control plane stops when the test ends, and a failure to
// start fails the test. controller-runtime's logs are discarded, unless the caller set its
// logger first (the first one set stays).
func Start(t testing.TB) *Env {
	t.Helper()
	log.SetLogger(logr.Discard())
	env, stop, err := Run()
	require.NoError(t, err)
	t.Cleanup(stop)
	return env
}
