package plan

import (
	"fmt"
	"sort"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The rules of Next that heal: a primary handed over before its pod goes, lost and failed
// nodes replaced, a lost primary's slots taken over (or, without a replica, dropped and given
// to an empty primary), dead IDs forgotten.

// failing reports whether a reachable server flags id as failing: its process has not
// answered for a node timeout.
func (v view) failing(id string) bool {
	for _, o := range v.reachable {
		if peer := o.State.Peer(id); peer != nil && peer.Failing() {
			return true
		}
	}
	return false
}

// canElect reports whether the slot-holding primaries other than dead are a majority of all
// slot-holding primaries: only then can Valkey elect a replica of dead by itself.
func (v view) canElect(dead string) bool {
	alive := 0
	for id := range v.owners {
		if id != dead && v.ids[id] != nil {
			alive++
		}
	}
	return 2*alive > len(v.owners)
}

// waitFailover guards every shard whose slots are still owned, in the servers' views, by an
// ID no reachable server has any more (its primary was lost, or restarted empty). Nothing
// else happens to the cluster until a replica owns those slots: Valkey's own failover
// promotes one when a majority of primaries survives; otherwise the best replica takes over,
// but only once the old primary is surely gone (its pod deleted, or flagged failing by its
// peers), never while it may still serve.
func waitFailover(v view) (Action, bool) {
	var dead []string
	for id := range v.owners {
		if v.ids[id] == nil {
			dead = append(dead, id)
		}
	}
	sort.Strings(dead)
	for _, id := range dead {
		name, gone, exited, restarts := id, false, false, false
		for i := range v.Nodes {
			if n := &v.Nodes[i]; n.RecordedID == id {
				name, gone, exited, restarts = n.Name, n.Pod == PodGone, n.Exited, n.Lifecycle != Leaving && v.restartable(n)
			}
		}
		var best *Node
		for _, o := range v.reachable {
			if o.State.Role == model.RoleReplica && o.State.PrimaryID == id && (best == nil || o.State.ReplOffset > best.State.ReplOffset) {
				best = o
			}
		}
		switch {
		case restarts && (best == nil || !exited):
			// It comes back on its volume with its slots' data: nothing is dropped, and no
			// replica takes over from a server that stopped gracefully (or is restarting).
			return Action{Kind: Wait, Reason: "waiting for " + name + " to restart on its volume"}, true
		case best == nil && (gone || v.failing(id)):
			return Action{Kind: DropSlots, IDs: []string{id}, Reason: fmt.Sprintf("lost %s held %d slots and had no replica: the data of those slots is lost; they go to an empty replacement", name, v.owners[id])}, true
		case best == nil:
			return Action{Kind: Wait, Reason: "waiting until lost " + name + " (no replica) is surely gone"}, true
		case exited && v.canElect(id):
			return Action{Kind: ForceFailover, Node: best.Name, Reason: fmt.Sprintf("lost %s: its server exited; %s is elected at once", name, best.Name)}, true
		case !v.canElect(id) && (gone || v.failing(id)):
			return Action{Kind: Takeover, Node: best.Name, Reason: fmt.Sprintf("lost %s: too few primaries survive to elect %s, which takes over", name, best.Name)}, true
		default:
			return Action{Kind: Wait, Reason: "waiting for a replica to take over the slots of lost " + name}, true
		}
	}
	return Action{}, false
}

// failoverExited brings waitFailover's ForceFailover forward: a primary whose server exited
// leaves its slots unserved until a replica is elected, so the election is started before
// the lost node is marked Leaving and its replacement made (two more passes, each with its
// API writes: about 0.1 s on an idle machine, more on a busy one). Waits and the other
// actions of waitFailover keep their place, after the replacement is made.
func failoverExited(v view) (Action, bool) {
	if a, ok := waitFailover(v); ok && a.Kind == ForceFailover {
		return a, true
	}
	return Action{}, false
}

func dropLost(v view) (Action, bool) {
	var lost []*Node
	for _, n := range v.live {
		if n.Lifecycle == Joining && n.Pod == PodGone && n.RecordedID == "" && (v.Hash == "" || n.Hash == v.Hash) {
			// It stopped before it ever answered: most likely a setting Valkey refuses at
			// start-up (a ConfigRejected Event names it). Replacing it from the same spec would
			// only repeat that, so wait for the user; once the config is edited, its spec is
			// stale and it is replaced below like any lost node.
			return Action{Kind: Wait, Warning: true, Reason: "the server of new node " + n.Name + " stopped before it joined (a setting Valkey refuses at start-up?); fix the ValkeyConfig, or see `kubectl logs " + n.Name + "` and delete that pod to retry"}, true
		}
		if n.lost() && v.restartable(n) {
			continue // restartLost brings it back
		}
		if n.lost() && n.Durable && !v.otherCopy(n) {
			// Its volume holds its shard's only copy, and its server cannot start from it:
			// a replacement would throw that copy away (with its claim, under reclaim
			// Delete). Only the user can say the data may go.
			return Action{Kind: Wait, Warning: true, Reason: fmt.Sprintf("%s holds the only copy of shard %d's data on its volume, and its server failed to start from it %d times in a row; see `kubectl logs %s`; to give that data up and replace the node, delete PersistentVolumeClaim %s-data",
				n.Name, n.Shard, n.FailedStarts, n.Name, n.Name)}, true
		}
		if v.unplaceable(n) && !v.otherCopy(n) {
			return Action{Kind: Wait, Warning: true, Reason: fmt.Sprintf("%s holds the only copy of shard %d's data on its volume, and its pod has not been placed for %s: %s; bring its volume's host back, or delete PersistentVolumeClaim %s-data to give that data up and replace the node",
				n.Name, n.Shard, Unplaceable, n.Unschedulable, n.Name)}, true
		}
		if n.lost() || v.failedRunning(n) || v.unplaceable(n) {
			lost = append(lost, n)
		}
	}
	if len(lost) == 0 {
		return Action{}, false
	}
	return Action{Kind: MarkLeaving, Nodes: names(lost), Reason: fmt.Sprintf("pod of %v lost; a replacement follows", names(lost))}, true
}

// failedRunning reports whether a joined node whose pod still runs (ready or not: a frozen
// process still completes TCP handshakes) does not answer and is flagged `fail` by its peers:
// a hung, frozen or cut-off server. The cluster has already given up on it (its replica takes
// over), so it is replaced like a lost pod; deleting its ValkeyNode stops the pod.
func (v view) failedRunning(n *Node) bool {
	if n.lost() || n.Lifecycle == Joining || n.reachable() || n.RecordedID == "" {
		return false
	}
	if n.Durable && n.FailedStarts > 0 && n.Pod == PodStarting {
		// Restarted on its volume and not up yet: its peers flagged it while it was down.
		// waitStarting watches the start, and a start that fails counts (restart.go).
		return false
	}
	for _, o := range v.reachable {
		if peer := o.State.Peer(n.RecordedID); peer != nil && peer.Failed() {
			return true
		}
	}
	return false
}

// forgetDead forgets IDs that servers flag as failed and that belong to no live node. A
// failed ID that still owns slots is left to Valkey's own failover: forgetting it would
// orphan them.
func forgetDead(v view) (Action, bool) {
	alive := map[string]bool{}
	for _, n := range v.live {
		if n.reachable() {
			alive[n.State.ID] = true
		} else if n.RecordedID != "" {
			alive[n.RecordedID] = true
		}
	}
	var dead []string
	seen := map[string]bool{}
	for _, n := range v.reachable {
		for _, peer := range n.State.View {
			if alive[peer.ID] || seen[peer.ID] || v.owners[peer.ID] > 0 || !(peer.Failing() || peer.NoAddr()) {
				continue
			}
			seen[peer.ID] = true
			dead = append(dead, peer.ID)
		}
	}
	if len(dead) == 0 {
		return Action{}, false
	}
	sort.Strings(dead)
	return Action{Kind: Forget, IDs: dead, Reason: fmt.Sprintf("forgetting %d failed node(s) that are gone", len(dead))}, true
}

// handOver fails a primary whose pod is being deleted over to its best in-sync replica while
// it still serves (its pod's preStop keeps it up for a few seconds): CLUSTER FAILOVER pauses
// its writes only until the replica has caught up, so a planned deletion loses nothing.
func handOver(v view) (Action, bool) {
	for i := range v.Nodes {
		n := &v.Nodes[i]
		d := n.dying
		if d == nil || !d.Reachable || d.Role != model.RolePrimary || len(d.Slots) == 0 {
			continue
		}
		voters := append(v.servers(), d) // the dying primary still votes
		var settling *Node
		for _, o := range v.reachable {
			if o.State.Role != model.RoleReplica || o.State.PrimaryID != d.ID || !o.State.LinkedToPrimary() {
				continue
			}
			if model.Electable(o.State, d.ID, voters) {
				return Action{Kind: Failover, Node: n.Name, Reason: fmt.Sprintf("%s is being deleted: its slots go to a replica first", n.Name)}, true
			}
			settling = o
		}
		if settling != nil {
			// A replica that joined a moment ago cannot win the election yet; its pod's
			// preStop keeps the primary serving for a few seconds more.
			return Action{Kind: Wait, Reason: fmt.Sprintf("%s is being deleted: its replica %s is settling before the handover", n.Name, settling.Name)}, true
		}
	}
	return Action{}, false
}

// adoptOrphans gives slots that nobody owns any more (their only copy was lost and dropped)
// to the empty primary of a shard that has no slot-holding primary, else to the primary
// holding the fewest; balance evens them out afterwards. When nobody owns any slot it forms
// the empty topology instead (Join).
func adoptOrphans(v view) (Action, bool) {
	var missing []int
	for s, ok := range v.covered {
		if !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 || len(v.reachable) == 0 {
		return Action{}, false
	}
	if len(missing) == model.SlotCount {
		// No server holds or knows any slot: every copy of the data is gone (a total outage;
		// or a stranger, now forgotten, had taken every slot). Every shard forms at once,
		// shard i taking even range i (Bootstrap assigns only slots nobody owns), so nothing
		// needs moving afterwards; giving every slot to one node would need a Rebalance.
		return Action{Kind: Join, Reason: "no server holds or knows any slot: every shard forms again at once, each with its even share of the slots"}, true
	}
	var target *Node
	for s := 0; s < v.Shards && target == nil; s++ {
		if v.primaryOf(s) != nil {
			continue
		}
		for _, n := range v.byShard[s] {
			if n.reachable() && n.State.Role == model.RolePrimary {
				target = n
				break
			}
		}
	}
	if target == nil {
		for s := 0; s < v.Shards; s++ {
			p := v.primaryOf(s)
			if p != nil && (target == nil || model.CountSlots(p.State.Slots) < model.CountSlots(target.State.Slots)) {
				target = p
			}
		}
	}
	if target == nil {
		return Action{}, false
	}
	ranges := model.CompactSlots(missing)
	return Action{Kind: AssignSlots, Node: target.Name, Slots: ranges, Reason: fmt.Sprintf("%d slots owned by nobody go to %s", len(missing), target.Name)}, true
}
