package valkeyops

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// failoverTimeout bounds the wait for the role change after CLUSTER FAILOVER.
const failoverTimeout = 30 * time.Second

// shardSettleTimeout bounds the wait, before CLUSTER FAILOVER, for the primary to count the
// chosen replica in its own shard (gossip settles that within a second or two).
const shardSettleTimeout = 10 * time.Second

// Failover gracefully fails the shard of primary `primaryName` over to its best in-sync
// replica (model.BestReplica): linked, not syncing, lag at most model.MaxSyncLag, highest
// offset first. It sends plain CLUSTER FAILOVER (never FORCE/TAKEOVER, which can lose
// acknowledged writes) and waits until the replica reports itself primary and the old primary
// reports itself its replica. If the named node is already a replica, nothing is done.
// model.ErrNoInSyncReplica when no replica qualifies.
func (a *Admin) Failover(ctx context.Context, nodes []model.Node, primaryName string) error {
	snap, p, err := a.observeReachable(ctx, nodes, primaryName, "failover")
	if err != nil {
		return err
	}
	if p.Role != model.RolePrimary {
		return nil
	}
	best := model.BestReplica(snap, p.ID)
	if best == nil {
		return model.NewOpError(primaryName, "failover", model.ErrNoInSyncReplica)
	}
	// The primary must count the replica as one of its own shard. Valkey 8.0 learns a new
	// replica's shard ID a ping or two after it learns that it replicates: a failover in
	// that window looks to the old primary like its slots moving to another shard, and it
	// stays behind as an empty primary instead of becoming the new primary's replica.
	err = a.waitFor(ctx, "failover-shard", shardSettleTimeout, func() (bool, error) {
		peers, err := a.shardOf(ctx, p.Node, p.ID)
		if err != nil {
			return false, err
		}
		if !peers[best.ID] {
			return false, fmt.Errorf("%s does not count %s in its shard yet", p.Name, best.Name)
		}
		return true, nil
	})
	if err != nil {
		return model.NewOpError(best.Name, "failover-shard", err)
	}
	if _, err := a.cmd(ctx, best.Node, "failover", "CLUSTER", "FAILOVER"); err != nil {
		return err
	}
	newID, oldID := best.ID, p.ID
	err = a.waitFor(ctx, "failover-wait", failoverTimeout, func() (bool, error) {
		r := a.observeOne(ctx, best.Node)
		o := a.observeOne(ctx, p.Node)
		if !r.Reachable || !o.Reachable {
			return false, fmt.Errorf("observe: %v %v", r.Err, o.Err)
		}
		if r.Role != model.RolePrimary {
			return false, fmt.Errorf("%s still %s", best.Name, r.Role)
		}
		if o.Role != model.RoleReplica || o.PrimaryID != newID {
			return false, fmt.Errorf("%s (%s) not yet a replica of %s", p.Name, oldID, best.Name)
		}
		return true, nil
	})
	if err != nil {
		return model.NewOpError(best.Name, "failover-wait", err)
	}
	return nil
}

// shardOf returns the IDs of the nodes that node n's own CLUSTER SHARDS groups with node id.
func (a *Admin) shardOf(ctx context.Context, n model.Node, id string) (map[string]bool, error) {
	msg, err := a.cmd(ctx, n, "cluster-shards", "CLUSTER", "SHARDS")
	if err != nil {
		return nil, err
	}
	shards, err := msg.ToArray()
	if err != nil {
		return nil, model.NewOpError(n.Name, "cluster-shards", err)
	}
	for _, sh := range shards {
		fields, err := sh.AsMap()
		if err != nil {
			return nil, model.NewOpError(n.Name, "cluster-shards", err)
		}
		nodes := fields["nodes"]
		list, err := nodes.ToArray()
		if err != nil {
			return nil, model.NewOpError(n.Name, "cluster-shards", err)
		}
		ids := map[string]bool{}
		for _, node := range list {
			attrs, err := node.AsStrMap()
			if err != nil {
				return nil, model.NewOpError(n.Name, "cluster-shards", err)
			}
			ids[attrs["id"]] = true
		}
		if ids[id] {
			return ids, nil
		}
	}
	return nil, model.NewOpError(n.Name, "cluster-shards", fmt.Errorf("%w: %s is in no shard", model.ErrNotConverged, id))
}

// Forget removes the given node IDs from every reachable node's table (nodes whose own ID is
// being forgotten are skipped). All nodes are told at once so gossip cannot re-teach a node
// the ID before the others forget it.
func (a *Admin) Forget(ctx context.Context, nodes []model.Node, ids []string) error {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	var todo []model.Node
	cmds := map[string][][]string{}
	for _, st := range snap.Nodes {
		if !st.Reachable || gone[st.ID] {
			continue
		}
		for _, id := range ids {
			if st.Peer(id) != nil {
				cmds[st.Name] = append(cmds[st.Name], []string{"CLUSTER", "FORGET", id})
			}
		}
		if len(cmds[st.Name]) > 0 {
			todo = append(todo, st.Node)
		}
	}
	return parallel(todo, func(n model.Node) error {
		_, err := a.multi(ctx, n, "forget", cmds[n.Name])
		return err
	})
}

// Replicate makes node `replicaName` a replica of the primary of shard `shard` (the shard's
// slot-holding primary in the live cluster, whatever its name), MEETing it first if it is not
// in the cluster yet, and waits until it has started replicating: its link is up, or its
// initial sync is under way. It does not wait for that sync to end: with a large dataset a
// full sync takes minutes, and a caller that held on to it could not act on anything else
// meanwhile (a primary handing its slots over as its pod goes). The caller watches the sync
// through model.NodeState.SyncInProgress and PrimaryLink. The node must own no slots.
func (a *Admin) Replicate(ctx context.Context, nodes []model.Node, replicaName string, shard int) error {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	r := snap.ByName(replicaName)
	if r == nil || !r.Reachable {
		return model.NewOpError(replicaName, "replicate", model.ErrUnreachable)
	}
	var p *model.NodeState
	for _, st := range snap.Primaries() {
		if st.Shard == shard && st.Name != replicaName && len(st.Slots) > 0 {
			p = st
		}
	}
	if p == nil {
		return model.NewOpError(replicaName, "replicate", fmt.Errorf("%w: shard %d has no slot-holding primary", model.ErrInvalidSpec, shard))
	}
	if r.Peer(p.ID) == nil {
		if err := a.meetAll(ctx, reachableOnly(snap)); err != nil {
			return err
		}
	}
	if _, err := a.cmd(ctx, p.Node, "set-sync-delay", "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	if err := a.attachReplica(ctx, r.Node, p.Node, p.ID); err != nil {
		return err
	}
	return a.waitFor(ctx, "replicate-link", formTimeout, func() (bool, error) {
		st := a.observeOne(ctx, r.Node)
		if st.Role == model.RoleReplica && st.PrimaryID == p.ID && (st.LinkedToPrimary() || st.SyncInProgress) {
			return true, nil
		}
		return false, fmt.Errorf("%s role=%s link=%s", replicaName, st.Role, st.PrimaryLink)
	})
}

// RemoveNode takes node `name` (a replica, or a primary already drained by Rebalance) out of
// the cluster: every other node forgets its ID, so none lists it to clients any more and each
// refuses its gossip for the FORGET ban (60 s). It refuses a primary that still owns slots.
// The node itself is left as it is, still answering with its last view until the caller
// deletes its pod, right afterwards: a reset node would answer CLUSTER SHARDS with itself as
// the only shard, owning no slot, and clients that refresh their topology from it (valkey-go
// does, from any node it knows) would find no node for any slot.
func (a *Admin) RemoveNode(ctx context.Context, nodes []model.Node, name string) error {
	_, r, err := a.observeNamed(ctx, nodes, name, "remove-node")
	if err != nil {
		return err
	}
	var rest []model.Node
	for _, n := range nodes {
		if n.Name != name {
			rest = append(rest, n)
		}
	}
	if !r.Reachable {
		return model.NewOpError(name, "remove-node", fmt.Errorf("%w: cannot tell its role; forget it by ID once it is gone", model.ErrUnreachable))
	}
	if len(r.Slots) > 0 {
		return model.NewOpError(name, "remove-node", fmt.Errorf("%w: node owns slots %s", model.ErrUnsafe, model.FormatRanges(r.Slots)))
	}
	return a.Forget(ctx, rest, []string{r.ID})
}

func reachableOnly(snap *model.Snapshot) *model.Snapshot {
	out := &model.Snapshot{}
	for _, st := range snap.Nodes {
		if st.Reachable {
			out.Nodes = append(out.Nodes, st)
		}
	}
	return out
}

// observeNamed observes nodes and returns the state of node `name` too, refusing (as step) a
// name that is not among nodes.
func (a *Admin) observeNamed(ctx context.Context, nodes []model.Node, name, step string) (*model.Snapshot, *model.NodeState, error) {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return nil, nil, err
	}
	st := snap.ByName(name)
	if st == nil {
		return nil, nil, model.NewOpError(name, step, fmt.Errorf("%w: node not in the given set", model.ErrInvalidSpec))
	}
	return snap, st, nil
}

// observeReachable is observeNamed for an operation that needs node `name` to answer.
func (a *Admin) observeReachable(ctx context.Context, nodes []model.Node, name, step string) (*model.Snapshot, *model.NodeState, error) {
	snap, st, err := a.observeNamed(ctx, nodes, name, step)
	if err == nil && !st.Reachable {
		err = model.NewOpError(name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err))
	}
	return snap, st, err
}

// Takeover promotes replica `replicaName` with CLUSTER FAILOVER TAKEOVER and waits until it
// reports itself primary. TAKEOVER needs no vote and no reachable primary, so it is only for
// a primary that is gone for good when the surviving primaries are too few to elect a
// replica themselves (a majority of the slot-holding primaries must vote); while a majority
// can still elect, Valkey's own failover (or ForceFailover) is the safe path and this must not
// race it. A node that is already primary is left alone.
func (a *Admin) Takeover(ctx context.Context, nodes []model.Node, replicaName string) error {
	return a.promote(ctx, nodes, replicaName, "TAKEOVER", "takeover")
}

// ForceFailover promotes replica `replicaName` with CLUSTER FAILOVER FORCE and waits until it
// reports itself primary. FORCE starts the election at once instead of after the peers have
// flagged the primary failing (a node timeout and more), but the replica still needs the
// votes of a majority of the primaries, under the same epoch rules as Valkey's own failover,
// so two promotions can never both win. It is for a primary whose process is known to have
// exited (its container terminated): nobody needs a node timeout to find that out. A node
// that is already primary is left alone.
func (a *Admin) ForceFailover(ctx context.Context, nodes []model.Node, replicaName string) error {
	return a.promote(ctx, nodes, replicaName, "FORCE", "force-failover")
}

// promote sends CLUSTER FAILOVER <mode> to a replica and waits until it is primary.
func (a *Admin) promote(ctx context.Context, nodes []model.Node, replicaName, mode, step string) error {
	_, r, err := a.observeReachable(ctx, nodes, replicaName, step)
	if err != nil {
		return err
	}
	if r.Role == model.RolePrimary {
		return nil
	}
	if _, err := a.cmd(ctx, r.Node, step, "CLUSTER", "FAILOVER", mode); err != nil {
		return err
	}
	return a.waitFor(ctx, step+"-wait", failoverTimeout, func() (bool, error) {
		st := a.observeOne(ctx, r.Node)
		if st.Role == model.RolePrimary {
			return true, nil
		}
		return false, fmt.Errorf("%s still %s", replicaName, st.Role)
	})
}

// AssignSlots gives slots that no node owns any more (their only copy was lost) to node
// `name`, an empty primary, MEETing it first when it is not in the cluster yet, and waits
// until every node sees all slots assigned and the cluster serves again. Slots someone still
// owns are never taken: it only fills holes, so the data it "moves" is none.
func (a *Admin) AssignSlots(ctx context.Context, nodes []model.Node, name string, slots []model.SlotRange) error {
	snap, n, err := a.observeReachable(ctx, nodes, name, "assign-slots")
	if err != nil {
		return err
	}
	if n.Role != model.RolePrimary {
		return model.NewOpError(name, "assign-slots", fmt.Errorf("%w: node is a replica", model.ErrUnsafe))
	}
	owned := ownedSlots(reachableOnly(snap))
	var free []int
	for _, s := range model.ExpandSlots(slots) {
		if !owned[s] {
			free = append(free, s)
		}
	}
	if n.KnownNodes <= 1 {
		if err := a.meetAll(ctx, reachableOnly(snap)); err != nil {
			return err
		}
	}
	if len(free) > 0 {
		args := []string{"CLUSTER", "ADDSLOTSRANGE"}
		for _, r := range model.CompactSlots(free) {
			args = append(args, strconv.Itoa(r.Start), strconv.Itoa(r.End))
		}
		if _, err := a.cmd(ctx, n.Node, "assign-slots", args...); err != nil {
			return err
		}
		// A new epoch makes the claim win over any stale view of those slots.
		if _, err := a.cmd(ctx, n.Node, "assign-slots-epoch", "CLUSTER", "BUMPEPOCH"); err != nil {
			return err
		}
	}
	// Served again: every node sees all slots assigned and reports cluster_state ok.
	return a.waitServing(ctx, nodes, "assign-slots-wait", nil)
}
