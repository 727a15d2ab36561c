package model

import (
	"strconv"
	"strings"
)

// clusterStateOK is CLUSTER INFO's cluster_state of a node that serves its slots.
const clusterStateOK = "ok"

// ParseNodeState is node n's account of itself and of the cluster, from its replies (verbatim
// prefixes removed) to CLUSTER NODES, CLUSTER INFO and INFO replication server keyspace
// persistence: the
// one place that reads those INFO fields. The error is CLUSTER NODES' that does not parse.
func ParseNodeState(n Node, clusterNodes, clusterInfo, info string) (NodeState, error) {
	view, err := ParseClusterNodes(clusterNodes)
	if err != nil {
		return NodeState{}, err
	}
	st := NodeState{Node: n, Reachable: true, View: view}
	cluster := parseInfo(clusterInfo)
	node := parseInfo(info) // the replication, server, keyspace and persistence sections
	st.ClusterState = cluster["cluster_state"]
	st.KnownNodes, _ = strconv.Atoi(cluster["cluster_known_nodes"])
	st.SlotsAssigned, _ = strconv.Atoi(cluster["cluster_slots_assigned"])
	st.CurrentEpoch, _ = strconv.ParseUint(cluster["cluster_current_epoch"], 10, 64)
	st.ReplOffset, _ = strconv.ParseInt(node["master_repl_offset"], 10, 64)
	st.SyncInProgress = node["master_sync_in_progress"] == "1"
	st.Loading = node["loading"] == "1"
	for _, f := range persistenceStatusFields {
		if node[f] == "err" {
			st.PersistenceFaults = append(st.PersistenceFaults, f)
		}
	}
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
			st.PrimaryLink = PrimaryLinkState(node["master_link_status"])
		} else {
			st.Role = RolePrimary
			st.PrimaryLink = PrimaryLinkUp
		}
	}
	return st, nil
}

// persistenceStatusFields are the INFO persistence fields that say whether the server's
// last write to disk of each kind succeeded ("ok") or failed ("err").
var persistenceStatusFields = []string{"aof_last_write_status", "aof_last_bgrewrite_status", "rdb_last_bgsave_status"}

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
