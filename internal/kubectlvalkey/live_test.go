package kubectlvalkey

import (
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replicaOutput is valkey-cli's output (stdin not a terminal: raw replies, one per line) for
// LiveScript on a replica with a slot move under way in its view.
const replicaOutput = "OK\n@@kubectl-valkey:cluster-nodes\n" +
	"bbb 10.0.0.2:6379@16379 myself,slave aaa 0 0 1 connected\n" +
	"aaa 10.0.0.1:6379@16379 master - 0 1700000000000 1 connected 0-8191\n" +
	"ccc 10.0.0.3:6379@16379 master - 0 1700000000000 2 connected 8192-16383\n" +
	"\n@@kubectl-valkey:cluster-info\n" +
	"cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_known_nodes:3\r\n" +
	"\n@@kubectl-valkey:info\n" +
	"# Replication\r\nrole:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nmaster_repl_offset:900\r\n" +
	"# Keyspace\r\ndb0:keys=42,expires=0,avg_ttl=0\r\n" +
	"\n@@kubectl-valkey:end\n"

func TestParseLive(t *testing.T) {
	tests := []struct {
		name, out string
		wantErr   string
		check     func(t *testing.T, st model.NodeState)
	}{
		{name: "a replica", out: replicaOutput, check: func(t *testing.T, st model.NodeState) {
			assert.Equal(t, "bbb", st.ID)
			assert.Equal(t, model.RoleReplica, st.Role)
			assert.Equal(t, "aaa", st.PrimaryID)
			assert.True(t, st.LinkedToPrimary())
			assert.Equal(t, int64(42), st.Keys)
			assert.Equal(t, int64(900), st.ReplOffset)
			assert.Equal(t, 3, st.KnownNodes)
		}},
		{name: "a wrong password", out: "WRONGPASS invalid username-password pair or user is disabled.\n@@kubectl-valkey:cluster-nodes\nNOAUTH Authentication required.\n",
			wantErr: "the server refused the application password: WRONGPASS"},
		{name: "output cut short", out: "OK\n@@kubectl-valkey:cluster-nodes\n", wantErr: "ended early"},
		{name: "a command refused", out: "OK\n@@kubectl-valkey:cluster-nodes\nNOPERM no permission\n@@kubectl-valkey:cluster-info\n\n@@kubectl-valkey:info\n\n@@kubectl-valkey:end\n",
			wantErr: "cluster-nodes: NOPERM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseLive(model.Node{Name: "n"}, tc.out)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, st)
		})
	}
}

func TestLiveScript(t *testing.T) {
	s := LiveScript(`pa"ss\word`)
	lines := strings.Split(strings.TrimSpace(s), "\n")
	assert.Equal(t, `AUTH "pa\"ss\\word"`, lines[0], "the password is one quoted argument, on stdin only")
	for _, l := range lines[1:] {
		assert.Regexp(t, `^(ECHO @@kubectl-valkey:[a-z-]+|CLUSTER NODES|CLUSTER INFO|INFO replication server keyspace persistence)$`, l, "read-only commands only")
	}
}

func TestServedAndText(t *testing.T) {
	st := func(out string) *model.NodeState {
		s, err := ParseLive(model.Node{}, out)
		require.NoError(t, err)
		return &s
	}
	primary := "OK\n@@kubectl-valkey:cluster-nodes\n" +
		"aaa 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-8191 [8000->-ccc] [8001->-ccc]\n" +
		"bbb 10.0.0.2:6379@16379 slave aaa 0 0 1 connected\n" +
		"ccc 10.0.0.3:6379@16379 master - 0 0 2 connected 8192-16383\n" +
		"@@kubectl-valkey:cluster-info\ncluster_state:ok\n@@kubectl-valkey:info\nmaster_repl_offset:1000\ndb0:keys=7,expires=0\n@@kubectl-valkey:end\n"
	r := &Report{Cluster: "c", Namespace: "ns", State: "Active", Desired: Topology{Shards: 2, ReplicasPerShard: 1}, Live: "valkey-cli",
		Nodes: []NodeReport{{Name: "c-a", Shard: 0, Lifecycle: "Active"}, {Name: "c-b", Shard: 0, Lifecycle: "Active"}, {Name: "c-c", Shard: 1, Lifecycle: "Active"}},
		TLS:   &TLSReport{Secret: "tls", NotAfter: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}}
	r.Served(map[string]*model.NodeState{"c-a": st(primary), "c-b": st(replicaOutput)}, map[string]error{"c-c": ErrAuth})

	a, b, c := r.Nodes[0], r.Nodes[1], r.Nodes[2]
	assert.Equal(t, "primary", a.Role)
	assert.Equal(t, []string{"0-8191"}, a.Slots)
	assert.Equal(t, 8192, a.SlotCount)
	assert.Equal(t, int64(7), a.Keys)
	assert.Equal(t, "replica", b.Role)
	assert.Equal(t, "c-a", b.Primary, "the primary by its ValkeyNode name")
	assert.Equal(t, "up", b.Link)
	require.NotNil(t, b.LagBytes)
	assert.Equal(t, int64(100), *b.LagBytes)
	assert.Equal(t, ErrAuth.Error(), c.Error)
	assert.Equal(t, []Move{{From: "c-a", To: "ccc", SlotsLeft: 2}}, r.Moves, "a target no answering server names stays an ID")
	assert.Equal(t, Topology{Shards: 1, ReplicasPerShard: 1}, r.Formed, "only answering servers count")

	var out strings.Builder
	require.NoError(t, r.WriteText(&out, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)))
	text := out.String()
	for _, want := range []string{
		"State:     Active", "Shards:    1 formed / 2 desired", "Replicas:  1 formed / 1 desired per shard",
		"certificate expires 2027-01-01T00:00:00Z (in 31d)", "c-a -> ccc: 2 slot(s) left",
	} {
		assert.Contains(t, text, want)
	}
	assert.Regexp(t, `c-b\s+0\s+Active\s+replica\s+0\s+-\s+42\s+up \(c-a\)\s+100B`, text)
}
