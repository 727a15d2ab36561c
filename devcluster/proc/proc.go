// Package proc starts and stops the dev cluster's background processes. Each
// process writes its output to a log file and its pid to a pid file, so a
// later `devcluster down` (another process) can find and stop it.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomomento/valkey-operator/internal/poll"
)

// Process is a started child.
type Process struct {
	Name    string
	PidFile string
	LogFile string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error
}

// Options controls how a process is started.
type Options struct {
	// Detach puts the process in its own session so it outlives the caller
	// (for `devcluster up`). Otherwise it is killed when the caller's thread
	// dies (for tests).
	Detach bool
	Env    []string
	Dir    string
}

// Start runs bin with args, logging to logFile and recording its pid in
// pidFile.
func Start(name, bin string, args []string, logFile, pidFile string, o Options) (*Process, error) {
	for _, d := range []string{filepath.Dir(logFile), filepath.Dir(pidFile)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), o.Env...)
	if o.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	p := &Process{Name: name, PidFile: pidFile, LogFile: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed when the process ends.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitError describes how the process ended, with the end of its log.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.Name, p.err, Tail(p.LogFile, 15))
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	_ = os.Remove(p.PidFile)
}

// Running returns the pid recorded in pidFile when that process is alive
// and still runs a binary whose path contains exeHint.
func Running(pidFile, exeHint string) (int, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
			return 0, false // zombie
		}
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !strings.Contains(exe, exeHint) {
		return 0, false
	}
	return pid, true
}

// StopPidFile stops the process recorded in pidFile (if alive and running
// exeHint): SIGTERM, then SIGKILL after grace. The pid file is removed.
func StopPidFile(pidFile, exeHint string, grace time.Duration) error {
	defer os.Remove(pidFile)
	pid, ok := Running(pidFile, exeHint)
	if !ok {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	gone := func(context.Context) (bool, string, error) {
		_, running := Running(pidFile, exeHint)
		return !running, "still running", nil
	}
	ctx := context.Background()
	if poll.Until(ctx, 50*time.Millisecond, grace, "exit after SIGTERM", gone) == nil {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if err := poll.Until(ctx, 50*time.Millisecond, 5*time.Second, "exit after SIGKILL", gone); err != nil {
		return fmt.Errorf("process %d (%s): %w", pid, exeHint, err)
	}
	return nil
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
