package dockerpods

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGraceArithmeticIsKubelets(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	assert.Equal(t, 30, deletionGrace(&corev1.Pod{}), "default")
	assert.Equal(t, 20, deletionGrace(&corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: i64(20)}}))
	assert.Equal(t, 7, deletionGrace(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: i64(7)},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: i64(20)},
	}), "the deletion's grace period wins")
	assert.Equal(t, 1, deletionGrace(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: i64(0)}}),
		"a kubelet's pod workers never use less than 1s")

	assert.Equal(t, 30*time.Second, preStopBudget(30), "the hook may use the whole grace period")
	assert.Zero(t, preStopBudget(0), "no hook without a grace period")

	for _, c := range []struct {
		grace   int
		elapsed time.Duration
		want    int
	}{
		{30, 0, 30},                       // no hook: the whole grace period
		{30, 3 * time.Second, 27},         // sleep 3
		{30, 3900 * time.Millisecond, 27}, // whole seconds elapsed, truncated
		{30, 29 * time.Second, 2},         // at least 2s
		{30, 30 * time.Second, 2},         // hook used it all
		{5, 90 * time.Second, 2},          // overran (it is bounded; still at least 2s)
		{1, 0, 2},                         // at least 2s even without a hook
		{0, 0, 2},
	} {
		assert.Equal(t, c.want, stopTimeout(c.grace, c.elapsed), "grace %d, hook %s", c.grace, c.elapsed)
	}
}

// TestPreStopHookRunsWithinGrace runs the hooks that need no container
// runtime (sleep; tcpSocket, which is only logged) through preStop.
func TestPreStopHookRunsWithinGrace(t *testing.T) {
	ctx := context.Background()
	p := &Provider{}
	state := func(h *corev1.LifecycleHandler, running bool) *podState {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
		if h != nil {
			pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: h}
		}
		st := newPodState("ns/pod", pod, netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1"), t.TempDir())
		st.ctrs[0].id = "c1"
		if running {
			st.ctrs[0].state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		}
		return st
	}
	sleep := func(s int64) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}
	}
	timed := func(st *podState, grace int) (int, time.Duration) {
		start := time.Now()
		timeout := p.preStop(ctx, st, 0, grace)
		return timeout, time.Since(start)
	}

	timeout, took := timed(state(sleep(1), true), 30)
	t.Logf("sleep 1 in grace 30: %.2fs, then SIGTERM->SIGKILL %ds", took.Seconds(), timeout)
	assert.GreaterOrEqual(t, took, time.Second, "the hook sleeps before SIGTERM")
	assert.Equal(t, 29, timeout)

	timeout, took = timed(state(sleep(60), true), 1)
	t.Logf("sleep 60 in grace 1: %.2fs, then SIGTERM->SIGKILL %ds", took.Seconds(), timeout)
	assert.GreaterOrEqual(t, took, time.Second)
	assert.Less(t, took, 30*time.Second, "bounded by the grace period")
	assert.Equal(t, 2, timeout, "the minimum window after the hook used the grace period")

	// Below, a timeout of the whole 30s means the hook took under a second.
	timeout, _ = timed(state(&corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{}}, true), 30)
	assert.Equal(t, 30, timeout, "tcpSocket hooks are logged and skipped, as by a kubelet")
	timeout, _ = timed(state(sleep(5), false), 30)
	assert.Equal(t, 30, timeout, "no hook for a container that does not run")
	timeout, _ = timed(state(nil, true), 30)
	assert.Equal(t, 30, timeout, "no hook")
}
