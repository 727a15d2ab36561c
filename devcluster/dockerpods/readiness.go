package dockerpods

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons a kubelet gives for the conditions it owns (the names are
// k8s.io/kubernetes pkg/kubelet/status's, so tools and tests that look for
// them find them).
const (
	reasonUnknownStatuses        = "UnknownContainerStatuses"
	reasonContainersNotReady     = "ContainersNotReady"
	reasonReadinessGatesNotReady = "ReadinessGatesNotReady"
	reasonPodCompleted           = "PodCompleted"
	reasonPodFailed              = "PodFailed"
)

// kubeletOwned reports whether a kubelet writes conditions of type t. Every
// other condition (a readiness gate's, which an operator sets through
// pods/status; DisruptionTarget, which the eviction API and the
// controller-manager set) belongs to someone else: the provider reports it
// as the API server has it and never drops or rewrites it.
func kubeletOwned(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled:
		return true
	}
	return false
}

// foreignConditions returns the conditions of conds the kubelet does not
// own, in their order, as a new slice.
func foreignConditions(conds []corev1.PodCondition) []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, c := range conds {
		if !kubeletOwned(c.Type) {
			out = append(out, *c.DeepCopy())
		}
	}
	return out
}

// withForeignConditions is the condition list to write: the kubelet-owned
// conditions of own followed by the foreign ones of api (the API server's
// copy), as a kubelet's status manager merges them. Foreign conditions in own
// are ignored, since they may be older than api's.
func withForeignConditions(own, api []corev1.PodCondition) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(own)+len(api))
	for _, c := range own {
		if kubeletOwned(c.Type) {
			out = append(out, c)
		}
	}
	return append(out, foreignConditions(api)...)
}

// containersReadyCondition is a kubelet's ContainersReady for a pod in phase
// with these container statuses (without LastTransitionTime): False once the
// pod is terminal, False naming the unready containers, True otherwise.
func containersReadyCondition(phase corev1.PodPhase, statuses []corev1.ContainerStatus) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse}
	switch phase {
	case corev1.PodSucceeded:
		c.Reason = reasonPodCompleted
		return c
	case corev1.PodFailed:
		c.Reason = reasonPodFailed
		return c
	}
	var unready []string
	for _, s := range statuses {
		if !s.Ready {
			unready = append(unready, s.Name)
		}
	}
	switch {
	case len(statuses) == 0:
		c.Reason = reasonUnknownStatuses
	case len(unready) > 0:
		c.Reason, c.Message = reasonContainersNotReady, fmt.Sprintf("containers with unready status: %s", unready)
	default:
		c.Status = corev1.ConditionTrue
	}
	return c
}

// podReadyCondition is a kubelet's Ready (without LastTransitionTime): what
// ContainersReady says while it is not True; then True only if every
// readiness gate's condition is in conds with status True, else False with
// a message naming each gate that is missing or not True. This is what lets
// an operator hold a pod out of Service endpoints and PodDisruptionBudget
// counts until it has caught up, although its containers are ready.
func podReadyCondition(gates []corev1.PodReadinessGate, containersReady corev1.PodCondition, conds []corev1.PodCondition) corev1.PodCondition {
	if containersReady.Status != corev1.ConditionTrue {
		return corev1.PodCondition{Type: corev1.PodReady, Status: containersReady.Status,
			Reason: containersReady.Reason, Message: containersReady.Message}
	}
	var unready []string
	for _, g := range gates {
		c := findCondition(conds, g.ConditionType)
		switch {
		case c == nil:
			unready = append(unready, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case c.Status != corev1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, c.Status))
		}
	}
	if len(unready) > 0 {
		return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
			Reason: reasonReadinessGatesNotReady, Message: strings.Join(unready, ", ")}
	}
	return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
}

// findCondition returns the condition of type t in conds, or nil.
func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
