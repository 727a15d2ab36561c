package reconciler

import (
	"context"

	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Restarting a durable node on its volume (plan/restart.go decides when): the operator, not
// the kubelet, brings a server back, so it can order the restart after a failover.

// Membership is the port the restart concern needs beyond the topology's: members that moved
// to new addresses introduced to each other again.
type Membership interface {
	// Reintroduce MEETs every pair of nodes that do not know each other at their current
	// addresses. It touches no slot, epoch or role, and refuses a node still loading its data
	// or one that knows no other node (a one-node cluster of its own is never MET).
	Reintroduce(ctx context.Context, nodes []model.Node) error
}

// restartPods brings the named durable nodes back on their volumes: a pod whose server exited
// is deleted first (its name is taken until it goes; its deletion wakes the next pass), and a
// node without a pod gets a new one of the same name from its fixed spec, mounting the same
// claim. Each restart is counted on the node (status.restarts, and status.failedStarts until
// its server answers again with its identity).
func (r *Reconciler) restartPods(ctx context.Context, p *pass, names []string) error {
	var create []views.Node
	for _, name := range names {
		n, err := p.node(name)
		if err != nil {
			return err
		}
		pod := p.pods[name]
		switch {
		case pod == nil:
			create = append(create, n)
		case pod.DeletionTimestamp == nil:
			err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return err
			}
			p.log.Info("deleted exited pod to restart it on its volume", "pod", name)
		}
	}
	// The pod cache may not show a pod made by the last pass yet: a restart is counted only
	// for a pod that is really made now, or one real restart would count twice towards
	// maxFailedStarts.
	var made []views.Node
	for _, n := range create {
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: p.key.Namespace, Name: n.Name()}, &corev1.Pod{})
		switch {
		case apierrors.IsNotFound(err):
			made = append(made, n)
		case err != nil:
			return err
		}
	}
	if err := r.createPodsAtOnce(ctx, p, made); err != nil {
		return err
	}
	for _, n := range made {
		if err := r.setNodeStatus(ctx, n, func(s *views.NodeStatus) { s.Restarts++; s.FailedStarts++ }); err != nil {
			return err
		}
		r.event(p, n.U, ReasonNodeRestarted, "RestartNode", "Restarted ValkeyNode %s on its volume (restart %d)", n.Name(), n.Status().Restarts)
	}
	return nil
}

// durable reports whether node n keeps its data on a volume that outlives its pod: its spec
// is durable, its claim is there and not being deleted, and its server has run.
func (p *pass) durable(n views.Node) bool {
	c := p.claimOf(n)
	return n.Spec().Persistence.Durable() && c != nil && c.DeletionTimestamp == nil && n.Status().NodeID != ""
}
