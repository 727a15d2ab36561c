package reconciler

import (
	"context"
	"sort"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/reconciler/views"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectTimeout bounds how long a node created (deleted) by this operator may stay invisible
// in (present in) the cache before it is no longer waited for.
const expectTimeout = time.Minute

// expectation is a write to a ValkeyNode the informer cache has not shown yet.
type expectation struct {
	at      time.Time
	present bool // created: wait until the cache shows it; deleted: until it no longer does
}

// loadMembers lists the cluster's ValkeyNodes and their pods. It ends the pass while a node
// this operator created (deleted) is not (still) in the cache: acting on a stale list could
// double a shard or retire a node twice.
func (r *Reconciler) loadMembers(ctx context.Context, p *pass) *outcome {
	list := views.NewNodeListObject()
	sel := client.MatchingLabels{render.LabelCluster: p.key.Name}
	if err := r.client.List(ctx, list, client.InNamespace(p.key.Namespace), sel); err != nil {
		return done(ctrl.Result{}, err)
	}
	seen := map[string]bool{}
	p.nodes, p.nodesLoaded = nil, true
	for i := range list.Items {
		n := views.Node{U: &list.Items[i]}
		if !metav1.IsControlledBy(n.U, p.obj) {
			continue
		}
		seen[n.Name()] = true
		p.nodes = append(p.nodes, n)
	}
	sort.Slice(p.nodes, func(i, j int) bool {
		if p.nodes[i].Shard() != p.nodes[j].Shard() {
			return p.nodes[i].Shard() < p.nodes[j].Shard()
		}
		return p.nodes[i].Name() < p.nodes[j].Name()
	})
	if r.pendingWrites(p.key, seen) > 0 {
		return done(ctrl.Result{RequeueAfter: r.opts.PollInterval}, nil)
	}

	p.formed = len(p.nodes) > 0
	for _, n := range p.nodes {
		if n.Status().Lifecycle != views.LifecycleActive {
			p.formed = false
		}
	}

	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(p.key.Namespace), sel); err != nil {
		return done(ctrl.Result{}, err)
	}
	p.pods = map[string]*corev1.Pod{}
	for i := range pods.Items {
		p.pods[pods.Items[i].Name] = &pods.Items[i]
	}
	if err := r.loadClaims(ctx, p); err != nil {
		return done(ctrl.Result{}, err)
	}
	if err := r.loadMaintenance(ctx, p); err != nil {
		return done(ctrl.Result{}, err)
	}
	return nil
}

// expect remembers a node created (present) or deleted in this pass until the cache agrees.
func (r *Reconciler) expect(p *pass, name string, present bool) {
	r.memory.with(p.key, func(c *clusterMemory) {
		if c.expected == nil {
			c.expected = map[string]expectation{}
		}
		c.expected[name] = expectation{at: time.Now(), present: present}
	})
}

// pendingWrites drops the expectations the cache now meets (or that timed out) and counts
// the rest.
func (r *Reconciler) pendingWrites(cluster types.NamespacedName, seen map[string]bool) (pending int) {
	r.memory.peek(cluster, func(c *clusterMemory) {
		for name, e := range c.expected {
			if seen[name] == e.present || time.Since(e.at) > expectTimeout {
				delete(c.expected, name)
			}
		}
		pending = len(c.expected)
	})
	return pending
}

// setNodeStatus applies mutate to a node's status and writes it only if it changed.
func (r *Reconciler) setNodeStatus(ctx context.Context, n views.Node, mutate func(*views.NodeStatus)) error {
	have := n.Status()
	want := have
	mutate(&want)
	if want == have {
		return nil
	}
	n.SetStatus(want)
	return r.client.Status().Update(ctx, n.U)
}
