package valkeyops

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// A fresh node is lowered only when its configured timeout is known and higher than the one
// it forms at; only a new cluster's nodes turn replica failover off.
func TestPrepareFresh(t *testing.T) {
	base := [][]string{
		{"CLUSTER", "SET-CONFIG-EPOCH", "7"},
		{"CONFIG", "SET", "repl-diskless-sync-delay", "0"},
	}
	for _, tc := range []struct {
		name       string
		configured int
		forming    bool
		want       []string // the CONFIG SET appended to base, nil = none
	}{
		{"new cluster", 3000, true, []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(formingNodeTimeout), "cluster-replica-no-failover", "yes"}},
		{"joining a formed cluster", 3000, false, []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(joiningNodeTimeout)}},
		{"configured timeout unknown", 0, true, nil},
		{"configured at the forming timeout already", formingNodeTimeout, true, nil},
		{"configured below the joining timeout", joiningNodeTimeout - 1, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := base
			if tc.want != nil {
				want = append(append([][]string(nil), base...), tc.want)
			}
			assert.Equal(t, want, prepareFresh(model.Node{Name: "n", NodeTimeoutMillis: tc.configured}, 7, tc.forming))
		})
	}
}

// A cluster restored from a backup starts with primaries that own the slots their loaded keys
// hash to but know nobody and have no epoch: they are prepared as new servers (distinct
// epochs, no diskless-sync delay, the forming timeout), as their empty replicas are, so the
// cluster forms as fast as an empty one; a primary is given only the part of its shard's
// ranges it does not own yet. A server that formed before (an epoch of its own) is not new.
func TestPreparationOfRestoredServers(t *testing.T) {
	a, err := NewAdmin(Options{Credentials: Credentials{Password: "pw"}})
	require.NoError(t, err)
	node := func(name string, shard int, epoch uint64, slots ...model.SlotRange) model.NodeState {
		return model.NodeState{Node: model.Node{Name: name, Shard: shard, NodeTimeoutMillis: 3000}, Reachable: true,
			Slots: slots, KnownNodes: 1, ConfigEpoch: epoch,
			View: []model.ClusterNode{{ID: name, Flags: []string{"myself", "master"}, Slots: slots}}}
	}
	layout := [][]model.SlotRange{{{Start: 0, End: 8191}}, {{Start: 8192, End: 16383}}}
	restored := &model.Snapshot{Nodes: []model.NodeState{
		node("p0", 0, 0, model.SlotRange{Start: 0, End: 100}, model.SlotRange{Start: 200, End: 8191}),
		node("p1", 1, 0, model.SlotRange{Start: 8192, End: 16383}),
		node("r0", 0, 0), node("r1", 1, 0),
	}}
	prep := a.preparation(restored, []*model.NodeState{&restored.Nodes[0], &restored.Nodes[1]}, layout)
	epochs := map[string]bool{}
	for _, name := range []string{"p0", "p1", "r0", "r1"} {
		cmds := prep[name]
		require.GreaterOrEqual(t, len(cmds), 4, "%s: %v", name, cmds)
		assert.Equal(t, "SET-CONFIG-EPOCH", cmds[1][1], name)
		epochs[cmds[1][2]] = true
		assert.Equal(t, []string{"CONFIG", "SET", "repl-diskless-sync-delay", "0"}, cmds[2], name)
		assert.Equal(t, []string{"CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(formingNodeTimeout), "cluster-replica-no-failover", "yes"}, cmds[3], name)
	}
	assert.Len(t, epochs, 4, "distinct epochs")
	assert.Equal(t, []string{"CLUSTER", "ADDSLOTSRANGE", "101", "199"}, prep["p0"][len(prep["p0"])-1], "only the slots p0 does not own")
	assert.Len(t, prep["p1"], 4, "p1 owns its whole range: nothing to add")

	formed := &model.Snapshot{Nodes: []model.NodeState{node("p0", 0, 3, model.SlotRange{Start: 0, End: 16383})}}
	prep = a.preparation(formed, []*model.NodeState{&formed.Nodes[0]}, [][]model.SlotRange{{{Start: 0, End: 16383}}})
	assert.Equal(t, [][]string{a.replicationLoginCmd()}, prep["p0"], "a server with an epoch of its own is not new")
}
