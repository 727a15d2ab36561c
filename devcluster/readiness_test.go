//go:build envtest

package devcluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/gomomento/valkey-operator/devcluster/devtest"
	"github.com/gomomento/valkey-operator/devcluster/testimage"
	"github.com/gomomento/valkey-operator/internal/poll"
)

const (
	inSyncGate = corev1.PodConditionType("valkey.gomomento.com/in-sync")
	// customCondition is owned by nobody the dev cluster runs: only the test
	// writes it, so any change to it is the kubelet's doing.
	customCondition = corev1.PodConditionType("example.com/custom")
)

// TestDevClusterHonoursReadinessGates checks that the dev kubelet treats a
// pod's readiness gates and the conditions it does not own as a kubelet
// does: Ready stays False (ReadinessGatesNotReady) while the containers are
// ready and the gate's condition is missing or False, follows the gate
// within a moment of a pods/status PATCH by someone else, and the kubelet's
// own status writes leave foreign conditions exactly as they were patched.
func TestDevClusterHonoursReadinessGates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	image, err := testimage.Ensure(ctx)
	require.NoError(t, err)
	env := devtest.Start(t, devtest.Options{ValkeyImage: image})
	pods := env.Kube.CoreV1().Pods("default")

	pod, err := pods.Create(ctx, gatedPod("gated"), metav1.CreateOptions{})
	require.NoError(t, err)
	// Set before the pod even runs: every status write of the kubelet's
	// (started, containers ready, each Ready flip below) comes after it.
	custom := corev1.PodCondition{Type: customCondition, Status: corev1.ConditionTrue, Reason: "SetByTest",
		Message: "owned by the test", LastTransitionTime: metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))}
	patchConditions(ctx, t, env.Kube, pod, custom)

	p := awaitPod(ctx, t, env.Kube, pod, 60*time.Second, "containers ready, Ready held back by the gate", func(p *corev1.Pod) bool {
		return conditionStatus(p, corev1.ContainersReady) == corev1.ConditionTrue
	})
	ready := findCondition(p, corev1.PodReady)
	require.NotNil(t, ready)
	assert.Equal(t, corev1.ConditionFalse, ready.Status, "the gate's condition does not exist yet")
	assert.Equal(t, "ReadinessGatesNotReady", ready.Reason)
	assert.Contains(t, ready.Message, string(inSyncGate))
	assertCustomKept(t, p, custom)

	for _, step := range []struct {
		gate      corev1.ConditionStatus
		wantReady corev1.ConditionStatus
	}{
		{corev1.ConditionTrue, corev1.ConditionTrue},
		{corev1.ConditionFalse, corev1.ConditionFalse},
		{corev1.ConditionTrue, corev1.ConditionTrue},
	} {
		gate := corev1.PodCondition{Type: inSyncGate, Status: step.gate, Reason: "PatchedByTest",
			LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))} // the API keeps seconds
		patched := time.Now()
		patchConditions(ctx, t, env.Kube, pod, gate)
		p := awaitPod(ctx, t, env.Kube, pod, 2*time.Second, fmt.Sprintf("Ready %s after the gate turned %s", step.wantReady, step.gate),
			func(p *corev1.Pod) bool { return conditionStatus(p, corev1.PodReady) == step.wantReady })
		t.Logf("figure: Ready %s %dms after the gate's condition was patched %s", step.wantReady, time.Since(patched).Milliseconds(), step.gate)
		got := findCondition(p, inSyncGate)
		require.NotNil(t, got, "the kubelet's write keeps the gate's condition")
		assert.Equal(t, gate.Status, got.Status, "gate condition as patched")
		assert.Equal(t, gate.Reason, got.Reason, "gate condition as patched")
		assert.True(t, gate.LastTransitionTime.Equal(&got.LastTransitionTime), "gate condition as patched")
		if step.wantReady == corev1.ConditionFalse {
			assert.Equal(t, "ReadinessGatesNotReady", findCondition(p, corev1.PodReady).Reason)
		}
		assertCustomKept(t, p, custom)
	}

	// Settled: the kubelet's status writes come back to it as pod updates;
	// they must not make it write again.
	p, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name,
		ResourceVersion: p.ResourceVersion, TimeoutSeconds: ptr(int64(3))})
	require.NoError(t, err)
	defer w.Stop()
	var writes int
	for ev := range w.ResultChan() {
		if ev.Type == watch.Modified {
			writes++
		}
	}
	assert.Zero(t, writes, "status writes of a settled pod in 3s (an update loop?)")
}

// gatedPod serves on 7000, ready once it listens, with the in-sync gate.
func gatedPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: int64p(5),
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: inSyncGate}},
			Containers: []corev1.Container{{
				Name: "main", Image: testimage.Image, Args: []string{"serve", "--port", "7000"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(7000)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// patchConditions sets conds on the pod through the pods/status subresource,
// as an operator does: a strategic merge patch, which merges conditions by
// type and leaves the others alone.
func patchConditions(ctx context.Context, t *testing.T, kube kubernetes.Interface, pod *corev1.Pod, conds ...corev1.PodCondition) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID}, // refuse to patch another pod of that name
		"status":   map[string]any{"conditions": conds},
	})
	require.NoError(t, err)
	_, err = kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// awaitPod polls the pod until done holds or timeout passes, and returns the
// copy that satisfied it.
func awaitPod(ctx context.Context, t *testing.T, kube kubernetes.Interface, pod *corev1.Pod, timeout time.Duration, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	seen := "nothing yet"
	err := poll.Until(ctx, 20*time.Millisecond, timeout, what, func(ctx context.Context) (bool, string, error) {
		p, err := kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, seen + ", then " + err.Error(), nil
		}
		got, seen = p, describeConditions(p)
		return done(p), seen, nil
	})
	require.NoError(t, err)
	return got
}

// assertCustomKept checks the test's own condition is still as it was set.
func assertCustomKept(t *testing.T, p *corev1.Pod, want corev1.PodCondition) {
	t.Helper()
	got := findCondition(p, want.Type)
	if !assert.NotNil(t, got, "foreign condition %s dropped by a status write: %s", want.Type, describeConditions(p)) {
		return
	}
	assert.Equal(t, want.Status, got.Status)
	assert.Equal(t, want.Reason, got.Reason)
	assert.Equal(t, want.Message, got.Message)
	assert.True(t, want.LastTransitionTime.Equal(&got.LastTransitionTime), "transition time %v, want %v", got.LastTransitionTime, want.LastTransitionTime)
}

func findCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func conditionStatus(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	if c := findCondition(p, t); c != nil {
		return c.Status
	}
	return ""
}

func describeConditions(p *corev1.Pod) string {
	s := "phase " + string(p.Status.Phase) + ":"
	for _, c := range p.Status.Conditions {
		s += fmt.Sprintf(" %s=%s", c.Type, c.Status)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
	}
	return s
}

func ptr[T any](v T) *T { return &v }
