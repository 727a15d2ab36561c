package valkeyops

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// MaxSyncLag is the replication lag (bytes) under which a linked replica counts as in sync.
// CLUSTER FAILOVER itself pauses writes on the primary and waits for the chosen replica to
// catch up completely, so a small lag costs nothing; a replica far behind or not linked is
// never chosen.
const MaxSyncLag = 1 << 20

// failoverTimeout bounds the wait for the role change after CLUSTER FAILOVER.
const failoverTimeout = 30 * time.Second

// shardSettleTimeout bounds the wait, before CLUSTER FAILOVER, for the primary to count the
// chosen replica in its own shard (gossip settles that within a second or two).
const shardSettleTimeout = 10 * time.Second

// Failover gracefully fails the shard of primary `primaryName` over to its best in-sync
// replica: linked, not syncing, lag at most MaxSyncLag, highest offset first. It sends plain
// CLUSTER FAILOVER (never FORCE/TAKEOVER, which can lose acknowledged writes) and waits until
// the replica reports itself primary and the old primary reports itself its replica. If the
// named node is already a replica, nothing is done. ErrNoInSyncReplica when no replica qualifies.
func (a *Admin) Failover(ctx context.Context, nodes []Node, primaryName string) error {
	snap, p, err := a.observeReachable(ctx, nodes, primaryName, "failover")
	if err != nil {
		return err
	}
	if p.Role != RolePrimary {
		return nil
	}
	best := BestReplica(snap, p.ID)
	if best == nil {
		return opErr(primaryName, "failover", ErrNoInSyncReplica)
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
		return opErr(best.Name, "failover-shard", err)
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
		if r.Role != RolePrimary {
			return false, fmt.Errorf("%s still %s", best.Name, r.Role)
		}
		if o.Role != RoleReplica || o.PrimaryID != newID {
			return false, fmt.Errorf("%s (%s) not yet a replica of %s", p.Name, oldID, best.Name)
		}
		return true, nil
	})
	if err != nil {
		return opErr(best.Name, "failover-wait", err)
	}
	return nil
}

// shardOf returns the IDs of the nodes that node n's own CLUSTER SHARDS groups with node id.
func (a *Admin) shardOf(ctx context.Context, n Node, id string) (map[string]bool, error) {
	msg, err := a.cmd(ctx, n, "cluster-shards", "CLUSTER", "SHARDS")
	if err != nil {
		return nil, err
	}
	shards, err := msg.ToArray()
	if err != nil {
		return nil, opErr(n.Name, "cluster-shards", err)
	}
	for _, sh := range shards {
		fields, err := sh.AsMap()
		if err != nil {
			return nil, opErr(n.Name, "cluster-shards", err)
		}
		nodes := fields["nodes"]
		list, err := nodes.ToArray()
		if err != nil {
			return nil, opErr(n.Name, "cluster-shards", err)
		}
		ids := map[string]bool{}
		for _, node := range list {
			attrs, err := node.AsStrMap()
			if err != nil {
				return nil, opErr(n.Name, "cluster-shards", err)
			}
			ids[attrs["id"]] = true
		}
		if ids[id] {
			return ids, nil
		}
	}
	return nil, opErr(n.Name, "cluster-shards", fmt.Errorf("%w: %s is in no shard", ErrNotConverged, id))
}

// BestReplica is the in-sync, electable replica of primaryID with the highest replication
// offset, or nil. Pure: it reads the snapshot only.
func BestReplica(snap *Snapshot, primaryID string) *NodeState {
	p := snap.ByID(primaryID)
	if p == nil {
		return nil
	}
	voters := snap.Primaries()
	var best *NodeState
	for _, r := range snap.ReplicasOf(primaryID) {
		if r.LinkState != "up" || r.SyncInProgress || r.Failing() || !Electable(r, primaryID, voters) {
			continue
		}
		if p.ReplOffset-r.ReplOffset > MaxSyncLag {
			continue
		}
		if best == nil || r.ReplOffset > best.ReplOffset {
			best = r
		}
	}
	return best
}

// Electable reports whether replica r of primaryID can win an election among voters (the
// observed servers; the slot-holding primaries among them vote) now. A replica that joined a
// moment ago cannot until gossip has settled, and CLUSTER FAILOVER to it then fails or, worse,
// half succeeds: it counts a primary's vote only once it has learned that primary's slots,
// and a primary that does not list it yet as primaryID's replica refuses its vote. So: r
// sees every slot assigned and the cluster ok, and every slot-holding primary lists it as a
// replica of primaryID. Pure.
func Electable(r *NodeState, primaryID string, voters []*NodeState) bool {
	if r.SlotsAssigned != SlotCount || r.ClusterState != "ok" {
		return false
	}
	for _, o := range voters {
		if !o.Reachable || o.Role != RolePrimary || len(o.Slots) == 0 {
			continue
		}
		peer := o.Peer(r.ID)
		if peer == nil || !peer.IsReplica() || peer.PrimaryID != primaryID || !talking(peer) {
			return false
		}
		if back := r.Peer(o.ID); back == nil || !talking(back) {
			return false
		}
	}
	return true
}

// talking reports whether the observer's bus link to peer is up and has carried a PONG:
// an election's request and its vote travel on those links, and a message for a peer whose
// link is not up yet is dropped.
func talking(peer *ClusterNode) bool {
	return peer.LinkState == "connected" && peer.PongRecv > 0
}

// Failing reports whether the node's own line carries fail/pfail flags.
func (s *NodeState) Failing() bool {
	for _, f := range s.Flags {
		if f == "fail" || f == "fail?" {
			return true
		}
	}
	return false
}

// Forget removes the given node IDs from every reachable node's table (nodes whose own ID is
// being forgotten are skipped). All nodes are told at once so gossip cannot re-teach a node
// the ID before the others forget it.
func (a *Admin) Forget(ctx context.Context, nodes []Node, ids []string) error {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	var todo []Node
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
	return parallel(todo, func(n Node) error {
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
// through NodeState.SyncInProgress and LinkState. The node must own no slots.
func (a *Admin) Replicate(ctx context.Context, nodes []Node, replicaName string, shard int) error {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	r := snap.ByName(replicaName)
	if r == nil || !r.Reachable {
		return opErr(replicaName, "replicate", ErrUnreachable)
	}
	var p *NodeState
	for _, st := range snap.Primaries() {
		if st.Shard == shard && st.Name != replicaName && len(st.Slots) > 0 {
			p = st
		}
	}
	if p == nil {
		return opErr(replicaName, "replicate", fmt.Errorf("%w: shard %d has no slot-holding primary", ErrInvalidSpec, shard))
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
		if st.Role == RoleReplica && st.PrimaryID == p.ID && (st.LinkState == "up" || st.SyncInProgress) {
			return true, nil
		}
		return false, fmt.Errorf("%s role=%s link=%s", replicaName, st.Role, st.LinkState)
	})
}

// RemoveNode takes node `name` (a replica, or a primary already drained by Rebalance) out of
// the cluster: every other node forgets its ID, so none lists it to clients any more and each
// refuses its gossip for the FORGET ban (60 s). It refuses a primary that still owns slots.
// The node itself is left as it is, still answering with its last view until the caller
// deletes its pod, right afterwards: a reset node would answer CLUSTER SHARDS with itself as
// the only shard, owning no slot, and clients that refresh their topology from it (valkey-go
// does, from any node it knows) would find no node for any slot.
func (a *Admin) RemoveNode(ctx context.Context, nodes []Node, name string) error {
	_, r, err := a.observeNamed(ctx, nodes, name, "remove-node")
	if err != nil {
		return err
	}
	var rest []Node
	for _, n := range nodes {
		if n.Name != name {
			rest = append(rest, n)
		}
	}
	if !r.Reachable {
		return opErr(name, "remove-node", fmt.Errorf("%w: cannot tell its role; forget it by ID once it is gone", ErrUnreachable))
	}
	if len(r.Slots) > 0 {
		return opErr(name, "remove-node", fmt.Errorf("%w: node owns slots %s", ErrUnsafe, FormatRanges(r.Slots)))
	}
	return a.Forget(ctx, rest, []string{r.ID})
}

func reachableOnly(snap *Snapshot) *Snapshot {
	out := &Snapshot{}
	for _, st := range snap.Nodes {
		if st.Reachable {
			out.Nodes = append(out.Nodes, st)
		}
	}
	return out
}

// observeNamed observes nodes and returns the state of node `name` too, refusing (as step) a
// name that is not among nodes.
func (a *Admin) observeNamed(ctx context.Context, nodes []Node, name, step string) (*Snapshot, *NodeState, error) {
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return nil, nil, err
	}
	st := snap.ByName(name)
	if st == nil {
		return nil, nil, opErr(name, step, fmt.Errorf("%w: node not in the given set", ErrInvalidSpec))
	}
	return snap, st, nil
}

// observeReachable is observeNamed for an operation that needs node `name` to answer.
func (a *Admin) observeReachable(ctx context.Context, nodes []Node, name, step string) (*Snapshot, *NodeState, error) {
	snap, st, err := a.observeNamed(ctx, nodes, name, step)
	if err == nil && !st.Reachable {
		err = opErr(name, step, fmt.Errorf("%w: %v", ErrUnreachable, st.Err))
	}
	return snap, st, err
}

// Takeover promotes replica `replicaName` with CLUSTER FAILOVER TAKEOVER and waits until it
// reports itself primary. TAKEOVER needs no vote and no reachable primary, so it is only for
// a primary that is gone for good when the surviving primaries are too few to elect a
// replica themselves (a majority of the slot-holding primaries must vote); while a majority
// can still elect, Valkey's own failover (or ForceFailover) is the safe path and this must not
// race it. A node that is already primary is left alone.
func (a *Admin) Takeover(ctx context.Context, nodes []Node, replicaName string) error {
	return a.promote(ctx, nodes, replicaName, "TAKEOVER", "takeover")
}

// ForceFailover promotes replica `replicaName` with CLUSTER FAILOVER FORCE and waits until it
// reports itself primary. FORCE starts the election at once instead of after the peers have
// flagged the primary failing (a node timeout and more), but the replica still needs the
// votes of a majority of the primaries, under the same epoch rules as Valkey's own failover,
// so two promotions can never both win. It is for a primary whose process is known to have
// exited (its container terminated): nobody needs a node timeout to find that out. A node
// that is already primary is left alone.
func (a *Admin) ForceFailover(ctx context.Context, nodes []Node, replicaName string) error {
	return a.promote(ctx, nodes, replicaName, "FORCE", "force-failover")
}

// promote sends CLUSTER FAILOVER <mode> to a replica and waits until it is primary.
func (a *Admin) promote(ctx context.Context, nodes []Node, replicaName, mode, step string) error {
	_, r, err := a.observeReachable(ctx, nodes, replicaName, step)
	if err != nil {
		return err
	}
	if r.Role == RolePrimary {
		return nil
	}
	if _, err := a.cmd(ctx, r.Node, step, "CLUSTER", "FAILOVER", mode); err != nil {
		return err
	}
	return a.waitFor(ctx, step+"-wait", failoverTimeout, func() (bool, error) {
		st := a.observeOne(ctx, r.Node)
		if st.Role == RolePrimary {
			return true, nil
		}
		return false, fmt.Errorf("%s still %s", replicaName, st.Role)
	})
}

// AssignSlots gives slots that no node owns any more (their only copy was lost) to node
// `name`, an empty primary, MEETing it first when it is not in the cluster yet, and waits
// until every node sees all slots assigned and the cluster serves again. Slots someone still
// owns are never taken: it only fills holes, so the data it "moves" is none.
func (a *Admin) AssignSlots(ctx context.Context, nodes []Node, name string, slots []SlotRange) error {
	snap, n, err := a.observeReachable(ctx, nodes, name, "assign-slots")
	if err != nil {
		return err
	}
	if n.Role != RolePrimary {
		return opErr(name, "assign-slots", fmt.Errorf("%w: node is a replica", ErrUnsafe))
	}
	owned := ownedSlots(reachableOnly(snap))
	var free []int
	for _, s := range ExpandSlots(slots) {
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
		for _, r := range CompactSlots(free) {
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
