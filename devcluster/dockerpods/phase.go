package dockerpods

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// The pure part of a pod's status: its phase, the Initialized condition and
// the restart decision, from its containers' statuses, as a kubelet computes
// them (k8s.io/kubernetes pkg/kubelet getPhase and pkg/kubelet/status), for
// what this provider runs: init containers that run to completion (no
// sidecars) and app containers.

// Reasons a kubelet gives for init containers and the Initialized condition.
const (
	reasonPodInitializing          = "PodInitializing"
	reasonContainersNotInitialized = "ContainersNotInitialized"
)

// completed reports whether a container has run to completion (exit code 0).
func completed(s corev1.ContainerState) bool {
	return s.Terminated != nil && s.Terminated.ExitCode == 0
}

// failedOnce reports whether an init container's last run failed: it has
// terminated with a non-zero exit code, or waits to be restarted after one.
func failedOnce(s corev1.ContainerStatus) bool {
	if t := s.State.Terminated; t != nil {
		return t.ExitCode != 0
	}
	t := s.LastTerminationState.Terminated
	return s.State.Waiting != nil && t != nil && t.ExitCode != 0
}

// podPhase is a kubelet's phase for a pod with restart policy policy whose
// init and app containers have these statuses. deleting says the pod is
// being deleted; appStarted that its app containers were started (a
// container waiting between restarts then keeps the pod Running).
//
// An init container that failed fails the pod when the policy is Never (its
// app containers never start); otherwise the pod stays Pending while an init
// container is still to complete, failed ones being retried.
func podPhase(policy corev1.RestartPolicy, deleting, appStarted bool, inits, ctrs []corev1.ContainerStatus) corev1.PodPhase {
	pendingInit, failedInit, initRunning := 0, 0, false
	for _, s := range inits {
		switch {
		case completed(s.State):
		case failedOnce(s):
			failedInit++
		default:
			pendingInit++
			initRunning = initRunning || s.State.Running != nil
		}
	}
	if failedInit > 0 && policy == corev1.RestartPolicyNever {
		return corev1.PodFailed
	}

	running, waiting, allSucceeded := false, false, true
	for _, s := range ctrs {
		switch {
		case s.State.Running != nil:
			running = true
		case s.State.Waiting != nil:
			waiting = true
		case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
			allSucceeded = false
		}
	}
	switch {
	case deleting && !running && !initRunning:
		if allSucceeded && !waiting {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	case pendingInit > 0 || failedInit > 0:
		return corev1.PodPending
	case running:
		return corev1.PodRunning
	case waiting && appStarted:
		return corev1.PodRunning // between restarts
	case waiting:
		return corev1.PodPending
	case allSucceeded:
		return corev1.PodSucceeded
	}
	return corev1.PodFailed
}

// initializedCondition is a kubelet's Initialized condition (without
// LastTransitionTime): True without init containers, once every one has
// completed, or once an app container has started (a pod initialized once
// stays so); else False naming the init containers still to complete.
func initializedCondition(phase corev1.PodPhase, inits, ctrs []corev1.ContainerStatus) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}
	if len(inits) == 0 {
		return c
	}
	if phase == corev1.PodSucceeded {
		c.Reason = reasonPodCompleted
		return c
	}
	for _, s := range ctrs {
		if s.State.Running != nil || s.State.Terminated != nil {
			return c
		}
	}
	var incomplete []string
	for _, s := range inits {
		if !completed(s.State) {
			incomplete = append(incomplete, s.Name)
		}
	}
	if len(incomplete) > 0 {
		c.Status = corev1.ConditionFalse
		c.Reason = reasonContainersNotInitialized
		c.Message = fmt.Sprintf("containers with incomplete status: %s", incomplete)
	}
	return c
}

// shouldRestart says whether a container that exited with exitCode is
// started again under the pod's restart policy, as a kubelet decides: never
// while the pod is being deleted; an app container under Always (the
// default) or, after a failure, OnFailure; an init container after a failure
// unless the policy is Never (Always retries it like OnFailure, since it
// must complete once).
func shouldRestart(policy corev1.RestartPolicy, init bool, exitCode int32, deleting bool) bool {
	switch {
	case deleting:
		return false
	case init:
		return exitCode != 0 && policy != corev1.RestartPolicyNever
	case policy == corev1.RestartPolicyAlways || policy == "":
		return true
	}
	return policy == corev1.RestartPolicyOnFailure && exitCode != 0
}

// UnsupportedError is the refusal of a pod using what the dev kubelet does
// not run. virtual-kubelet reports it in the pod's status (reason
// ProviderFailed; the pod fails when its restart policy is Never).
type UnsupportedError struct{ What string }

func (e *UnsupportedError) Error() string { return "devcluster kubelet: " + e.What }

// unsupported returns an *UnsupportedError for a pod the provider cannot run
// as a kubelet would, else nil. Native sidecars (init containers with
// restartPolicy Always) would need an init container that keeps running,
// with probes and restarts, beside the app containers: not needed yet.
func unsupported(pod *corev1.Pod) error {
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return &UnsupportedError{What: fmt.Sprintf("init container %q has restartPolicy Always (a sidecar): sidecar containers are not supported; run it as an app container", c.Name)}
		}
	}
	return nil
}

// initializedBefore returns the terminated states of pod's init containers,
// in spec order, when its status (as the API server has it) says every one
// of them completed, else nil. A pod that comes back to a restarted nodes
// process keeps its volumes and address, so like a restarted kubelet, which
// finds them done, the provider does not run them again; it reports the
// states they ended in. A pod that was still initializing runs them all again.
func initializedBefore(pod *corev1.Pod) []corev1.ContainerStatus {
	if len(pod.Spec.InitContainers) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		i := slices.IndexFunc(pod.Status.InitContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == c.Name })
		if i < 0 || !completed(pod.Status.InitContainerStatuses[i].State) {
			return nil
		}
		out = append(out, *pod.Status.InitContainerStatuses[i].DeepCopy())
	}
	return out
}
