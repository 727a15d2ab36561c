// Package operatorproc runs the cmd/manager binary as a real process on the host against a
// dev cluster, for the end-to-end suite and the day-2 benchmark: started with its kubeconfig,
// namespace and free metrics/probe ports, awaited on its readiness endpoint, stopped
// gracefully, and its log read back.
package operatorproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
)

// Options say how to run the manager.
type Options struct {
	Bin        string // the manager binary
	Kubeconfig string
	Namespace  string   // the operator's own namespace (--namespace)
	LogPath    string   // stdout and stderr go here
	Args       []string // further flags
	// LeaderElect runs leader election (a Lease in Namespace), as the shipped Deployment
	// does; off, the process reconciles at once and needs no Lease rights.
	LeaderElect bool
}

// Process is a running manager. Metrics and probes listen on free ports of 127.0.0.1.
type Process struct {
	cmd        *exec.Cmd
	LogPath    string
	MetricsURL string
	exited     chan struct{}
	waitErr    error
}

// readyTimeout bounds the wait for /readyz after the start.
const readyTimeout = time.Minute

// Start runs the manager and waits (within a minute, or until ctx ends) until its readiness
// endpoint answers 200. On failure the process is stopped and the error carries its log tail.
func Start(ctx context.Context, o Options) (*Process, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	metricsPort, probePort := ports[0], ports[1]
	logFile, err := os.Create(o.LogPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig", o.Kubeconfig,
		"--namespace", o.Namespace,
		fmt.Sprintf("--leader-elect=%t", o.LeaderElect),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probePort),
	}, o.Args...)
	cmd := exec.Command(o.Bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, LogPath: o.LogPath, exited: make(chan struct{}),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	err = poll.Until(ctx, 200*time.Millisecond, readyTimeout, "operator ready at "+url, func(ctx context.Context) (bool, string, error) {
		if err := p.Running(); err != nil {
			return false, "", err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("%w; log:\n%s", err, p.Tail(40))
	}
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Running reports an error when the process has exited.
func (p *Process) Running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("operator process exited: %v", p.waitErr)
	default:
		return nil
	}
}

// Stop sends SIGTERM (graceful shutdown) and escalates to SIGKILL after 40s. An exit status
// other than 0 after SIGTERM is no error; a process already gone is none either.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		var exitErr *exec.ExitError
		if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) {
			return p.waitErr
		}
		return nil
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New("operator ignored SIGTERM for 40s; killed")
	}
}

// Kill sends SIGKILL (no shutdown of any kind) and waits until the process is gone.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.exited
	return nil
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string { return Tail(p.LogPath, n, 0) }

// Tail returns the last n lines of the file at path, each cut to width characters when
// width > 0 (a stack trace in one line says little more after a few hundred); when the file
// cannot be read, the error.
func Tail(path string, n, width int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if width > 0 {
		for i, l := range lines {
			if len(l) > width {
				lines[i] = l[:width] + "…"
			}
		}
	}
	return strings.Join(lines, "\n")
}

// FreePorts returns n distinct free ports of 127.0.0.1: all are held open until each is
// known, so the kernel cannot hand the same one out twice.
func FreePorts(n int) ([]int, error) {
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
