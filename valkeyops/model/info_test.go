package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseInfo(t *testing.T) {
	got := parseInfo("# Replication\r\nrole:master\r\nmaster_repl_offset:42\r\n\r\n")
	assert.Equal(t, map[string]string{"role": "master", "master_repl_offset": "42"}, got)
}

// TestParseNodeState: a node's three replies become its NodeState; the replica's link and
// cluster_state are read into the typed values its predicates answer from.
func TestParseNodeState(t *testing.T) {
	n := Node{Name: "r0", Addr: "10.0.0.2:6379", Shard: 0}
	nodes := "bbbb 10.0.0.2:6379@16379 myself,slave aaaa 0 0 1 connected\n" +
		"aaaa 10.0.0.1:6379@16379 master - 0 1 1 connected 0-16383\n"
	clusterInfo := "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_known_nodes:2\r\ncluster_current_epoch:3\r\n"
	info := "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nmaster_repl_offset:42\r\n" +
		"# Server\r\nvalkey_version:8.0.1\r\n# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n"
	st, err := ParseNodeState(n, nodes, clusterInfo, info)
	require.NoError(t, err)
	assert.Equal(t, n, st.Node)
	assert.True(t, st.Reachable)
	assert.Equal(t, "bbbb", st.ID)
	assert.Equal(t, RoleReplica, st.Role)
	assert.Equal(t, "aaaa", st.PrimaryID)
	assert.Equal(t, PrimaryLinkUp, st.PrimaryLink)
	assert.True(t, st.LinkedToPrimary())
	assert.True(t, st.ClusterOK())
	assert.Equal(t, SlotCount, st.SlotsAssigned)
	assert.Equal(t, 2, st.KnownNodes)
	assert.Equal(t, uint64(3), st.CurrentEpoch)
	assert.Equal(t, int64(42), st.ReplOffset)
	assert.Equal(t, int64(3), st.Keys)
	assert.Equal(t, 8, st.MajorVersion())
	assert.True(t, st.Peer("aaaa").Connected())
	assert.False(t, st.Loading)

	st, err = ParseNodeState(n, nodes, clusterInfo, info+"# Persistence\r\nloading:1\r\naof_enabled:1\r\n")
	require.NoError(t, err)
	assert.True(t, st.Loading, "INFO persistence says the dataset is still loading")
	assert.Empty(t, st.PersistenceFaults)

	st, err = ParseNodeState(n, nodes, clusterInfo, info+"# Persistence\r\nrdb_last_bgsave_status:ok\r\naof_last_bgrewrite_status:ok\r\naof_last_write_status:err\r\n")
	require.NoError(t, err)
	assert.Equal(t, []string{"aof_last_write_status"}, st.PersistenceFaults, "a failed write to disk is named")

	down := strings.Replace(info, "master_link_status:up", "master_link_status:down", 1)
	st, err = ParseNodeState(n, nodes, strings.Replace(clusterInfo, "cluster_state:ok", "cluster_state:fail", 1), down)
	require.NoError(t, err)
	assert.Equal(t, PrimaryLinkDown, st.PrimaryLink)
	assert.False(t, st.LinkedToPrimary())
	assert.False(t, st.ClusterOK())

	primary := "aaaa 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-16383\n"
	st, err = ParseNodeState(n, primary, clusterInfo, "master_repl_offset:7\r\n")
	require.NoError(t, err)
	assert.Equal(t, RolePrimary, st.Role)
	assert.True(t, st.LinkedToPrimary(), "a primary follows no one")
	assert.Equal(t, []SlotRange{{0, 16383}}, st.Slots)

	_, err = ParseNodeState(n, "garbage\n", clusterInfo, info)
	assert.Error(t, err)
}
