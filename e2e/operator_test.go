package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/internal/operatorproc"
)

// operator is the cmd/manager binary running as a real process against the dev cluster.
type operator struct{ *operatorproc.Process }

// startOperator runs the manager as the shipped Deployment does, with leader election (so
// the Lease rights are exercised), and waits until its readiness endpoint answers.
func startOperator(bin, kubeconfig, logPath string) (*operator, error) {
	p, err := operatorproc.Start(context.Background(), operatorproc.Options{
		Bin: bin, Kubeconfig: kubeconfig, Namespace: operatorNamespace, LogPath: logPath,
		Args:        []string{"--recheck-interval", recheckInterval.String()},
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
func crashAndRestart(t *testing.T) {
	t.Helper()
	require.NoError(t, suite.operator.Kill())
	out, err := kubectlRun("", "delete", "lease", leaderLease, "-n", operatorNamespace, "--ignore-not-found")
	require.NoError(t, err, out)
	op, err := startOperator(suite.bin, suite.operatorKubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())))
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
	resp, err := http.Get(o.MetricsURL)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", o.MetricsURL, resp.Status)
	}
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "controller_runtime_reconcile_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, errors.New("no controller_runtime_reconcile_total in the operator's metrics")
	}
	return sum, nil
}

// metric is the value of the operator's series name whose labels include want (0, false
// when there is none).
func (o *operator) metric(name string, want map[string]string) (float64, bool, error) {
	resp, err := http.Get(o.MetricsURL)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: %s", o.MetricsURL, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, name+"{"), "} ")
		if !ok {
			continue
		}
		matched := true
		for k, v := range want {
			matched = matched && strings.Contains(","+labels+",", ","+k+`="`+v+`",`)
		}
		if matched {
			f, err := strconv.ParseFloat(value, 64)
			return f, true, err
		}
	}
	return 0, false, sc.Err()
}
