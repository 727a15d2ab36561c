package dockerpods

import (
	"context"
	"fmt"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
)

// minStopSeconds is the shortest SIGTERM->SIGKILL window a kubelet ever
// gives a container it stops (kuberuntime's minimumGracePeriodInSeconds),
// also when a preStop hook used up the grace period.
const minStopSeconds = 2

// deletionGrace is the grace period a deleted pod's containers get: the
// pod's deletion grace period (else its terminationGracePeriodSeconds, else
// 30 s), never under 1 s, as a kubelet's pod workers compute it.
func deletionGrace(pod *corev1.Pod) int {
	return max(gracePeriod(pod), 1)
}

// preStopBudget is how long a preStop hook may run when its container is
// stopped with grace seconds: the whole grace period, or nothing at all when
// there is none (a kubelet runs the hook only when grace > 0).
func preStopBudget(grace int) time.Duration {
	if grace <= 0 {
		return 0
	}
	return time.Duration(grace) * time.Second
}

// stopTimeout is the SIGTERM->SIGKILL timeout, in seconds, of a container
// stopped with grace seconds whose preStop hook ran for hookElapsed (zero
// without a hook). It is kubelet's arithmetic (kuberuntime killContainer):
// the grace period minus the whole seconds the hook took, but at least
// minStopSeconds.
func stopTimeout(grace int, hookElapsed time.Duration) int {
	return max(grace-int(hookElapsed/time.Second), minStopSeconds)
}

// preStop runs the preStop hook of container i, if it has one and runs,
// within the grace period, and returns the SIGTERM->SIGKILL timeout that is
// left. The container keeps running, and its readiness probe keeps being
// reported, meanwhile. A failed hook is logged and the container is stopped
// all the same, as a kubelet does.
func (p *Provider) preStop(ctx context.Context, st *podState, i int, grace int) int {
	st.mu.Lock()
	c := st.pod.Spec.Containers[i].DeepCopy()
	id, running := st.ctrs[i].id, st.ctrs[i].state.Running != nil
	st.mu.Unlock()
	budget := preStopBudget(grace)
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || id == "" || !running || budget <= 0 {
		return stopTimeout(grace, 0)
	}
	logger := log.G(ctx).WithField("pod", st.key).WithField("container", c.Name)
	logger.Infof("running preStop hook (grace period %ds)", grace)
	start := time.Now()
	hookCtx, cancel := context.WithTimeout(ctx, budget)
	err := p.runHandler(hookCtx, st, c, id, c.Lifecycle.PreStop)
	cancel()
	elapsed := time.Since(start)
	timeout := stopTimeout(grace, elapsed)
	switch {
	case err != nil && hookCtx.Err() != nil:
		logger.Warnf("preStop hook not completed within the grace period (%ds); stopping with %ds", grace, timeout)
	case err != nil:
		logger.WithError(err).Warnf("preStop hook failed after %.1fs; stopping with %ds", elapsed.Seconds(), timeout)
	default:
		logger.Infof("preStop hook done after %.1fs; stopping with %ds", elapsed.Seconds(), timeout)
	}
	return timeout
}

// runHandler runs one lifecycle handler until it is done or ctx ends.
func (p *Provider) runHandler(ctx context.Context, st *podState, c *corev1.Container, id string, h *corev1.LifecycleHandler) error {
	switch {
	case h.Sleep != nil:
		if !sleepCtx(ctx, time.Duration(h.Sleep.Seconds)*time.Second) {
			return fmt.Errorf("sleep %ds interrupted: %w", h.Sleep.Seconds, context.Cause(ctx))
		}
		return nil
	case h.Exec != nil:
		code, out, err := p.exec(ctx, id, h.Exec.Command)
		if err != nil {
			return fmt.Errorf("exec %q: %w", h.Exec.Command, err)
		}
		if code != 0 {
			return fmt.Errorf("exec %q exited with %d: %q", h.Exec.Command, code, truncate(out, 256))
		}
		return nil
	case h.HTTPGet != nil:
		// As a kubelet's, an HTTP hook fails only when no response comes.
		if _, err := httpGet(ctx, st, c, h.HTTPGet); err != nil {
			return fmt.Errorf("httpGet %s: %w", h.HTTPGet.Path, err)
		}
		return nil
	case h.TCPSocket != nil:
		// A kubelet does not run tcpSocket hooks either (the API keeps the
		// field for compatibility only): it reports an invalid handler and
		// stops the container right away.
		return fmt.Errorf("tcpSocket lifecycle hooks are not supported (by a kubelet either); skipped")
	}
	return fmt.Errorf("lifecycle handler without an action; skipped")
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
