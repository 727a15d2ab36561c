package reconciler

import (
	"context"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ensureBudgets keeps one PodDisruptionBudget per shard (render.ShardBudget): one for every
// shard of the topology being built or kept, and one for every shard that still has nodes (a
// departing shard stays protected while its slots drain). A budget whose shard has neither
// is deleted. Each is applied server-side like the cluster's other objects, and only when
// it differs, so an idle cluster writes nothing.
func (r *Reconciler) ensureBudgets(ctx context.Context, p *pass) *outcome {
	shards, replicas := p.cluster.Shards(), p.cluster.ReplicasPerShard()
	if p.state == views.StateCreating {
		t := p.target()
		shards, replicas = t.Shards, t.ReplicasPerShard
	}
	want := map[int]bool{}
	for s := range shards {
		want[s] = true
	}
	for _, n := range p.nodes {
		want[n.Shard()] = true
	}
	for shard := range want {
		err := apply(ctx, r, p, owned[*policyv1.PodDisruptionBudget, *policyv1ac.PodDisruptionBudgetApplyConfiguration]{
			kind: "PodDisruptionBudget", name: render.BudgetName(p.key.Name, shard), live: &policyv1.PodDisruptionBudget{},
			desire: func(bool) (*policyv1ac.PodDisruptionBudgetApplyConfiguration, error) {
				return render.ShardBudget(p.key.Name, p.key.Namespace, shard, replicas).WithOwnerReferences(p.clusterOwner()), nil
			},
			extract: policyv1ac.ExtractPodDisruptionBudget,
		})
		if out := r.applied(p, "PodDisruptionBudget", err); out != nil {
			return out
		}
	}
	return r.applied(p, "PodDisruptionBudget", r.deleteBudgets(ctx, p, want))
}

// deleteBudgets deletes the cluster's budgets of shards not in keep.
func (r *Reconciler) deleteBudgets(ctx context.Context, p *pass, keep map[int]bool) error {
	list := &policyv1.PodDisruptionBudgetList{}
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace), client.MatchingLabels{render.LabelCluster: p.key.Name}); err != nil {
		return err
	}
	for i := range list.Items {
		b := &list.Items[i]
		shard, ok := render.BudgetShard(p.key.Name, b.Name)
		if !ok || keep[shard] || !metav1.IsControlledBy(b, p.obj) {
			continue
		}
		if err := r.client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		p.log.Info("deleted", "kind", "PodDisruptionBudget", "name", b.Name)
	}
	return nil
}
