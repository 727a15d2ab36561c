package reconciler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/reconciler/views"
	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Topology is the port of the topology concern: the writes that form the cluster, add and
// remove its nodes and move its slots.
type Topology interface {
	// Bootstrap forms the cluster from nodes grouped by their Shard; idempotent.
	Bootstrap(ctx context.Context, nodes []model.Node, shards int) error
	// BootstrapSlots is Bootstrap with each shard's slot ranges given (a cluster restored
	// from a backup forms with the ranges the backup recorded).
	BootstrapSlots(ctx context.Context, nodes []model.Node, shards int, layout [][]model.SlotRange) error
	// Settle puts nodes at their configured cluster-node-timeout with replica failover on,
	// as Bootstrap leaves them when it returns.
	Settle(ctx context.Context, nodes []model.Node) error
	// Replicate makes node name a replica of its shard's slot-holding primary (MEET first).
	Replicate(ctx context.Context, nodes []model.Node, name string, shard int) error
	// Rebalance moves slots with their keys to an even share, draining the primaries named
	// in leaving; it first finishes any move an earlier run left open. It counts what it
	// moved, also when it fails part-way.
	Rebalance(ctx context.Context, nodes []model.Node, leaving []string) (valkeyops.MoveStats, error)
	// RemoveNode makes every other node forget a node that holds no slots (its pod goes next).
	RemoveNode(ctx context.Context, nodes []model.Node, name string) error
	// AssignSlots gives slots nobody owns to the empty primary name (MEET first).
	AssignSlots(ctx context.Context, nodes []model.Node, name string, slots []model.SlotRange) error
	// Forget makes every reachable node forget the given node IDs.
	Forget(ctx context.Context, nodes []model.Node, ids []string) error
}

// Failovers is the port of the handovers: a shard's primary role moved to a replica.
type Failovers interface {
	// Failover hands a primary's slots to its best in-sync replica (graceful CLUSTER FAILOVER).
	Failover(ctx context.Context, nodes []model.Node, primary string) error
	// ForceFailover promotes a replica by a vote started at once (its primary's process has
	// exited; a majority of primaries survives to vote).
	ForceFailover(ctx context.Context, nodes []model.Node, replica string) error
	// Takeover promotes a replica without a vote (its primary is gone and too few primaries
	// survive to elect it).
	Takeover(ctx context.Context, nodes []model.Node, replica string) error
}

// perform carries out one planned topology action through the Topology and Failovers ports
// (a Rebalance runs in the background instead: tasks.go).
func (r *Reconciler) perform(ctx context.Context, p *pass, a plan.Action) error {
	switch a.Kind {
	case plan.CreateNodes:
		return r.createNodes(ctx, p, a.Shards, false)
	case plan.Join:
		return p.valkey.Topology.Bootstrap(ctx, p.joinable(), p.cluster.Shards())
	case plan.Replicate:
		n, err := p.node(a.Node)
		if err != nil {
			return err
		}
		return p.valkey.Topology.Replicate(ctx, p.members, a.Node, n.Shard())
	case plan.StopServer:
		return r.stopServer(ctx, p, a.Node)
	case plan.Remove:
		return p.valkey.Topology.RemoveNode(ctx, p.members, a.Node)
	case plan.Failover:
		return p.valkey.Failovers.Failover(ctx, p.members, a.Node)
	case plan.Takeover:
		return p.valkey.Failovers.Takeover(ctx, p.members, a.Node)
	case plan.ForceFailover:
		return p.valkey.Failovers.ForceFailover(ctx, p.members, a.Node)
	case plan.DropSlots:
		p.raise(ReasonSlotsLost, "DropSlots", a.Reason)
		return p.valkey.Topology.Forget(ctx, p.members, a.IDs)
	case plan.AssignSlots:
		return p.valkey.Topology.AssignSlots(ctx, p.members, a.Node, a.Slots)
	case plan.Forget:
		return p.valkey.Topology.Forget(ctx, p.members, a.IDs)
	case plan.ForgetStrangers:
		p.raise(ReasonStranger, "ForgetStrangers", a.Reason)
		var tell []model.Node // a replica cannot forget its own primary: it is replaced
		for _, m := range p.members {
			if !slices.Contains(a.Nodes, m.Name) {
				tell = append(tell, m)
			}
		}
		if err := p.valkey.Topology.Forget(ctx, tell, a.IDs); err != nil {
			return err
		}
		return r.setLifecycle(ctx, p, a.Nodes, views.LifecycleLeaving)
	case plan.MarkActive, plan.MarkLeaving:
		if a.Kind == plan.MarkActive {
			// A node turns Active only at its configured settings: Bootstrap lowers a
			// joining node's timeout and puts it back before it returns, but if the operator
			// stopped in between, the next pass finds the node joined and plans this, not
			// another Bootstrap. Only nodes not yet Active on the API server are settled, so
			// a pass planned from a cache that has not seen the last MarkActive yet does
			// nothing twice (its status write would only conflict afterwards).
			if err := r.requireNotYetActive(ctx, p, a.Nodes); err != nil {
				return err
			}
			if err := p.valkey.Topology.Settle(ctx, p.membersNamed(a.Nodes)); err != nil {
				return err
			}
		}
		life := views.LifecycleActive
		if a.Kind == plan.MarkLeaving {
			life = views.LifecycleLeaving
		}
		if err := r.setLifecycle(ctx, p, a.Nodes, life); err != nil {
			return err
		}
		if a.DataLost > 0 {
			// Said once: the next pass finds these nodes Leaving, and the replacements
			// hold no data to lose.
			p.raise(ReasonSlotsLost, "DataLost", fmt.Sprintf("every copy of the cluster's data was lost at %s (all %d nodes gone); the cluster is formed again, empty",
				r.opts.Now().UTC().Format(time.RFC3339), a.DataLost))
		}
		return nil
	case plan.RestartPods:
		return r.restartPods(ctx, p, a.Nodes)
	case plan.Reintroduce:
		return p.valkey.Membership.Reintroduce(ctx, p.membersNamed(a.Nodes))
	case plan.Delete:
		n, err := p.node(a.Node)
		if err != nil {
			return err
		}
		if err := r.deleteNode(ctx, p, n); err != nil {
			return err
		}
		r.event(p, n.U, ReasonNodeRetired, "DeleteNode", "Retired ValkeyNode %s of shard %d", n.Name(), n.Shard())
		return nil
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}

// stopServer deletes the pod of a Leaving node, keeping the node: its server goes through its
// pod's preStop and exits, and the planner forgets it then (plan.StopServer).
func (r *Reconciler) stopServer(ctx context.Context, p *pass, name string) error {
	pod := p.pods[name]
	if pod == nil || pod.DeletionTimestamp != nil {
		return nil
	}
	if err := r.client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	r.event(p, pod, ReasonNodeRetired, "StopServer", "Deleted Pod %s of leaving ValkeyNode %s: it is forgotten once its server has exited", pod.Name, name)
	return nil
}
