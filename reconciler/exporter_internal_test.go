package reconciler

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodStateWithSidecar: with the exporter sidecar a pod's phase and Ready condition
// describe both containers, so the planner reads the server container's own status: a server
// that exited is gone although the sidecar keeps the pod Running, and a serving server is
// ready although a failed sidecar keeps the pod not Ready. Pods whose statuses are not
// reported fall back to the pod's condition.
func TestPodStateWithSidecar(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	pod := func(podReady bool, statuses ...corev1.ContainerStatus) *corev1.Pod {
		cond := corev1.ConditionFalse
		if podReady {
			cond = corev1.ConditionTrue
		}
		return &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}},
			ContainerStatuses: statuses}}
	}
	server := func(st corev1.ContainerState, ready bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: render.ContainerName, State: st, Ready: ready}
	}
	exporter := func(st corev1.ContainerState, ready bool) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: render.ExporterContainerName, State: st, Ready: ready}
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		want   plan.Pod
		exited bool
	}{
		{"no statuses reported: the pod's condition", pod(true), plan.PodReady, false},
		{"no statuses, not ready", pod(false), plan.PodStarting, false},
		{"both containers ready", pod(true, server(running, true), exporter(running, true)), plan.PodReady, false},
		{"the sidecar failed, the server serves", pod(false, server(running, true), exporter(exited, false)), plan.PodReady, false},
		{"the server starting", pod(false, server(running, false), exporter(running, true)), plan.PodStarting, false},
		{"the server exited, the sidecar runs on", pod(false, server(exited, false), exporter(running, true)), plan.PodGone, true},
		{"a pod without a sidecar whose server exited", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, plan.PodGone, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := podState(tc.pod)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.exited, serverExited(tc.pod))
		})
	}
}

// TestExporterLogins: the pass reads the password hash each exporter was started with from
// its pod's annotation; pods without the exporter have none.
func TestExporterLogins(t *testing.T) {
	node := func(name string) views.Node {
		u := views.NewNodeObject()
		u.SetName(name)
		return views.Node{U: u}
	}
	p := &pass{
		nodes: []views.Node{node("a"), node("b"), node("c")},
		pods: map[string]*corev1.Pod{
			"a": {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{render.AnnotationExporterPassword: "h1", "team": "x"}}},
			"b": {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"team": "x"}}},
		},
	}
	assert.Equal(t, map[string]string{"a": "h1"}, exporterLogins(p))
}
