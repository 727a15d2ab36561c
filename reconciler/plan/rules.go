package plan

import (
	"fmt"
	"sort"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The rules of Next that form and reshape the topology (the healing ones are in heal.go).
// Each returns its action and true when it applies.

func resumeMoves(v view) (Action, bool) {
	for _, n := range v.reachable {
		if self := n.State.Self(); self != nil && (len(self.Importing) > 0 || len(self.Migrating) > 0) {
			return v.holdIfBackup(Action{Kind: Rebalance, Nodes: v.leavingPrimaries(), Reason: "slots left open on " + n.Name + " by an interrupted move"}), true
		}
	}
	for i := range v.Nodes {
		if n := &v.Nodes[i]; n.Lifecycle == Leaving && n.primaryWithSlots() {
			return v.holdIfBackup(Action{Kind: Rebalance, Nodes: v.leavingPrimaries(), Reason: "draining the slots of leaving " + n.Name}), true
		}
	}
	return Action{}, false
}

// holdIfBackup turns slot move a into a Held Wait while a backup streams.
func (v view) holdIfBackup(a Action) Action {
	if v.BackupRunning == "" {
		return a
	}
	return Action{Kind: Wait, Held: true, Reason: fmt.Sprintf("%s (%s) waits for backup %s, which is streaming the shards' snapshots", a.Kind, a.Reason, v.BackupRunning)}
}

// leavingID is the Valkey ID a Leaving node has or had, and whether another server knows it.
func (v view) leavingID(n *Node) (string, bool) {
	id := n.RecordedID
	if n.reachable() {
		id = n.State.ID
	}
	for _, o := range v.reachable {
		if o != n && id != "" && o.State.Peer(id) != nil {
			return id, true
		}
	}
	return id, false
}

func retireLeaving(v view) (Action, bool) {
	var leaving []*Node
	for i := range v.Nodes {
		if v.Nodes[i].Lifecycle == Leaving {
			leaving = append(leaving, &v.Nodes[i])
		}
	}
	// Replicas leave before the primary they follow.
	replica := func(n *Node) bool { return n.reachable() && n.State.Role == model.RoleReplica }
	sort.SliceStable(leaving, func(i, j int) bool { return replica(leaving[i]) && !replica(leaving[j]) })
	for _, n := range leaving {
		id, known := v.leavingID(n)
		switch {
		case n.reachable() && v.followed(n):
			// Its replicas go first; one not seen Leaving yet (a status write still on its
			// way through the cache) would refuse to forget its own primary.
			continue
		case n.reachable() && known && v.ClientAddresses:
			// Forgotten while it runs, it would redirect its last clients to pod IPs (the
			// next case): its server stops first, and is forgotten once it has exited.
			return Action{Kind: StopServer, Node: n.Name, Reason: n.Name + " is leaving: its server stops before it is forgotten"}, true
		case n.reachable() && known:
			return Action{Kind: Remove, Node: n.Name, Reason: n.Name + " is leaving"}, true
		case n.dying != nil && known && v.ClientAddresses:
			// Its pod is being deleted and it still serves the clients connected to it (the
			// preStop window), redirecting them. Forgotten now, it would be answered as a
			// stranger, without the ping extensions that carry its peers' client addresses,
			// and take it that they announce none: its redirects would name pod IPs that
			// clients outside cannot reach. It is forgotten once it has exited; its
			// replacement does not wait for that.
			continue
		case known && v.owners[id] > 0:
			continue // a lost primary: waitFailover
		case known:
			return Action{Kind: Forget, IDs: []string{id}, Reason: "forgetting " + n.Name + " (" + id + ")"}, true
		default:
			return Action{Kind: Delete, Node: n.Name, Reason: n.Name + " left the cluster"}, true
		}
	}
	return Action{}, false
}

// followed reports whether a reachable server replicates n.
func (v view) followed(n *Node) bool {
	for _, o := range v.reachable {
		if o != n && o.State.Role == model.RoleReplica && o.State.PrimaryID == n.State.ID {
			return true
		}
	}
	return false
}

func createMissing(v view) (Action, bool) {
	var shards []int
	for s := 0; s < v.Shards; s++ {
		for c := len(v.byShard[s]); c < 1+v.Replicas; c++ {
			shards = append(shards, s)
		}
	}
	if len(shards) == 0 {
		return Action{}, false
	}
	return Action{Kind: CreateNodes, Shards: shards, Reason: fmt.Sprintf("%d node(s) missing", len(shards))}, true
}

func waitStarting(v view) (Action, bool) {
	for _, n := range v.live {
		if n.Pod != PodStarting && n.reachable() {
			continue
		}
		if v.unwanted(n) {
			continue
		}
		if n.Unschedulable != "" {
			return Action{Kind: Wait, Warning: true, Reason: "pod " + n.Name + " cannot be scheduled: " + n.Unschedulable}, true
		}
		if slow := v.slowStart(); n.NotReadyFor >= slow {
			return Action{Kind: Wait, Warning: true, Reason: fmt.Sprintf("pod %s has not become ready in %s; see `kubectl describe pod %s`", n.Name, slow, n.Name)}, true
		}
		return Action{Kind: Wait, Reason: n.Name + " is starting"}, true
	}
	return Action{}, false
}

// slowStart is how long a pod may take to turn ready before waitStarting warns.
func (v view) slowStart() time.Duration {
	if v.SlowStart > 0 {
		return v.SlowStart
	}
	return SlowStart
}

// joined reports whether every node of a shard is in the cluster, one of them primary and
// the others its linked replicas: what Join (Bootstrap) leaves behind for a new shard.
func (v view) joined(shard int) bool {
	var primary *Node
	for _, n := range v.byShard[shard] {
		if !n.inCluster() {
			return false
		}
		if n.State.Role == model.RolePrimary {
			if primary != nil {
				return false
			}
			primary = n
		}
	}
	if primary == nil {
		return false
	}
	for _, n := range v.byShard[shard] {
		if n != primary && (n.State.PrimaryID != primary.State.ID || !n.State.LinkedToPrimary()) {
			return false
		}
	}
	return true
}

func joinNew(v view) (Action, bool) {
	var syncing, syncingWith *Node
	for s := 0; s < v.Shards; s++ {
		if v.primaryOf(s) == nil && !v.joined(s) {
			return Action{Kind: Join, Reason: fmt.Sprintf("shard %d joins the cluster", s)}, true
		}
	}
	for _, n := range v.live {
		p := v.primaryOf(n.Shard)
		if p == nil || n == p || v.unwanted(n) || v.retiring(n) {
			continue
		}
		if n.reachable() && n.State.Role == model.RolePrimary && len(n.State.Slots) == 0 && n.State.Keys > 0 {
			// A primary left without slots but with keys (its slots went to another node and
			// it did not follow): Valkey refuses to make it a replica, and its keys belong to
			// slots another node serves. It is replaced.
			return Action{Kind: MarkLeaving, Nodes: []string{n.Name}, Reason: fmt.Sprintf("%s holds %d keys of slots it no longer serves and cannot become a replica; a replacement follows", n.Name, n.State.Keys)}, true
		}
		switch {
		case !n.inCluster() || n.State.Role != model.RoleReplica || n.State.PrimaryID != p.State.ID:
			return Action{Kind: Replicate, Node: n.Name, Reason: fmt.Sprintf("%s joins shard %d as a replica", n.Name, n.Shard)}, true
		case n.State.SyncInProgress:
			// Replicate returns once the sync starts: it is watched from here, pass by
			// pass, so that a sync of minutes holds no pass (a primary whose pod goes
			// meanwhile must still hand its slots over, rule 2).
			if syncing == nil {
				syncing, syncingWith = n, p
			}
		case !n.State.LinkedToPrimary():
			return Action{Kind: Replicate, Node: n.Name, Reason: fmt.Sprintf("%s joins shard %d as a replica", n.Name, n.Shard)}, true
		}
	}
	if syncing != nil {
		return Action{Kind: Wait, Reason: fmt.Sprintf("%s is loading its initial sync from %s", syncing.Name, syncingWith.Name)}, true
	}
	return Action{}, false
}

// retiring reports whether roll will retire n: a stale node of a kept shard. It is never
// attached to its shard's primary: it goes anyway, and it may not be able to follow (an old
// primary that kept its keys after its slots went to a replacement is refused by REPLICATE).
func (v view) retiring(n *Node) bool { return v.stale(n) && n.Shard < v.Shards }

func (v view) primaryOf(shard int) *Node {
	for _, n := range v.byShard[shard] {
		if n.primaryWithSlots() {
			return n
		}
	}
	return nil
}

// balance moves slots when a departing shard still holds some, or when the slot-holding
// primaries of the kept shards differ by more than 1% of the slots.
func balance(v view) (Action, bool) {
	if leaving := v.leavingPrimaries(); len(leaving) > 0 {
		return v.holdIfBackup(Action{Kind: Rebalance, Nodes: leaving, Reason: fmt.Sprintf("draining departing %v", leaving)}), true
	}
	lo, hi := model.SlotCount, 0
	for s := 0; s < v.Shards; s++ {
		c := 0
		if p := v.primaryOf(s); p != nil {
			c = model.CountSlots(p.State.Slots)
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	if hi-lo > model.SlotCount/100 {
		return v.holdIfBackup(Action{Kind: Rebalance, Reason: fmt.Sprintf("slots uneven across primaries (%d..%d)", lo, hi)}), true
	}
	return Action{}, false
}

func markDeparting(v view) (Action, bool) {
	var out []*Node
	for _, n := range v.live {
		if n.Shard >= v.Shards {
			out = append(out, n)
		}
	}
	for s := 0; s < v.Shards; s++ {
		members := v.byShard[s]
		surplus := len(members) - (1 + v.Replicas)
		if v.surging(s) {
			surplus-- // the replacement of a stale node: roll retires the stale one
		}
		// Stale nodes go first, then Joining ones, then replicas by name; a primary never.
		rank := func(n *Node) int {
			switch {
			case v.stale(n):
				return 0
			case n.Lifecycle == Joining:
				return 1
			}
			return 2
		}
		cands := append([]*Node(nil), members...)
		sort.SliceStable(cands, func(i, j int) bool { return rank(cands[i]) < rank(cands[j]) })
		for _, n := range cands {
			if surplus <= 0 {
				break
			}
			if n.primaryWithSlots() {
				continue
			}
			out = append(out, n)
			surplus--
		}
	}
	if len(out) == 0 {
		return Action{}, false
	}
	return Action{Kind: MarkLeaving, Nodes: names(out), Reason: fmt.Sprintf("%v no longer in the topology", names(out))}, true
}

func activateJoined(v view) (Action, bool) {
	var out []*Node
	for _, n := range v.live {
		// A lone primary holding every slot is a whole cluster (1x0): it knows nobody else.
		whole := n.primaryWithSlots() && model.CountSlots(n.State.Slots) == model.SlotCount
		if n.Lifecycle != Active && (n.inCluster() || whole) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return Action{}, false
	}
	return Action{Kind: MarkActive, Nodes: names(out), Reason: fmt.Sprintf("%v joined", names(out))}, true
}
