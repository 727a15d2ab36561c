package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
	"github.com/stretchr/testify/require"
)

// operator is the cmd/manager binary running as a real process against the dev cluster.
type operator struct {
	cmd     *exec.Cmd
	logPath string
	metrics string
	exited  chan struct{}
	waitErr error
}

// startOperator runs the manager and waits until its readiness endpoint answers.
func startOperator(bin, kubeconfig, logPath string) (*operator, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	metricsPort, probePort := ports[0], ports[1]
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--namespace", operatorNamespace,
		"--leader-elect=false",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probePort),
		"--recheck-interval", recheckInterval.String(),
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	op := &operator{cmd: cmd, logPath: logPath, exited: make(chan struct{}),
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)}
	go func() {
		op.waitErr = cmd.Wait()
		logFile.Close()
		close(op.exited)
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	err = poll.Until(context.Background(), 200*time.Millisecond, 60*time.Second, "operator ready at "+url, func(ctx context.Context) (bool, string, error) {
		if err := op.running(); err != nil {
			return false, "", err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		_ = op.stop()
		return nil, fmt.Errorf("%w; log:\n%s", err, op.tail(40))
	}
	return op, nil
}

func (o *operator) pid() int { return o.cmd.Process.Pid }

// running reports an error when the process has exited.
func (o *operator) running() error {
	select {
	case <-o.exited:
		return fmt.Errorf("operator process exited: %v", o.waitErr)
	default:
		return nil
	}
}

// stop sends SIGTERM (graceful shutdown) and escalates to SIGKILL after 40s.
func (o *operator) stop() error {
	select {
	case <-o.exited:
		return nil
	default:
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
		var exitErr *exec.ExitError
		if o.waitErr != nil && !errors.As(o.waitErr, &exitErr) {
			return o.waitErr
		}
		return nil
	case <-time.After(40 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
		return errors.New("operator ignored SIGTERM for 40s; killed")
	}
}

// crashAndRestart SIGKILLs the suite's operator (no shutdown of any kind) and starts a new
// one in its place, logging to a file of its own.
func crashAndRestart(t *testing.T) {
	t.Helper()
	old := suite.operator
	require.NoError(t, old.cmd.Process.Kill())
	<-old.exited
	op, err := startOperator(suite.bin, suite.env.Kubeconfig, filepath.Join(suite.tmp, fmt.Sprintf("manager-%d.log", time.Now().UnixNano())))
	require.NoError(t, err, "restarting the operator")
	suite.operator = op
}

// tail returns the last n lines of the operator's log.
func (o *operator) tail(n int) string {
	b, err := os.ReadFile(o.logPath)
	if err != nil {
		return "(no operator log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// rssKiB reads VmRSS from /proc/<pid>/status.
func (o *operator) rssKiB() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.pid()))
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

// freePorts returns n distinct free ports: all are held open until each is known, so the
// kernel cannot hand the same one out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// reconcileTotal sums controller_runtime_reconcile_total over results from the metrics
// endpoint: a number that stops moving when the operator is idle.
func (o *operator) reconcileTotal() (float64, error) {
	resp, err := http.Get(o.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", o.metrics, resp.Status)
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
