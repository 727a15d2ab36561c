//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/operatorproc"
	"github.com/gomomento/valkey-operator/internal/promscrape"
)

// operator is the cmd/manager binary running as a real process against the dev cluster.
type operator struct{ *operatorproc.Process }

// startOperator runs the manager as the shipped Deployment does, with leader election (so
// the Lease rights are exercised), and waits until its readiness endpoint answers.
func startOperator(bin, kubeconfig, logPath string, extraArgs ...string) (*operator, error) {
	p, err := operatorproc.Start(context.Background(), operatorproc.Options{
		Bin: bin, Kubeconfig: kubeconfig, Namespace: operatorNamespace, LogPath: logPath,
		Args: append([]string{"--recheck-interval", recheckInterval.String(), "--slow-start", slowStart.String(), "--zap-time-encoding", "rfc3339nano",
			// Run on the host, the operator has no pod to read its image from.
			"--restore-image", operatorImage()}, extraArgs...),
		LeaderElect: true,
	})
	if err != nil {
		return nil, err
	}
	return &operator{p}, nil
}

// crashAndRestart SIGKILLs the suite's operator (no shutdown of any kind) and starts a new
// one in its place, logging to a file of its own. The killed leader's Lease would hold its
// successor off until it expires (15 s); these tests are about what the successor does, not
// about that wait, so the Lease is deleted (as admin) and the successor creates a new one.
// extraArgs are flags for the new operator only (a test that passes any restarts it again
// without them).
func crashAndRestart(t *testing.T, extraArgs ...string) {
	t.Helper()
	require.NoError(t, suite.operator.Kill())
	out, err := kubectlRun("", "delete", "lease", leaderLease, "-n", operatorNamespace, "--ignore-not-found")
	require.NoError(t, err, out)
	op, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())), extraArgs...)
	require.NoError(t, err, "restarting the operator")
	suite.operator = op
}

// rssKiB reads VmRSS from /proc/<pid>/status.
func (o *operator) rssKiB() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.Pid()))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS line in /proc/<pid>/status")
}

// reconcileTotal sums controller_runtime_reconcile_total over results from the metrics
// endpoint: a number that stops moving when the operator is idle.
func (o *operator) reconcileTotal() (float64, error) {
	m, err := o.scrape()
	if err != nil {
		return 0, err
	}
	samples := m.Samples("controller_runtime_reconcile_total")
	if len(samples) == 0 {
		return 0, errors.New("no controller_runtime_reconcile_total in the operator's metrics")
	}
	sum := 0.0
	for _, s := range samples {
		sum += s.Value
	}
	return sum, nil
}

// metric is the value of the operator's series name whose labels include want (0, false
// when there is none).
func (o *operator) metric(name string, want map[string]string) (float64, bool, error) {
	m, err := o.scrape()
	if err != nil {
		return 0, false, err
	}
	v, found := m.Value(name, want)
	return v, found, nil
}

// scrape reads the operator's metrics endpoint once.
func (o *operator) scrape() (promscrape.Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return promscrape.Get(ctx, o.MetricsURL)
}
