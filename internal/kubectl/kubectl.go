// Package kubectl runs the real kubectl binary against one cluster, every call bounded by a
// timeout. The CRD tests, the dev cluster's tests and the end-to-end tests all drive kubectl
// through it.
package kubectl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout bounds a call when Runner.Timeout is zero. It leaves room for
// `kubectl wait --timeout=60s`.
const DefaultTimeout = 2 * time.Minute

// Runner runs kubectl with one kubeconfig. The zero value uses kubectl's own defaults.
type Runner struct {
	// Kubeconfig is passed as --kubeconfig when set.
	Kubeconfig string
	// Namespace is passed as -n when set.
	Namespace string
	// Timeout bounds every call; zero means DefaultTimeout.
	Timeout time.Duration
	// Binary is the kubectl to run; empty means "kubectl" on PATH.
	Binary string
}

// In returns a copy of r that runs in namespace ns.
func (r Runner) In(ns string) Runner {
	r.Namespace = ns
	return r
}

// Run runs kubectl with args and returns its standard output. The error names the command
// and carries kubectl's standard error (where the API server's refusal is), or says that
// the call timed out.
func (r Runner) Run(ctx context.Context, args ...string) (string, error) {
	return r.RunWithInput(ctx, "", args...)
}

// RunWithInput is Run with stdin as kubectl's standard input (e.g. for `apply -f -`).
func (r Runner) RunWithInput(ctx context.Context, stdin string, args ...string) (string, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bin := r.Binary
	if bin == "" {
		bin = "kubectl"
	}
	var full []string
	if r.Kubeconfig != "" {
		full = append(full, "--kubeconfig", r.Kubeconfig)
	}
	if r.Namespace != "" {
		full = append(full, "--namespace", r.Namespace)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	// A killed kubectl may leave a child holding the pipes; do not wait for it forever.
	cmd.WaitDelay = 5 * time.Second
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	what := "kubectl " + strings.Join(full, " ")
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return stdout.String(), fmt.Errorf("%s: timed out after %s: %s", what, timeout, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
}

// Table splits kubectl's column output (get without -o) into the fields of each line.
func Table(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}
