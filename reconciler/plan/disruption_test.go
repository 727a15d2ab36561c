package plan_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cordoned marks the named nodes as running on a Kubernetes node in maintenance.
func cordoned(o plan.Observed, names ...string) plan.Observed {
	for i := range o.Nodes {
		for _, n := range names {
			if o.Nodes[i].Name == n {
				o.Nodes[i].Cordoned = true
			}
		}
	}
	return o
}

// live is observed with the live spec hash every node was made from ("h1"): nothing is
// stale by its spec.
func live(t *testing.T, shards, replicas int, servers []srv, ghosts ...ghost) plan.Observed {
	o := observed(t, shards, replicas, servers, ghosts...)
	o.Hash = "h1"
	return o
}

// TestMaintenanceMovesNodes: a server whose pod runs on a Kubernetes node in maintenance is
// replaced like a stale one, replacement first, so the node can be drained without
// retrying against the shard's budget, and a shard without replicas is drained at all.
func TestMaintenanceMovesNodes(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want plan.Action
	}{
		{"no node in maintenance: nothing to do", func(t *testing.T) plan.Observed {
			return live(t, 2, 1, formed2x1())
		}, plan.Action{}},
		{"a replica on a cordoned node: a replacement first", func(t *testing.T) plan.Observed {
			return cordoned(live(t, 2, 1, formed2x1()), "b0")
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"with the replacement synced, the cordoned replica retires", func(t *testing.T) plan.Observed {
			return cordoned(live(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, of: "a0"})), "b0")
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a replacement still syncing is waited for", func(t *testing.T) plan.Observed {
			return cordoned(live(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, of: "a0", lag: model.MaxSyncLag + 1})), "b0")
		}, plan.Action{Kind: plan.Wait}},
		{"a shard without replicas: its primary fails over to a synced replacement", func(t *testing.T) plan.Observed {
			return cordoned(live(t, 2, 0, []srv{
				{name: "a0", shard: 0, slots: "0-8191"}, {name: "c0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "8192-16383"},
			}), "a0")
		}, plan.Action{Kind: plan.Failover, Node: "a0"}},
		{"a shard without replicas: the replacement comes first", func(t *testing.T) plan.Observed {
			return cordoned(live(t, 2, 0, []srv{{name: "a0", shard: 0, slots: "0-8191"}, {name: "a1", shard: 1, slots: "8192-16383"}}), "a0")
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"while the live config does not resolve nothing is replaced", func(t *testing.T) plan.Observed {
			return cordoned(observed(t, 2, 1, formed2x1()), "b0") // Hash ""
		}, plan.Action{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			if got.Kind != plan.None {
				assert.NotEmpty(t, got.Reason, "every action says why")
			}
			if got.Kind == plan.CreateNodes || got.Kind == plan.MarkLeaving || got.Kind == plan.Failover {
				assert.Contains(t, got.Reason, "cordoned", "the Event says the node is in maintenance")
			}
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestInSync: a pod counts as an in-sync copy of its shard when its server is a primary
// serving slots or a replica caught up with its shard's primary; once in sync, a replica
// stays so up to a wider lag; a server not observed keeps its last value.
func TestInSync(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want map[string]bool
	}{
		{"a healthy cluster: every node in sync", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1())
		}, map[string]bool{"a0": true, "b0": true, "a1": true, "b1": true}},
		{"a replica lagging more than MaxSyncLag is not in sync yet", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].lag = model.MaxSyncLag + 1; return s }))
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
		{"a replica already in sync stays so under a burst (hysteresis)", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].lag = plan.StayInSyncLag; return s }))
			o.Nodes[1].InSync = true
			return o
		}, map[string]bool{"a0": true, "b0": true, "a1": true, "b1": true}},
		{"beyond StayInSyncLag even an in-sync replica drops out", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].lag = plan.StayInSyncLag + 1; return s }))
			o.Nodes[1].InSync = true
			return o
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
		{"a replica whose link is down", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].linkDown = true; return s }))
			o.Nodes[1].InSync = true
			return o
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
		{"a replica loading its full sync", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, formed2x1())
			o.Nodes[1].State.SyncInProgress = true
			return o
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
		{"a replica following another shard's primary holds no copy of its own shard", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].of = "a1"; return s }))
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
		{"a new shard's empty primary and its replica hold nothing yet", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2}, srv{name: "b2", shard: 2, of: "a2"}))
		}, map[string]bool{"a0": true, "b0": true, "a1": true, "b1": true, "a2": false, "b2": false}},
		{"a server not observed (pod starting) keeps its value", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].pod = plan.PodStarting; return s }))
		}, map[string]bool{"a0": true, "a1": true, "b1": true}},
		{"a primary whose pod is being deleted, still serving, counts for nothing", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].pod, s[0].answers = plan.PodLost, true; return s }))
		}, map[string]bool{"a0": false, "b0": false, "a1": true, "b1": true}},
		{"a leaving replica counts for nothing", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].life = plan.Leaving; return s }))
		}, map[string]bool{"a0": true, "b0": false, "a1": true, "b1": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.obs(t)
			require.NotEmpty(t, o.Nodes)
			assert.Equal(t, tt.want, plan.InSync(o))
		})
	}
}

// TestLostVolumeMovesNode: a server whose data claim is being deleted (its pod keeps the
// claim until it stops) is moved off it like a stale one, replacement first, and the Event
// says why.
func TestLostVolumeMovesNode(t *testing.T) {
	volumeLost := func(o plan.Observed, name string) plan.Observed {
		for i := range o.Nodes {
			if o.Nodes[i].Name == name {
				o.Nodes[i].VolumeLost = true
			}
		}
		return o
	}
	tests := []struct {
		name string
		obs  plan.Observed
		want plan.Action
	}{
		{"a replacement first", volumeLost(live(t, 2, 1, formed2x1()), "b0"),
			plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"with the replacement synced, the node retires", volumeLost(live(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, of: "a0"})), "b0"),
			plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs)
			assert.Contains(t, got.Reason, "PersistentVolumeClaim is being deleted")
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}
