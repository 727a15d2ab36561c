package plan

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Durable nodes keep their data and their Valkey identity on a volume, so a lost one comes
// back rather than being replaced: the operator makes a new pod of the same name on the same
// claim (pods never restart by themselves: a kubelet restarting a crashed primary would race
// its replica's promotion). The order keeps the one safety rule, that a restarted server
// never serves older data than its shard acknowledged meanwhile:
//   - a crashed primary that a replica follows is restarted only once the replica holds its
//     slots (waitFailover promotes it first); the restarted server then learns the higher
//     epoch from its peers, turns into that replica's replica and resyncs from it;
//   - a primary whose pod was deleted handed its slots over first if it could (handOver); if
//     it could not, its volume holds every write it acknowledged (SIGTERM fsyncs the AOF), so
//     it is restarted at once and nobody takes over meanwhile;
//   - a lost primary that nobody replicates is restarted at once, its slots never dropped.
// A server restarted at a new pod IP is found again by its peers when it dials them; when
// every server moved (a full restart), nobody can reach anybody, and reintroduce MEETs them.

// maxFailedStarts is how many restarts in a row may fail (the server never answering with
// its identity) before the node is replaced like one without a volume.
const maxFailedStarts = 3

// restartable reports whether lost node n comes back on its volume: it is durable, its server
// has not failed to start from it maxFailedStarts times in a row, and it is not a stale node
// whose shard has another copy (a node going away anyway comes back only when it holds its
// shard's only copy).
func (v view) restartable(n *Node) bool {
	return n.Durable && n.FailedStarts < maxFailedStarts && !(v.stale(n) && v.otherCopy(n))
}

// Unplaceable is how long a durable node's restarted pod may stay unschedulable (its volume
// pins it to a host that is gone or full) before the node is replaced, when its shard has
// another copy.
const Unplaceable = 5 * time.Minute

// unplaceable reports whether n was restarted on its volume and its pod has not been placed
// for Unplaceable.
func (v view) unplaceable(n *Node) bool {
	return n.Durable && n.FailedStarts > 0 && n.Pod == PodStarting && n.Unschedulable != "" && n.NotReadyFor >= Unplaceable
}

// otherCopy reports whether another reachable member serves n's shard.
func (v view) otherCopy(n *Node) bool {
	p := v.primaryOf(n.Shard)
	return p != nil && p != n
}

// replicated reports whether a reachable replica follows the node with Valkey ID id.
func (v view) replicated(id string) bool {
	for _, o := range v.reachable {
		if o.State.Role == model.RoleReplica && o.State.PrimaryID == id {
			return true
		}
	}
	return false
}

// restartLost brings back, all at once, the durable nodes whose pods are gone or whose
// servers exited. A pod still being deleted is waited for (its name is taken until it goes),
// and a crashed slot owner that a replica follows waits for the replica to take over.
func restartLost(v view) (Action, bool) {
	var restart []string
	for _, n := range v.live {
		if n.Pod != PodGone || !v.restartable(n) {
			continue
		}
		if n.Exited && v.owners[n.RecordedID] > 0 && v.replicated(n.RecordedID) {
			continue
		}
		restart = append(restart, n.Name)
	}
	if len(restart) == 0 {
		return Action{}, false
	}
	return Action{Kind: RestartPods, Nodes: restart, Reason: fmt.Sprintf("%v restart on their volumes, with their data and identity", restart)}, true
}

// reintroduce MEETs the members when one knows another at an address that is not the one it
// has now (or at no address): they restarted at new pod IPs and cannot all find each other by
// themselves. It comes before every rule that reads the servers' views, which stale addresses
// mislead. New nodes not met yet are joinNew's, servers still loading their data are left
// until they are done (a loading server refuses MEET), and a server that knows no member at
// all (a one-node cluster of its own) is never introduced: only a member that knows the
// others' IDs is.
func reintroduce(v view) (Action, bool) {
	var members []*Node
	for _, n := range v.reachable {
		if n.Lifecycle != Joining && n.inCluster() && !n.State.Loading {
			members = append(members, n)
		}
	}
	var stale []string
	for _, a := range members {
		for _, b := range members {
			if a == b {
				continue
			}
			p := a.State.Peer(b.State.ID)
			if p == nil {
				continue // not known at all: not an address to repair
			}
			if at := hostOf(b.State.Addr); p.NoAddr() || p.IP != at {
				stale = append(stale, fmt.Sprintf("%s knows %s at %q, it is at %s", a.Name, b.Name, p.IP, at))
			}
		}
	}
	if len(stale) == 0 {
		return Action{}, false
	}
	sort.Strings(stale)
	if len(stale) > 3 {
		stale = append(stale[:3], fmt.Sprintf("and %d more", len(stale)-3))
	}
	return Action{Kind: Reintroduce, Nodes: names(members), Reason: "members know each other at old addresses (" + strings.Join(stale, "; ") + ")"}, true
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// waitLoading waits while a server loads its data from its volume: until then it answers
// nothing but its own state, and its shard is not served by it.
func waitLoading(v view) (Action, bool) {
	for _, n := range v.live {
		if n.reachable() && n.State.Loading {
			return Action{Kind: Wait, Reason: n.Name + " is loading its data from its volume"}, true
		}
	}
	return Action{}, false
}
