package plan

import (
	"fmt"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// stale reports whether the node is to be replaced: it was created from a spec the live one
// no longer matches, or its pod runs on a Kubernetes node going into maintenance. Either way
// the roll replaces it, replacement first, so a drain finds a shard that no longer needs
// the pod instead of retrying against its budget (and a shard without replicas, whose budget
// never lets its pod be evicted, is drained at all).
// Nothing is replaced while the live configRef does not resolve (Hash ""): a replacement
// could not be created.
func (v view) stale(n *Node) bool {
	return v.Hash != "" && (n.Hash != v.Hash || n.Cordoned || n.VolumeLost)
}

// why says why a stale node is replaced.
func (v view) why(n *Node) string {
	switch {
	case n.Hash != v.Hash:
		return "spec changed"
	case n.VolumeLost:
		return "its volume's PersistentVolumeClaim is being deleted"
	}
	return "its Kubernetes node is cordoned for maintenance"
}

// rolling reports whether a kept shard has a stale node.
func (v view) rolling(shard int) bool {
	if shard >= v.Shards {
		return false
	}
	for _, n := range v.byShard[shard] {
		if v.stale(n) {
			return true
		}
	}
	return false
}

// surging reports whether a rolling shard holds a replacement: it may then hold one node
// more than the topology asks for, the replacement standing in while a stale node retires.
func (v view) surging(shard int) bool {
	if !v.rolling(shard) {
		return false
	}
	for _, n := range v.byShard[shard] {
		if !v.stale(n) && !n.primaryWithSlots() {
			return true
		}
	}
	return false
}

// unwanted reports whether a node that never joined is no longer wanted: its shard was
// scaled away, or the spec it was made from was edited again. It is retired, not waited
// for or attached: it may never fit.
func (v view) unwanted(n *Node) bool {
	return n.Lifecycle == Joining && (n.Shard >= v.Shards || v.stale(n))
}

// synced reports whether replica follows primary with its link up, its initial sync done
// and its offset within model.MaxSyncLag: it holds the shard's data, so a stale node can
// go and a graceful failover to it loses nothing.
func synced(replica, primary *Node) bool {
	if !replica.reachable() || !primary.reachable() {
		return false
	}
	r := replica.State
	return r.Role == model.RoleReplica && r.PrimaryID == primary.State.ID && r.LinkedToPrimary() &&
		!r.SyncInProgress && primary.State.ReplOffset-r.ReplOffset <= model.MaxSyncLag
}

// electable reports whether every server has settled on replica following primary, so a
// graceful failover to it can win its election (model.Electable).
func (v view) electable(replica, primary *Node) bool {
	return model.Electable(replica.State, primary.State.ID, v.servers())
}

// servers are the reachable servers' own reports.
func (v view) servers() []*model.NodeState {
	out := make([]*model.NodeState, len(v.reachable))
	for i, o := range v.reachable {
		out[i] = o.State
	}
	return out
}

// roll replaces the stale nodes of one shard at a time, lowest shard first, keeping the
// shard at full strength throughout: a replacement is created first (surge) and must be a
// synced replica that every server knows as one before any stale node goes; stale replicas
// go before their primary; a stale primary is failed over gracefully to a synced replica,
// and goes only once the next pass has seen its slots gone. Every step is read back from
// the servers and ValkeyNodes, so an interrupted roll resumes where it stood.
func roll(v view) (Action, bool) {
	for s := 0; s < v.Shards; s++ {
		if !v.rolling(s) {
			continue
		}
		members := v.byShard[s]
		primary := v.primaryOf(s)
		if primary == nil {
			return Action{Kind: Wait, Reason: fmt.Sprintf("rolling shard %d: waiting for its primary", s)}, true
		}
		for _, n := range members {
			if n != primary && !v.stale(n) && !(synced(n, primary) && v.electable(n, primary)) {
				return Action{Kind: Wait, Reason: fmt.Sprintf("rolling shard %d: replacement %s is syncing with %s", s, n.Name, primary.Name)}, true
			}
		}
		surged := len(members) >= 2+v.Replicas
		for _, n := range members {
			if n == primary || !v.stale(n) {
				continue
			}
			if !surged {
				return v.surge(s, n)
			}
			return Action{Kind: MarkLeaving, Nodes: []string{n.Name}, Reason: fmt.Sprintf("rolling shard %d: stale replica %s (%s) retires, a synced replacement stands in", s, n.Name, v.why(n))}, true
		}
		if !surged {
			return v.surge(s, primary)
		}
		if !v.stale(primary) {
			continue // cannot happen: rolling(s) found a stale node
		}
		if primary.State.Role == model.RolePrimary {
			return Action{Kind: Failover, Node: primary.Name, Reason: fmt.Sprintf("rolling shard %d: stale primary %s (%s) hands its slots to a synced replacement", s, primary.Name, v.why(primary))}, true
		}
	}
	return Action{}, false
}

func (v view) surge(shard int, stale *Node) (Action, bool) {
	return Action{Kind: CreateNodes, Shards: []int{shard}, Reason: fmt.Sprintf("rolling shard %d: a replacement for %s (%s) is created first", shard, stale.Name, v.why(stale))}, true
}
