// Package plan decides the one next action of an Active cluster from what was observed: the
// live spec, the ValkeyNodes with their pods, and every reachable server's own view. It is
// pure (no I/O, no clock), so every rule is a table test. The reconciler performs the action,
// records it, and plans again on the next pass: the state of a long operation lives in Valkey
// and on the ValkeyNodes, never in operator memory, so a restarted operator resumes it.
package plan

import (
	"sort"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Lifecycles of a ValkeyNode (the same strings as its status.lifecycle).
const (
	Joining = "Joining"
	Active  = "Active"
	Leaving = "Leaving"
)

// Pod says what became of a node's pod.
type Pod int

const (
	PodReady    Pod = iota // running, ready, with an IP
	PodStarting            // created, not ready yet (scheduling, image, probe)
	PodLost                // failed or being deleted: its data is lost, its process may still run
	PodGone                // no pod any more: the process is gone for good
)

// SlowStart is how long a pod may take to turn ready before waiting for it says so in a
// Warning Event: pulling an image and starting Valkey take seconds, not minutes. It is the
// default of Observed.SlowStart (the operator's --slow-start).
const SlowStart = 3 * time.Minute

// lost reports whether the node's data is gone or going.
func (n *Node) lost() bool { return n.Pod == PodLost || n.Pod == PodGone }

// Node is one ValkeyNode as the planner sees it.
type Node struct {
	Name      string
	Shard     int
	Lifecycle string
	Pod       Pod
	// Unschedulable is the scheduler's reason when the pod cannot be placed ("" otherwise).
	Unschedulable string
	// NotReadyFor is how long the pod has existed without being ready (0 once it is).
	NotReadyFor time.Duration
	// Exited: the kubelet reports the pod's container terminated, so its server is surely
	// gone (a pod that is merely missing may still run on a node cut off from the API).
	Exited bool
	// RecordedID is status.nodeID: the Valkey node ID the node had when last seen.
	RecordedID string
	// State is the server's own report; nil when its pod is not ready, unreachable otherwise.
	State *model.NodeState
	// Hash is the node's spec hash, fixed at creation: everything whose change needs a new node.
	Hash string
	// Cordoned: the pod runs on a Kubernetes node marked for maintenance (cordoned, or being
	// drained by the cluster autoscaler). Its server is moved off like a stale one.
	Cordoned bool
	// VolumeLost: the node keeps its data on a volume whose claim is being deleted. Its
	// server still runs (the claim stays while its pod uses it) and is moved off like a
	// stale one, before the volume goes.
	VolumeLost bool
	// Durable: the node keeps its data and its Valkey identity (nodes.conf) on a volume that
	// outlives its pod (its claim is there and not being deleted) and its server has run. A
	// lost durable node is restarted on its volume (restart.go) rather than replaced.
	Durable bool
	// FailedStarts counts the restarts on its volume since its server last answered with its
	// recorded ID: a server that cannot start from its volume is not restarted forever.
	FailedStarts int
	// InSync is the pod's in-sync condition as last set (see InSync).
	InSync bool

	dying *model.NodeState // State of a server whose pod is being deleted
}

// Observed is everything one pass knows.
type Observed struct {
	Shards, Replicas int // the live spec
	// Hash is the spec hash a node created now would get; a node with another one is rolled
	// (replaced). "" when the live configRef does not resolve: nothing is rolled then.
	Hash  string
	Nodes []Node
	// SlowStart is how long a pod may take to turn ready before waiting for it is a warning;
	// 0 means the package's SlowStart.
	SlowStart time.Duration
	// Forming: the cluster is being formed (Creating), Shards and Replicas are its targetSpec
	// snapshot, and only the forming rules apply (forming.go).
	Forming bool
	// BackupRunning names a ValkeyBackup of the cluster that is streaming its shards'
	// snapshots ("" when none). No slot moves while it runs: a slot moved between two shards
	// snapshotted at different moments would have its keys in both objects, or in neither.
	BackupRunning string
	// ClientAddresses: the servers announce client addresses of their own (external access).
	// A departing server still answering is then forgotten only once it has exited
	// (retireLeaving).
	ClientAddresses bool
}

// Kind names an action.
type Kind string

const (
	None        Kind = ""            // converged: nothing to do
	Wait        Kind = "Wait"        // something is in progress (Valkey's own failover, a pod starting)
	CreateNodes Kind = "CreateNodes" // new ValkeyNodes (Joining) in Shards
	Join        Kind = "Join"        // MEET new shards' nodes and attach their replicas (Bootstrap)
	Replicate   Kind = "Replicate"   // attach Node as a replica of its shard's primary
	Rebalance   Kind = "Rebalance"   // move slots with their keys; Leaving primaries are drained
	MarkActive  Kind = "MarkActive"  // Nodes joined: lifecycle Active
	MarkLeaving Kind = "MarkLeaving" // Nodes are to go: lifecycle Leaving
	Remove      Kind = "Remove"      // FORGET Node everywhere else (it holds no slots); Delete follows
	Takeover    Kind = "Takeover"    // promote replica Node without a vote: too few primaries to elect
	// ForceFailover promotes replica Node by a vote started at once: its primary's process exited.
	ForceFailover Kind = "ForceFailover"
	Failover      Kind = "Failover"    // graceful CLUSTER FAILOVER of primary Node to an in-sync replica
	DropSlots     Kind = "DropSlots"   // forget dead IDs whose slots had no other copy (their data is lost)
	AssignSlots   Kind = "AssignSlots" // give Slots, owned by nobody, to the empty primary Node
	Forget        Kind = "Forget"      // FORGET dead IDs on every server
	// ForgetStrangers forgets IDs of another cluster's servers on every server but Nodes (a
	// Warning Event names them); Nodes, ours that replicate one of them (Valkey refuses to
	// forget a node's own primary), are marked Leaving.
	ForgetStrangers Kind = "ForgetStrangers"
	Delete          Kind = "Delete" // delete the ValkeyNode of Node (its pod follows)
	// StopServer deletes the pod of Leaving Node, whose server holds no slots, keeping its
	// ValkeyNode: with client addresses it is forgotten only once its server has exited.
	StopServer Kind = "StopServer"
	// RestartPods brings Nodes, durable nodes whose pods are gone or whose servers exited,
	// back on their volumes: a new pod of the same name on the same claim.
	RestartPods Kind = "RestartPods"
	// Reintroduce MEETs Nodes, members that know each other at stale addresses (restarted at
	// new pod IPs), so they find each other again; it touches no slot, epoch or role.
	Reintroduce Kind = "Reintroduce"
)

// Action is the one next step.
type Action struct {
	Kind   Kind
	Node   string            // Replicate, Remove, Delete
	Nodes  []string          // MarkActive, MarkLeaving, Rebalance (the primaries to drain), ForgetStrangers, RestartPods, Reintroduce
	Shards []int             // CreateNodes: one entry per node to create
	IDs    []string          // Forget, DropSlots, ForgetStrangers
	Slots  []model.SlotRange // AssignSlots
	Reason string            // why, for the Event and the log
	// Warning marks a Wait that needs the user (e.g. an unschedulable pod).
	Warning bool
	// Held marks a Wait on something outside the servers (slot moves held while a backup
	// streams): nothing changes on the servers for it, and its end is an API event.
	Held bool
	// DataLost, on a MarkLeaving, is how many nodes went with every copy of the cluster's
	// data (a total outage): no server left holds a slot. 0 otherwise.
	DataLost int
}

// Next plans the one next action. The rules of an Active cluster, first match wins:
//  0. a peer of a server that is no node of this cluster (another cluster's server, met by
//     hand or through a reused pod IP): ForgetStrangers, before anything acts on the merged
//     view (a stranger's slots would look like a lost primary's to the rules below);
//  1. a slot left importing/migrating, or a Leaving primary holding slots: Rebalance;
//  2. a primary whose pod is being deleted and still answers: Failover to an in-sync replica
//     (a planned deletion hands its slots over before the server stops);
//     Then, members that know each other at stale addresses (durable servers restarted at
//     new pod IPs): Reintroduce (restart.go);
//     Then rule 6's ForceFailover of a primary whose server exited, before its node is
//     marked Leaving and replaced (its slots are unserved until a replica is elected; the
//     views it reads are current once Reintroduce is done);
//     Then, every live node's pod lost and no copy of any slot left (a total outage):
//     MarkLeaving them all with DataLost, counting the lost nodes already Leaving too; a
//     durable node that can come back on its volume is not lost;
//  3. a Leaving node: Remove it (reachable; replicas first), Forget its ID (gone), then Delete it;
//     Then, durable nodes whose pods are gone or whose servers exited: RestartPods on their
//     volumes, a crashed primary that a replica follows only once the replica took over;
//  4. a lost pod, or a server whose pod runs but that its peers flag `fail` (hung, frozen):
//     MarkLeaving, so a replacement is planned and the dead ID forgotten; but a new node
//     whose server stopped before it ever answered: Wait with a warning (a durable node
//     that can come back on its volume is restarted instead, above);
//  5. a shard below 1+Replicas live nodes: CreateNodes;
//  6. a lost primary whose slots no replica has taken over yet: when its container exited and
//     a majority of primaries survives, ForceFailover its best replica (an election started
//     at once rather than a node timeout later; still a vote, never TAKEOVER); otherwise
//     Wait for Valkey's own failover, or Takeover by its best replica when too few primaries
//     survive to elect one (a 2-shard cluster that lost one) and the old primary is surely
//     gone: its pod deleted, or flagged failing by its peers (never while it may still serve);
//     a lost primary without any replica is dropped once surely gone (DropSlots, a warning:
//     the data of its slots is lost); but a durable primary that comes back on its volume is
//     waited for (never dropped; taken over only when its server crashed);
//     Then, a server loading its data from its volume: Wait;
//  7. a node not ready yet: Wait (with a warning when unschedulable, or not ready after
//     Observed.SlowStart);
//  8. slots nobody owns: AssignSlots to the empty primary of a shard without a slot-holding
//     primary, else to the primary holding the fewest slots; but when no server holds or
//     knows any slot (every copy is gone), Join: every shard forms at once, each with its
//     even share, and nothing is moved afterwards;
//  9. failed IDs that own no slots and belong to no live node: Forget;
//  10. new shards not joined yet: Join; a node of a formed shard not following its primary: Replicate;
//     a replica still loading its initial sync: Wait (the sync is watched, never held);
//  11. a departing shard's primary holding slots, or slots uneven by over 1%: Rebalance;
//  12. departing shards and surplus replicas (never a slot-holding primary): MarkLeaving;
//  13. joined nodes not Active yet: MarkActive;
//  14. a node whose spec hash is not the live one: roll its shard (the lowest such shard
//     first, one at a time): CreateNodes one replacement, Wait until it is a synced replica,
//     MarkLeaving a stale replica (replicas before their primary), Failover a stale primary
//     to a synced replica and only then MarkLeaving it.
//
// While a backup streams (Observed.BackupRunning), no slot moves: rules 1 and 11 become a
// Held Wait instead of a Rebalance, and the rules after them wait too (each assumes the
// moves before it are done: rule 3 would remove a Leaving primary that still holds slots,
// rule 12 would take a departing shard's replicas, perhaps the backup's source, before its
// slots). So a cluster in the middle of a reshape waits for the backup, Valkey's own
// failover still acting meanwhile; a settled cluster heals and rolls as usual (rules 2-10
// and 12-14 come first or apply without any move).
//
// A cluster being formed (Observed.Forming) follows formingRules instead.
func Next(o Observed) Action {
	v := index(o)
	rules := activeRules
	if o.Forming {
		rules = formingRules
	}
	for _, rule := range rules {
		if a, ok := rule(v); ok {
			return a
		}
	}
	return Action{}
}

// activeRules are the rules of Next for an Active cluster, in the order listed above.
var activeRules = []func(view) (Action, bool){
	forgetStrangers, resumeMoves, handOver, reintroduce, failoverExited, loseAll, retireLeaving, restartLost, dropLost,
	createMissing, waitFailover, waitLoading, waitStarting, adoptOrphans, forgetDead, joinNew, balance,
	markDeparting, activateJoined, roll,
}

// view is Observed indexed for the rules.
type view struct {
	Observed
	live      []*Node          // not Leaving
	byShard   map[int][]*Node  // live nodes per shard
	ids       map[string]*Node // Valkey node ID -> reachable node
	owners    map[string]int   // slot-owning node ID (any reachable server's view) -> slots
	covered   []bool           // slot -> owned by someone in some reachable server's view
	reachable []*Node
}

func index(o Observed) view {
	v := view{Observed: o, byShard: map[int][]*Node{}, ids: map[string]*Node{}, owners: map[string]int{}, covered: make([]bool, model.SlotCount)}
	v.Nodes = append([]Node(nil), o.Nodes...) // sorted below; the caller's slice stays as it is
	sort.SliceStable(v.Nodes, func(i, j int) bool {
		if v.Nodes[i].Shard != v.Nodes[j].Shard {
			return v.Nodes[i].Shard < v.Nodes[j].Shard
		}
		return v.Nodes[i].Name < v.Nodes[j].Name
	})
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.lost() {
			// A server whose pod is going away is acted on only to hand its slots over
			// while it still answers (handOver); otherwise it counts as gone already.
			n.dying, n.State = n.State, nil
		}
		if n.Lifecycle != Leaving {
			v.live = append(v.live, n)
			v.byShard[n.Shard] = append(v.byShard[n.Shard], n)
		}
		if n.reachable() {
			v.reachable = append(v.reachable, n)
			v.ids[n.State.ID] = n
			for _, peer := range n.State.View {
				if peer.IsPrimary() && len(peer.Slots) > 0 {
					v.owners[peer.ID] = max(v.owners[peer.ID], model.CountSlots(peer.Slots))
				}
				for _, r := range peer.Slots {
					for s := r.Start; s <= r.End; s++ {
						v.covered[s] = true
					}
				}
			}
		}
	}
	return v
}

func (n *Node) reachable() bool { return n.State != nil && n.State.Reachable && n.State.ID != "" }

func (n *Node) primaryWithSlots() bool {
	return n.reachable() && n.State.Role == model.RolePrimary && len(n.State.Slots) > 0
}

// inCluster reports whether the node knows other servers (it was MET).
func (n *Node) inCluster() bool { return n.reachable() && n.State.KnownNodes > 1 }

func names(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

// leavingPrimaries are the primaries to drain: Leaving ones and those of departing shards.
func (v view) leavingPrimaries() []string {
	var out []string
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.primaryWithSlots() && (n.Lifecycle == Leaving || n.Shard >= v.Shards) {
			out = append(out, n.Name)
		}
	}
	return out
}
