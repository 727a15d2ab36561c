package plan_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/stretchr/testify/assert"
)

// forming is what a pass of a Creating cluster observes: the targetSpec's shape and the
// live hash "h1", every node Joining unless it says otherwise.
func forming(t *testing.T, shards, replicas int, servers []srv) plan.Observed {
	t.Helper()
	for i := range servers {
		if servers[i].life == "" {
			servers[i].life = plan.Joining
		}
	}
	o := observed(t, shards, replicas, servers)
	o.Forming, o.Hash = true, "h1"
	return o
}

// unmet are the four nodes of a 2x1 cluster, ready, that have not met yet.
func unmet() []srv {
	return []srv{
		{name: "a0", shard: 0, alone: true}, {name: "b0", shard: 0, alone: true},
		{name: "a1", shard: 1, alone: true}, {name: "b1", shard: 1, alone: true},
	}
}

func TestNextForming(t *testing.T) {
	tests := []struct {
		name   string
		obs    func(t *testing.T) plan.Observed
		want   plan.Action
		reason string // a part of the reason, when it matters
	}{
		{"nothing created: every node at once", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, nil)
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0, 0, 1, 1}}, ""},
		{"the nodes still missing", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, unmet()[:3])
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{1}}, ""},
		{"pods starting", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv { s[2].pod = plan.PodStarting; return s }))
		}, plan.Action{Kind: plan.Wait}, "a1 is starting"},
		{"a slow pod is waited for without a warning", func(t *testing.T) plan.Observed {
			o := forming(t, 2, 1, with(unmet(), func(s []srv) []srv { s[2].pod = plan.PodStarting; return s }))
			o.Nodes[2].NotReadyFor = 2 * plan.SlowStart
			return o
		}, plan.Action{Kind: plan.Wait}, ""},
		{"pods that cannot be scheduled: a warning naming each", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv {
				s[1].pod, s[1].unsched = plan.PodStarting, "0/3 nodes match zone z9"
				s[3].pod, s[3].unsched = plan.PodStarting, "0/3 nodes have 64Gi"
				return s
			}))
		}, plan.Action{Kind: plan.Wait, Warning: true},
			plan.UnschedulablePrefix + "b0: 0/3 nodes match zone z9; b1: 0/3 nodes have 64Gi"},
		{"a server that stopped on the current config is waited for (its refusal is reported apart)", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv { s[3].pod, s[3].exited = plan.PodGone, true; return s }))
		}, plan.Action{Kind: plan.Wait}, ""},
		{"a server that stopped on a config since changed is replaced", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv {
				s[3].pod, s[3].exited, s[3].hash = plan.PodGone, true, "h0"
				return s
			}))
		}, plan.Action{Kind: plan.Delete, Node: "b1"}, ""},
		{"a running node on an older config is kept: nodes are not rolled while forming", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv { s[0].hash = "h0"; return s }))
		}, plan.Action{Kind: plan.Join}, ""},
		{"a pod being deleted is waited for, not replaced", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(unmet(), func(s []srv) []srv { s[1].pod = plan.PodLost; return s }))
		}, plan.Action{Kind: plan.Wait}, ""},
		{"every pod ready, nobody met: Join", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, unmet())
		}, plan.Action{Kind: plan.Join}, "0 slot-holding primaries, want 2"},
		{"formed but a replica's link is down: Join again (Bootstrap is idempotent)", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				for i := range s {
					s[i].life = plan.Joining
				}
				s[3].linkDown = true
				return s
			}))
		}, plan.Action{Kind: plan.Join}, `replica b1 link to primary is "down"`},
		{"formed to the targetSpec: every node Active", func(t *testing.T) plan.Observed {
			return forming(t, 2, 1, formed2x1())
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"a0", "b0", "a1", "b1"}}, ""},
		{"formed short of the targetSpec's replicas: one more node", func(t *testing.T) plan.Observed {
			return forming(t, 2, 2, formed2x1())
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0, 1}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			assert.NotEmpty(t, got.Reason, "every action says why")
			assert.Contains(t, got.Reason, tt.reason)
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}
