package reconciler

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/render"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod is Ready only when its server is an in-sync member of the cluster: its readiness gate
// (render.InSyncCondition) is a condition the operator sets from what each pass observes
// (plan.InSync). The shard's PodDisruptionBudget counts Ready pods, so an eviction can never
// take a shard's last in-sync copy while a replacement is still loading its full sync.

// inSyncReason and outOfSyncReason are the reasons on the operator's pod condition.
const (
	inSyncReason    = "InSync"
	outOfSyncReason = "NotInSync"
)

// inSyncGated reports whether the pod carries the readiness gate. Pods made before the gate
// existed do not: their readiness is the server's alone, and the operator leaves them so.
func inSyncGated(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == render.InSyncCondition {
			return true
		}
	}
	return false
}

// podInSync reports the pod's in-sync condition as last set, and whether it is set at all.
func podInSync(pod *corev1.Pod) (inSync, set bool) {
	c, set := podCondition(pod, render.InSyncCondition)
	return c.Status == corev1.ConditionTrue, set
}

// markInSync brings each gated pod's in-sync condition to what this pass decided. Only
// changes are written (one status patch per pod that changed), so an idle cluster writes
// nothing. A failed write is logged and tried again by the next pass: readiness must never
// stop the pass that heals the cluster.
func (r *Reconciler) markInSync(ctx context.Context, p *pass, o plan.Observed) {
	for name, want := range plan.InSync(o) {
		pod := p.pods[name]
		if pod == nil || pod.DeletionTimestamp != nil {
			continue
		}
		// An unset condition already means "not in sync" (the pod is not Ready): a new
		// pod is written once, when it turns in sync.
		if have, set := podInSync(pod); !inSyncGated(pod) || have == want && (set || !want) {
			continue
		}
		if err := r.setInSync(ctx, pod, want); err != nil {
			p.log.Error(err, "setting the pod's in-sync condition", "pod", name, "inSync", want)
			continue
		}
		p.log.V(1).Info("in-sync condition", "pod", name, "inSync", want)
	}
}

// setInSync patches the pod's in-sync condition through the status subresource. A strategic
// merge patch merges conditions by type, so the kubelet's own conditions are left alone.
func (r *Reconciler) setInSync(ctx context.Context, pod *corev1.Pod, inSync bool) error {
	status, reason, message := corev1.ConditionFalse, outOfSyncReason, "the server is not an in-sync member of its shard"
	if inSync {
		status, reason, message = corev1.ConditionTrue, inSyncReason, "the server holds an in-sync copy of its shard"
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: render.InSyncCondition, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return err
	}
	err = r.client.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, patch))
	if apierrors.IsNotFound(err) {
		return nil // the pod went meanwhile
	}
	if err != nil {
		return fmt.Errorf("patching pod %s status: %w", pod.Name, err)
	}
	return nil
}

// podCondition finds a pod condition by type.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) (corev1.PodCondition, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}
