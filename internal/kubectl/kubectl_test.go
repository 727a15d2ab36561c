package kubectl_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/kubectl"
)

// fake writes a stand-in kubectl: a shell script with the given body.
func fake(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubectl")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

func TestRunPassesKubeconfigNamespaceAndStdin(t *testing.T) {
	r := kubectl.Runner{Kubeconfig: "/tmp/kc", Binary: fake(t, `echo "$@"; cat`)}
	out, err := r.In("ns1").RunWithInput(context.Background(), "from stdin", "apply", "-f", "-")
	require.NoError(t, err)
	assert.Equal(t, "--kubeconfig /tmp/kc --namespace ns1 apply -f -\nfrom stdin", out)

	out, err = r.Run(context.Background(), "get", "nodes")
	require.NoError(t, err)
	assert.Equal(t, "--kubeconfig /tmp/kc get nodes\n", out, "no namespace unless asked")
}

func TestRunErrorCarriesStderr(t *testing.T) {
	r := kubectl.Runner{Binary: fake(t, `echo partial; echo 'admission webhook denied' >&2; exit 1`)}
	out, err := r.Run(context.Background(), "create", "-f", "x.yaml")
	require.Error(t, err)
	assert.Equal(t, "partial\n", out)
	assert.Contains(t, err.Error(), "kubectl create -f x.yaml")
	assert.Contains(t, err.Error(), "admission webhook denied")
}

func TestRunTimesOut(t *testing.T) {
	r := kubectl.Runner{Binary: fake(t, `exec sleep 30`), Timeout: 100 * time.Millisecond}
	start := time.Now()
	_, err := r.Run(context.Background(), "wait")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out after 100ms")
	assert.Less(t, time.Since(start), 10*time.Second)
}

func TestTable(t *testing.T) {
	out := "NAME         CONFIG     STATE\nmy-cluster   standard   Active\n\n"
	assert.Equal(t, [][]string{{"NAME", "CONFIG", "STATE"}, {"my-cluster", "standard", "Active"}}, kubectl.Table(out))
}
