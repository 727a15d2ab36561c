package operatorproc_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/operatorproc"
)

// TestMain lets the test binary stand in for the manager: with FAKE_MANAGER set it serves
// /readyz on the probe address until SIGTERM (or exits at once with FAKE_MANAGER=fail).
func TestMain(m *testing.M) {
	switch os.Getenv("FAKE_MANAGER") {
	case "":
		os.Exit(m.Run())
	case "fail":
		fmt.Println("fake manager: refusing to start")
		os.Exit(3)
	}
	fs := flag.NewFlagSet("manager", flag.ExitOnError)
	probe := fs.String("health-probe-bind-address", "", "")
	fs.String("kubeconfig", "", "")
	fs.String("namespace", "", "")
	fs.String("metrics-bind-address", "", "")
	fs.Bool("leader-elect", true, "")
	extra := fs.String("extra", "", "")
	_ = fs.Parse(os.Args[1:])
	fmt.Printf("fake manager: args %v extra %q\n", os.Args[1:], *extra)
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	go func() { _ = http.ListenAndServe(*probe, nil) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	fmt.Println("fake manager: SIGTERM")
	os.Exit(0)
}

func fake(t *testing.T, mode string) operatorproc.Options {
	t.Setenv("FAKE_MANAGER", mode) // inherited by the child
	exe, err := os.Executable()
	require.NoError(t, err)
	return operatorproc.Options{Bin: exe, Kubeconfig: "/nowhere/kubeconfig", Namespace: "ns",
		LogPath: filepath.Join(t.TempDir(), "manager.log"), Args: []string{"--extra", "x"}}
}

func TestStartWaitsForReadinessAndStops(t *testing.T) {
	p, err := operatorproc.Start(context.Background(), fake(t, "serve"))
	require.NoError(t, err)
	require.NoError(t, p.Running())
	assert.Positive(t, p.Pid())
	assert.True(t, strings.HasPrefix(p.MetricsURL, "http://127.0.0.1:"), p.MetricsURL)
	require.NoError(t, p.Stop())
	assert.Error(t, p.Running())
	log := p.Tail(10)
	assert.Contains(t, log, "--namespace ns")
	assert.Contains(t, log, `extra "x"`)
	assert.Contains(t, log, "--leader-elect=false")
	assert.True(t, strings.HasSuffix(log, "fake manager: SIGTERM"), log)
	require.NoError(t, p.Stop(), "stopping twice")
}

// TestLeaderElectFlag: the process runs with leader election exactly when asked, so a suite
// that asks for it exercises the Lease rights the shipped Deployment needs.
func TestLeaderElectFlag(t *testing.T) {
	for _, tc := range []struct {
		elect bool
		want  string
	}{{false, "--leader-elect=false"}, {true, "--leader-elect=true"}} {
		t.Run(tc.want, func(t *testing.T) {
			o := fake(t, "serve")
			o.LeaderElect = tc.elect
			p, err := operatorproc.Start(context.Background(), o)
			require.NoError(t, err)
			require.NoError(t, p.Stop())
			assert.Contains(t, p.Tail(10), tc.want)
		})
	}
}

func TestStartReportsAnEarlyExitWithTheLog(t *testing.T) {
	_, err := operatorproc.Start(context.Background(), fake(t, "fail"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "operator process exited")
	assert.Contains(t, err.Error(), "fake manager: refusing to start")
}

func TestKill(t *testing.T) {
	p, err := operatorproc.Start(context.Background(), fake(t, "serve"))
	require.NoError(t, err)
	require.NoError(t, p.Kill())
	assert.ErrorContains(t, p.Running(), "killed")
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	require.NoError(t, os.WriteFile(path, []byte("a\nb\n"+strings.Repeat("x", 10)+"\n"), 0o644))
	assert.Equal(t, "b\n"+strings.Repeat("x", 10), operatorproc.Tail(path, 2, 0))
	assert.Equal(t, "b\nxxxx…", operatorproc.Tail(path, 2, 4))
	assert.Equal(t, "a\nb\nxxxx…", operatorproc.Tail(path, 9, 4))
	assert.Contains(t, operatorproc.Tail(filepath.Join(path, "missing"), 2, 0), "missing")
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := operatorproc.FreePorts(3)
	require.NoError(t, err)
	require.Len(t, ports, 3)
	assert.NotEqual(t, ports[0], ports[1])
	assert.NotEqual(t, ports[1], ports[2])
	assert.NotEqual(t, ports[0], ports[2])
}
