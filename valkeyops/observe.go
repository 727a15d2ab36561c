package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Role of a node as the node itself reports it.
type Role string

const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// NodeState is one node's own account of itself and of the cluster, from a single observation.
type NodeState struct {
	Node
	Reachable bool
	Err       error // why the node could not be observed (Reachable=false)

	ID             string
	Role           Role
	PrimaryID      string // for replicas: the primary it follows
	Slots          []SlotRange
	Flags          []string // the node's own flags in its view (e.g. "myself,master")
	LinkState      string   // replicas: master_link_status ("up"/"down"); primaries: "up"
	ClusterState   string   // cluster_state from CLUSTER INFO ("ok"/"fail")
	KnownNodes     int
	SlotsAssigned  int // cluster_slots_assigned in this node's view
	ConfigEpoch    uint64
	CurrentEpoch   uint64
	ReplOffset     int64 // master_repl_offset (replicas: offset processed from their primary)
	SyncInProgress bool
	Keys           int64  // keys in db0, the only database in cluster mode
	Version        string // valkey_version from INFO server, e.g. "8.0.1"
	View           []ClusterNode
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

// Observe returns a typed snapshot. Unreachable nodes are present with Reachable=false, never
// dropped. The error is reserved for caller mistakes (duplicate names); node failures live in
// the snapshot.
func (a *Admin) Observe(ctx context.Context, nodes []Node) (*Snapshot, error) {
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, opErr(n.Name, "observe", fmt.Errorf("%w: duplicate node name", ErrInvalidSpec))
		}
		seen[n.Name] = true
	}
	snap := &Snapshot{Nodes: make([]NodeState, len(nodes))}
	_ = parallel(nodes, func(n Node) error {
		i := indexOf(nodes, n.Name)
		snap.Nodes[i] = a.observeOne(ctx, n)
		return nil
	})
	return snap, nil
}

func indexOf(nodes []Node, name string) int {
	for i, n := range nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// observeNodeTimeout bounds one node's observation: a server that does not answer three
// read commands in this long (hung, frozen, cut off) counts as unreachable, rather than
// holding up the observation of every other node for as long as the caller would wait.
const observeNodeTimeout = 2 * time.Second

func (a *Admin) observeOne(ctx context.Context, n Node) NodeState {
	st := NodeState{Node: n}
	ctx, cancel := context.WithTimeout(ctx, observeNodeTimeout)
	defer cancel()
	// Three commands a node: an idle Active cluster is observed every few seconds, so each
	// one counts (INFO takes several sections at once since Valkey 7).
	cmds := [][]string{{"CLUSTER", "NODES"}, {"CLUSTER", "INFO"}, {"INFO", "replication", "server", "keyspace"}}
	res, err := a.multi(ctx, n, "observe", cmds)
	var serverSaid *valkey.ValkeyError
	if err != nil && !errors.As(err, &serverSaid) && ctx.Err() == nil {
		// A pooled connection can outlive its server: a new pod may have been given the old
		// one's IP. multi dropped that connection; one retry dials the address afresh.
		res, err = a.multi(ctx, n, "observe", cmds)
	}
	if err != nil {
		st.Err = err
		return st
	}
	texts := make([]string, len(res))
	for i, r := range res {
		if texts[i], err = r.ToString(); err != nil {
			st.Err = opErr(n.Name, "observe", err)
			return st
		}
		texts[i] = stripVerbatim(texts[i])
	}
	view, err := ParseClusterNodes(texts[0])
	if err != nil {
		st.Err = opErr(n.Name, "observe", err)
		return st
	}
	st.Reachable = true
	st.View = view
	info := parseInfo(texts[1])
	node := parseInfo(texts[2]) // the replication, server and keyspace sections
	st.ClusterState = info["cluster_state"]
	st.KnownNodes, _ = strconv.Atoi(info["cluster_known_nodes"])
	st.SlotsAssigned, _ = strconv.Atoi(info["cluster_slots_assigned"])
	st.CurrentEpoch, _ = strconv.ParseUint(info["cluster_current_epoch"], 10, 64)
	st.ReplOffset, _ = strconv.ParseInt(node["master_repl_offset"], 10, 64)
	st.SyncInProgress = node["master_sync_in_progress"] == "1"
	st.Keys = keysIn(node["db0"])
	st.Version = node["valkey_version"]
	if st.Version == "" {
		st.Version = node["redis_version"]
	}
	if self := st.Self(); self != nil {
		st.ID = self.ID
		st.Flags = self.Flags
		st.Slots = self.Slots
		st.ConfigEpoch = self.ConfigEpoch
		if self.IsReplica() {
			st.Role = RoleReplica
			st.PrimaryID = self.PrimaryID
			st.LinkState = node["master_link_status"]
		} else {
			st.Role = RolePrimary
			st.LinkState = "up"
		}
	}
	return st
}

// keysIn reads keys=N from an INFO keyspace value ("keys=3,expires=0,avg_ttl=0"); 0 when
// the database holds no key (INFO then has no line for it).
func keysIn(db string) int64 {
	for _, field := range strings.Split(db, ",") {
		if v, ok := strings.CutPrefix(field, "keys="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// parseInfo turns an INFO/CLUSTER INFO reply into key -> value.
func parseInfo(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// stripVerbatim removes the RESP3 verbatim-string format prefix ("txt:") that valkey-go keeps
// on replies such as CLUSTER NODES, CLUSTER INFO and INFO.
func stripVerbatim(s string) string {
	if len(s) >= 4 && s[3] == ':' && (s[:3] == "txt" || s[:3] == "mkd") {
		return s[4:]
	}
	return s
}
