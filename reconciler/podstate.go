package reconciler

import (
	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	corev1 "k8s.io/api/core/v1"
)

// podState classifies a pod for the planner: ready, still starting (with the scheduler's
// reason when it cannot be placed), lost (being deleted: its data is going, its process may
// still answer for a while) or gone (its container stopped for good; pods never restart).
func podState(pod *corev1.Pod) (plan.Pod, string) {
	switch {
	case serverExited(pod):
		return plan.PodGone, ""
	case pod.DeletionTimestamp != nil:
		return plan.PodLost, ""
	case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && podReady(pod):
		return plan.PodReady, ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return plan.PodStarting, c.Message
		}
	}
	return plan.PodStarting, ""
}

// serverExited reports that the pod's server is gone for good: the pod has stopped, or its
// server container has terminated (pods never restart it). The pod's phase alone would not
// say so while the exporter sidecar still runs: a pod stays Running as long as any of its
// containers does.
func serverExited(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	cs := serverStatus(pod)
	return cs != nil && cs.State.Terminated != nil
}

// podReady reports whether the pod's server is ready: its readiness probe (TCP on the client
// port) passed, so the server accepts connections. Running alone only means the container
// started; dialing then races the server's start-up (connection refused, a spurious
// BootstrapFailed Warning Event and a poll interval lost). The Ready transition is a Pod
// event, so waiting for it costs no extra latency. It is the server container's own
// readiness when the pod reports it: the pod's Ready condition also waits for the exporter
// sidecar, and a sidecar that failed (an image without the exporter) must not take a
// serving server out of the cluster.
func podReady(pod *corev1.Pod) bool {
	if cs := serverStatus(pod); cs != nil {
		return cs.Ready
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serverStatus is the status of the pod's server container, nil until the kubelet reports it.
func serverStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == render.ContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}
