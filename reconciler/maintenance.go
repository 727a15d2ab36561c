package reconciler

import (
	"context"
	"slices"

	"github.com/gomomento/valkey-operator/reconciler/render"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A Kubernetes node going into maintenance is a signal the operator acts on before any
// eviction does: the servers on it are replaced like stale ones (plan.Node.Cordoned), a
// replacement first, so `kubectl drain` finds shards that no longer need the pods there,
// and a shard without replicas (whose budget never lets its pod be evicted) is moved at all.

// autoscalerDeletionTaint is the taint the cluster autoscaler puts on a node it is about to
// drain and remove.
const autoscalerDeletionTaint = "ToBeDeletedByClusterAutoscaler"

// inMaintenance reports whether a node is being emptied: cordoned (`kubectl cordon`, `kubectl
// drain`) or tainted for removal by the cluster autoscaler.
func inMaintenance(node *corev1.Node) bool {
	if node.Spec.Unschedulable {
		return true
	}
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == autoscalerDeletionTaint || t.Key == corev1.TaintNodeUnschedulable
	})
}

// loadMaintenance records which of the Kubernetes nodes running the pass's pods are in
// maintenance, their zones (zones.go) and addresses (external.go). A node the cache does not show (deleted
// meanwhile) is not in maintenance: its pods are lost and replaced anyway.
func (r *Reconciler) loadMaintenance(ctx context.Context, p *pass) error {
	p.maintenance, p.zones, p.nodeAddrs = map[string]bool{}, map[string]string{}, map[string]string{}
	for _, pod := range p.pods {
		name := pod.Spec.NodeName
		if name == "" {
			continue
		}
		if _, seen := p.maintenance[name]; seen {
			continue
		}
		node := &corev1.Node{}
		err := r.client.Get(ctx, types.NamespacedName{Name: name}, node)
		switch {
		case apierrors.IsNotFound(err):
			p.maintenance[name] = false
		case err != nil:
			return err
		default:
			p.maintenance[name] = inMaintenance(node)
			p.zones[name] = nodeZone(node)
			p.nodeAddrs[name] = render.NodeAddress(node)
		}
	}
	return nil
}

// maintenanceChanged passes only node events that change whether the node is in
// maintenance: a node's status heartbeats must not wake every cluster on it.
func maintenanceChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return inMaintenance(e.Object.(*corev1.Node)) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return inMaintenance(e.ObjectOld.(*corev1.Node)) != inMaintenance(e.ObjectNew.(*corev1.Node))
		},
	}
}

// nodeToClusters wakes every cluster with a pod on the node.
func (r *Reconciler) nodeToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.MatchingLabels{render.LabelManagedBy: render.ManagedBy}); err != nil {
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var out []reconcile.Request
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != o.GetName() {
			continue
		}
		for _, req := range labelledToCluster(ctx, pod) {
			if !seen[req.NamespacedName] {
				seen[req.NamespacedName] = true
				out = append(out, req)
			}
		}
	}
	return out
}

// nodeSchedulingOnly trims a cached Node to what inMaintenance, nodeZone and render.NodeAddress read:
// the rest of a node's status (images, conditions) is most of its size and changes with every
// heartbeat; its addresses are small and stay.
func nodeSchedulingOnly(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	return &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
		},
		Spec:   corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status: corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}
