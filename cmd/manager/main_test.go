//go:build envtest

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/gomomento/valkey-operator/internal/testenv"
	"github.com/gomomento/valkey-operator/reconciler/settings"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	cfg        *rest.Config
	k8s        client.Client
	kubeconfig string // path of an admin kubeconfig for the subprocess test
)

func TestMain(m *testing.M) { os.Exit(suite(m)) }

func suite(m *testing.M) int {
	env, stop, err := testenv.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	cfg, kubeconfig = env.Config, env.Kubeconfig
	if k8s, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func namespace(t *testing.T, name string, settingsData map[string]string) string {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	if settingsData != nil {
		require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: settings.ConfigMapName, Namespace: name}, Data: settingsData}))
	}
	return name
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func getConfig() (*rest.Config, error) { return rest.CopyConfig(cfg), nil }

// httpOK is a poll condition: GET url answers 200. Each GET has its own short deadline: a
// listener that accepts but is not served yet (the manager binds its probe port when it is
// built and serves it once started) must not swallow the whole wait in one request.
func httpOK(url string) poll.Condition {
	return func(ctx context.Context) (bool, string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	}
}

// whileRunning is cond that fails at once, with run's own error, if run has returned: a
// start-up that failed leaves the probe port bound but never served, and the wait would
// otherwise end in a bare timeout that hides why.
func whileRunning(done <-chan error, cond poll.Condition) poll.Condition {
	return func(ctx context.Context) (bool, string, error) {
		select {
		case err := <-done:
			return false, "", fmt.Errorf("run returned before serving: %v", err)
		default:
		}
		return cond(ctx)
	}
}

// TestInvalidSettingsStopStartup: an invalid defaultZoneSpread makes run return a clear,
// typed error before anything starts.
func TestInvalidSettingsStopStartup(t *testing.T) {
	ns := namespace(t, "op-invalid", map[string]string{"defaultZoneSpread": "everywhere"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"--namespace", ns, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, getConfig)
	require.Error(t, err)
	var inv *settings.InvalidError
	assert.True(t, errors.As(err, &inv), "typed error, got %T: %v", err, err)
	assert.Contains(t, err.Error(), `"defaultZoneSpread" has invalid value "everywhere"`)
}

// TestStartServeStop: run starts with leader election, serves health, readiness and
// metrics, and returns cleanly when its context is cancelled, releasing the lease.
func TestStartServeStop(t *testing.T) {
	ns := namespace(t, "op-start", map[string]string{"defaultZoneSpread": "required"})
	metrics, probes, pprof := freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--namespace", ns, "--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
			"--pprof-bind-address", pprof, "--leader-election-id", "lease-in-process"}, getConfig)
	}()
	for _, url := range []string{"http://" + probes + "/healthz", "http://" + probes + "/readyz", "http://" + metrics + "/metrics",
		"http://" + pprof + "/debug/pprof/heap"} {
		// 60 s: in CI this package's control plane shares two cores with five others.
		require.NoError(t, poll.Until(ctx, 100*time.Millisecond, 60*time.Second, url+" answers 200", whileRunning(done, httpOK(url))))
	}
	lease := &coordinationv1.Lease{}
	require.NoError(t, poll.Until(ctx, 100*time.Millisecond, 30*time.Second, "leader lease acquired", func(ctx context.Context) (bool, string, error) {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "lease-in-process"}, lease); err != nil {
			return false, err.Error(), nil
		}
		return lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", "no holder", nil
	}))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s")
	}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "lease-in-process"}, lease))
	assert.True(t, lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "", "lease released on stop")
}

// TestSIGTERM builds the binary and stops it with a real SIGTERM: exit status 0.
func TestSIGTERM(t *testing.T) {
	ns := namespace(t, "op-sigterm", nil)
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	probes := freeAddr(t)
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--metrics-bind-address", "0",
		"--health-probe-bind-address", probes, "--leader-election-id", "lease-sigterm")
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+ns)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	err = poll.Until(context.Background(), 100*time.Millisecond, 30*time.Second, "ready", httpOK("http://"+probes+"/readyz"))
	require.NoError(t, err, "stderr:\n%s", &stderr)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		require.NoError(t, err, "exit status; stderr:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no exit within 30s of SIGTERM; stderr:\n%s", stderr.String())
	}
	assert.Contains(t, stderr.String(), "manager stopped")
}
