package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// formTimeout bounds each wait of Bootstrap (handshakes, slot gossip, replica attach).
const formTimeout = 60 * time.Second

// Bootstrap forms the cluster from nodes grouped by Shard: one primary per shard with an even
// contiguous slot range (shard i gets range i of `shards`), the rest replicate it. Sets
// the replication login (see model.ReplicationLogin) so replicas authenticate. Idempotent; never moves an owned slot.
//
// It observes first and only does what is missing, so it can be rerun on a formed or
// half-formed cluster: fresh nodes get distinct config epochs before they meet anyone (nodes
// at epoch 0 can accept gossip handing their slots away), every pair is MET directly (a node
// learned only through gossip can take node_timeout/2 to be fully known), only slots nobody
// owns are assigned, and only nodes not yet following their shard's primary are attached.
//
// Fresh nodes form at a lower cluster-node-timeout (formingNodeTimeout for a new cluster,
// joiningNodeTimeout when joining a formed one). However it ends (formed, failed, cancelled),
// Bootstrap leaves every reachable node at its configured timeout (Node.NodeTimeoutMillis)
// with replica failover allowed: see Settle.
func (a *Admin) Bootstrap(ctx context.Context, nodes []model.Node, shards int) error {
	return a.BootstrapSlots(ctx, nodes, shards, nil)
}

// BootstrapSlots is Bootstrap with the slots each shard ends with given: layout[i] are shard
// i's ranges (nil: the even ranges). A cluster restored from a backup forms with the ranges
// the backup recorded: its primaries start owning the slots their keys hash to (a server
// that loads data without a cluster configuration claims them), and only the rest of each
// shard's ranges, the slots that held no key, are assigned here.
func (a *Admin) BootstrapSlots(ctx context.Context, nodes []model.Node, shards int, layout [][]model.SlotRange) (err error) {
	groups, err := groupShards(nodes, shards)
	if err != nil {
		return err
	}
	if layout == nil {
		for _, r := range model.EvenRanges(shards) {
			layout = append(layout, []model.SlotRange{r})
		}
	}
	if err := checkLayout(layout, shards); err != nil {
		return err
	}
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	defer func() {
		if serr := a.Settle(ctx, reachableNodes(snap)); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if err := requireReachable(snap); err != nil {
		return err
	}

	primaries := make([]*model.NodeState, shards)
	for shard, members := range groups {
		p := choosePrimary(snap, members)
		if p == nil {
			return model.NewOpError(members[0].Name, "choose-primary", fmt.Errorf("%w: shard %d has no node that can be primary", model.ErrUnsafe, shard))
		}
		primaries[shard] = p
	}
	prep := a.preparation(snap, primaries, layout)
	if err := parallel(nodes, func(n model.Node) error {
		_, err := a.multi(ctx, n, "prepare", prep[n.Name])
		return err
	}); err != nil {
		return err
	}

	if err := a.meetAll(ctx, snap); err != nil {
		return err
	}

	// Attach replicas once each knows its primary.
	byShard := map[string]int{}
	var replicas []model.Node
	for shard, members := range groups {
		for _, m := range members {
			if m.Name != primaries[shard].Name {
				byShard[m.Name] = shard
				replicas = append(replicas, m)
			}
		}
	}
	if err := parallel(replicas, func(n model.Node) error {
		p := primaries[byShard[n.Name]]
		return a.attachReplica(ctx, n, p.Node, p.ID)
	}); err != nil {
		return err
	}

	// Converged: every node sees every slot assigned and every replica follows its primary.
	// A primary owning slots that was marked FAIL (a late PONG at the forming timeout) stays
	// FAIL until twice the node timeout has passed since, and its slots count as unserved:
	// this wait sees that through at the forming timeout, before Settle raises it (which
	// would stretch it to twice the configured timeout).
	return a.waitServing(ctx, nodes, "bootstrap-converge", func(st *model.NodeState) error {
		if shard, ok := byShard[st.Name]; ok && (st.Role != model.RoleReplica || st.PrimaryID != primaries[shard].ID) {
			return fmt.Errorf("%s not yet a replica of %s", st.Name, primaries[shard].Name)
		}
		return nil
	})
}

// waitServing waits (formTimeout) until every node answers, sees all slots assigned and
// reports cluster_state ok, and passes check (nil = no further condition).
func (a *Admin) waitServing(ctx context.Context, nodes []model.Node, step string, check func(*model.NodeState) error) error {
	return a.waitFor(ctx, step, formTimeout, func() (bool, error) {
		s, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for i := range s.Nodes {
			st := &s.Nodes[i]
			switch {
			case !st.Reachable:
				return false, st.Err
			case st.SlotsAssigned != model.SlotCount:
				return false, fmt.Errorf("%s sees %d slots assigned", st.Name, st.SlotsAssigned)
			case !st.ClusterOK():
				return false, fmt.Errorf("%s reports cluster_state %q", st.Name, st.ClusterState)
			}
			if check != nil {
				if err := check(st); err != nil {
					return false, err
				}
			}
		}
		return true, nil
	})
}

// preparation is each node's one round trip before the nodes meet: the replication login (a
// replica attached later must authenticate; auth is always on), what a fresh node needs
// (prepareFresh), and for shard i's primary the unowned part of even range i. Slots are
// assigned before MEET so the ownership travels with the handshake, and in this first round
// trip because a new primary's rejoin delay (see formingNodeTimeout) runs from the moment it
// owns slots: the MEETs and replica attachments after it fit in that delay.
func (a *Admin) preparation(snap *model.Snapshot, primaries []*model.NodeState, layout [][]model.SlotRange) map[string][][]string {
	cmds := map[string][][]string{}
	var epoch uint64
	for _, st := range snap.Nodes {
		cmds[st.Name] = [][]string{a.replicationLoginCmd()}
		epoch = max(epoch, st.ConfigEpoch, st.CurrentEpoch)
	}
	fresh := freshNodes(snap)
	forming := len(fresh) == len(snap.Nodes)
	for _, n := range fresh {
		epoch++
		cmds[n.Name] = append(cmds[n.Name], prepareFresh(n, epoch, forming)...)
	}
	owned := ownedSlots(snap)
	for shard, ranges := range layout {
		var free []int
		for _, s := range model.ExpandSlots(ranges) {
			if !owned[s] {
				free = append(free, s)
			}
		}
		if len(free) == 0 {
			continue
		}
		args := []string{"CLUSTER", "ADDSLOTSRANGE"}
		for _, fr := range model.CompactSlots(free) {
			args = append(args, strconv.Itoa(fr.Start), strconv.Itoa(fr.End))
		}
		p := primaries[shard].Name
		cmds[p] = append(cmds[p], args)
	}
	return cmds
}

// checkLayout refuses a slot layout that does not give each of shards its ranges, or gives
// a slot to two shards or outside 0-16383.
func checkLayout(layout [][]model.SlotRange, shards int) error {
	if len(layout) != shards {
		return model.NewOpError("", "validate", fmt.Errorf("%w: a slot layout of %d shards for %d", model.ErrInvalidSpec, len(layout), shards))
	}
	owner := make([]int, model.SlotCount)
	for shard, ranges := range layout {
		for _, r := range ranges {
			if r.Start < 0 || r.End >= model.SlotCount || r.Start > r.End {
				return model.NewOpError("", "validate", fmt.Errorf("%w: shard %d: slot range %d-%d", model.ErrInvalidSpec, shard, r.Start, r.End))
			}
			for s := r.Start; s <= r.End; s++ {
				if owner[s] != 0 {
					return model.NewOpError("", "validate", fmt.Errorf("%w: slot %d given to shards %d and %d", model.ErrInvalidSpec, s, owner[s]-1, shard))
				}
				owner[s] = shard + 1
			}
		}
	}
	return nil
}

// groupShards validates nodes and groups them by shard index.
func groupShards(nodes []model.Node, shards int) ([][]model.Node, error) {
	if shards <= 0 {
		return nil, model.NewOpError("", "validate", fmt.Errorf("%w: shards must be positive, got %d", model.ErrInvalidSpec, shards))
	}
	groups := make([][]model.Node, shards)
	for _, n := range nodes {
		if n.Shard < 0 || n.Shard >= shards {
			return nil, model.NewOpError(n.Name, "validate", fmt.Errorf("%w: shard %d outside 0..%d", model.ErrInvalidSpec, n.Shard, shards-1))
		}
		groups[n.Shard] = append(groups[n.Shard], n)
	}
	for i, g := range groups {
		if len(g) == 0 {
			return nil, model.NewOpError("", "validate", fmt.Errorf("%w: shard %d has no nodes", model.ErrInvalidSpec, i))
		}
	}
	return groups, nil
}

func requireReachable(snap *model.Snapshot) error {
	for _, st := range snap.Nodes {
		if !st.Reachable {
			return model.NewOpError(st.Name, "observe", fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err))
		}
	}
	return nil
}

// ownedSlots is every slot some node's view says is owned.
func ownedSlots(snap *model.Snapshot) []bool {
	owned := make([]bool, model.SlotCount)
	for _, st := range snap.Nodes {
		for _, cn := range st.View {
			for _, r := range cn.Slots {
				for s := r.Start; s <= r.End; s++ {
					owned[s] = true
				}
			}
		}
	}
	return owned
}

// choosePrimary picks the shard's primary from the live cluster, never from names: the member
// owning slots (most first), else a primary that already has a member replicating it, else the
// first member that reports itself primary.
func choosePrimary(snap *model.Snapshot, members []model.Node) *model.NodeState {
	var best *model.NodeState
	for _, m := range members {
		st := snap.ByName(m.Name)
		if st.Role == model.RolePrimary && len(st.Slots) > 0 && (best == nil || model.CountSlots(st.Slots) > model.CountSlots(best.Slots)) {
			best = st
		}
	}
	if best != nil {
		return best
	}
	for _, m := range members {
		st := snap.ByName(m.Name)
		if st.Role != model.RolePrimary {
			continue
		}
		for _, o := range members {
			if os := snap.ByName(o.Name); os.Role == model.RoleReplica && os.PrimaryID == st.ID {
				return st
			}
		}
	}
	for _, m := range members {
		if st := snap.ByName(m.Name); st.Role == model.RolePrimary {
			return st
		}
	}
	return nil
}

// attachReplica makes n follow primary (ID primaryID) unless it already does. It refuses to
// touch a node owning slots.
func (a *Admin) attachReplica(ctx context.Context, n, primary model.Node, primaryID string) error {
	var st model.NodeState
	err := a.waitFor(ctx, "replicate-wait-known", formTimeout, func() (bool, error) {
		st = a.observeOne(ctx, n)
		if !st.Reachable {
			return false, st.Err
		}
		p := st.Peer(primaryID)
		if p == nil || p.InHandshake() || !p.IsPrimary() {
			return false, fmt.Errorf("%s does not know primary %s yet", n.Name, primary.Name)
		}
		return true, nil
	})
	if err != nil {
		return model.NewOpError(n.Name, "replicate", err)
	}
	if st.Role == model.RoleReplica && st.PrimaryID == primaryID {
		return nil
	}
	if len(st.Slots) > 0 {
		return model.NewOpError(n.Name, "replicate", fmt.Errorf("%w: node owns slots %s", model.ErrUnsafe, model.FormatRanges(st.Slots)))
	}
	if err := a.setReplicationLogin(ctx, n); err != nil {
		return err
	}
	_, err = a.cmd(ctx, n, "replicate", "CLUSTER", "REPLICATE", primaryID)
	return err
}

func parallelIdx(n int, fn func(int) error) error {
	nodes := make([]model.Node, n)
	for i := range nodes {
		nodes[i] = model.Node{Name: strconv.Itoa(i)}
	}
	return parallel(nodes, func(x model.Node) error {
		i, _ := strconv.Atoi(x.Name)
		return fn(i)
	})
}
