package model

import (
	"strconv"
	"strings"
)

// Role of a node as the node itself reports it.
type Role string

const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// PrimaryLinkState is a replica's link to its primary: master_link_status of INFO
// replication.
type PrimaryLinkState string

const (
	// PrimaryLinkUp: linked and past the initial sync.
	PrimaryLinkUp   PrimaryLinkState = "up"
	PrimaryLinkDown PrimaryLinkState = "down"
)

// NodeState is one node's own account of itself and of the cluster, from a single observation.
type NodeState struct {
	Node
	Reachable bool
	Err       error // why the node could not be observed (Reachable=false)

	ID        string
	Role      Role
	PrimaryID string // for replicas: the primary it follows
	Slots     []SlotRange
	Flags     []string // the node's own flags in its view (e.g. "myself,master")
	// PrimaryLink is, for a replica, its link to its primary (see LinkedToPrimary); a primary
	// reports PrimaryLinkUp. It is not a cluster-bus link: that is ClusterNode.BusLink.
	PrimaryLink    PrimaryLinkState
	ClusterState   string // cluster_state from CLUSTER INFO ("ok"/"fail"; see ClusterOK)
	KnownNodes     int
	SlotsAssigned  int // cluster_slots_assigned in this node's view
	ConfigEpoch    uint64
	CurrentEpoch   uint64
	ReplOffset     int64 // master_repl_offset (replicas: offset processed from their primary)
	SyncInProgress bool
	// Loading: the server is still loading its dataset from disk (a durable node restarted on
	// its volume). It answers reads of its state meanwhile, but no MEET and no data command.
	Loading bool
	// PersistenceFaults name what the server failed to write to disk last time it tried
	// (INFO persistence fields that read "err": aof_last_write_status,
	// aof_last_bgrewrite_status, rdb_last_bgsave_status), a full volume most often. A server
	// that cannot write its AOF, or whose last snapshot failed, refuses writes (-MISCONF).
	PersistenceFaults []string
	Keys              int64  // keys in db0, the only database in cluster mode
	Version           string // valkey_version from INFO server, e.g. "8.0.1"
	View              []ClusterNode
}

// LinkedToPrimary reports whether the replica's link to its primary is up: connected, and
// past its initial sync (true for a primary, which follows no one).
func (s *NodeState) LinkedToPrimary() bool { return s.PrimaryLink == PrimaryLinkUp }

// ClusterOK reports whether the node's cluster_state is ok: in its view every slot is served.
func (s *NodeState) ClusterOK() bool { return s.ClusterState == clusterStateOK }

// Failing reports whether the node's own line carries fail/pfail flags.
func (s *NodeState) Failing() bool {
	for _, f := range s.Flags {
		if f == flagFail || f == flagPFail {
			return true
		}
	}
	return false
}

// Self is this node's own line of its view.
func (s *NodeState) Self() *ClusterNode {
	for i := range s.View {
		if s.View[i].Myself() {
			return &s.View[i]
		}
	}
	return nil
}

// Peer is the line for node id in this node's view (nil if unknown).
func (s *NodeState) Peer(id string) *ClusterNode {
	for i := range s.View {
		if s.View[i].ID == id {
			return &s.View[i]
		}
	}
	return nil
}

// MajorVersion of the server (0 when unknown).
func (s *NodeState) MajorVersion() int {
	v, _, _ := strings.Cut(s.Version, ".")
	n, _ := strconv.Atoi(v)
	return n
}

// Snapshot is a typed view of a set of nodes at one moment. Unreachable nodes are present
// with Reachable=false, never dropped.
type Snapshot struct {
	Nodes []NodeState
}

// ByName finds a node by its ValkeyNode name.
func (s *Snapshot) ByName(name string) *NodeState {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i]
		}
	}
	return nil
}

// ByID finds a reachable node by its Valkey node ID.
func (s *Snapshot) ByID(id string) *NodeState {
	for i := range s.Nodes {
		if s.Nodes[i].Reachable && s.Nodes[i].ID == id {
			return &s.Nodes[i]
		}
	}
	return nil
}

// Primaries are the reachable nodes reporting themselves as primary.
func (s *Snapshot) Primaries() []*NodeState {
	var out []*NodeState
	for i := range s.Nodes {
		if s.Nodes[i].Reachable && s.Nodes[i].Role == RolePrimary {
			out = append(out, &s.Nodes[i])
		}
	}
	return out
}

// ReplicasOf are the reachable nodes reporting primaryID as their primary.
func (s *Snapshot) ReplicasOf(primaryID string) []*NodeState {
	var out []*NodeState
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Reachable && n.Role == RoleReplica && n.PrimaryID == primaryID {
			out = append(out, n)
		}
	}
	return out
}

// Unreachable lists the names of nodes that could not be observed.
func (s *Snapshot) Unreachable() []string {
	var out []string
	for _, n := range s.Nodes {
		if !n.Reachable {
			out = append(out, n.Name)
		}
	}
	return out
}
