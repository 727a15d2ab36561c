package plan_test

import (
	"slices"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// formed3x1 is a healthy 3-shard cluster with one replica each.
func formed3x1() []srv {
	return []srv{
		{name: "a0", shard: 0, slots: "0-5460"}, {name: "b0", shard: 0, of: "a0"},
		{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
		{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
	}
}

// lose sets the pods of the named servers (all when none is named) to pod.
func lose(pod plan.Pod, names ...string) func([]srv) []srv {
	return func(s []srv) []srv {
		for i := range s {
			if len(names) == 0 || slices.Contains(names, s[i].name) {
				s[i].pod = pod
			}
		}
		return s
	}
}

// newNodes are a freshly created replacement for every node of a shards x (1+replicas)
// cluster, each one ready and alone.
func newNodes(shards, replicas int) []srv {
	var out []srv
	for s := 0; s < shards; s++ {
		for r := 0; r <= replicas; r++ {
			out = append(out, srv{name: string(rune('n'+r)) + string(rune('0'+s)), shard: s, life: plan.Joining, alone: true})
		}
	}
	return out
}

// TestTotalOutage: every copy of every slot gone at once is told apart from a partial loss.
// The loss is flagged on the MarkLeaving that takes the last copy (the reconciler turns it
// into a Warning Event stamped with the time), and the replacements form the empty topology
// in one Join, each shard with its even range, so nothing is rebalanced afterwards.
func TestTotalOutage(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want plan.Action
	}{
		{"every pod of a 3x1 cluster deleted: the data is lost with all six", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), lose(plan.PodLost)))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "b0", "a1", "b1", "a2", "b2"}, DataLost: 6}},
		{"every pod deleted, servers still answering through their preStop: lost all the same", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), func(s []srv) []srv {
				for i := range s {
					s[i].pod, s[i].answers = plan.PodLost, true
				}
				return s
			}))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "b0", "a1", "b1", "a2", "b2"}, DataLost: 6}},
		{"every container exited (pods gone): lost", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), lose(plan.PodGone)))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "b0", "a1", "b1", "a2", "b2"}, DataLost: 6}},
		{"the only node of a 1x0 cluster lost: lost", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, []srv{{name: "a0", shard: 0, slots: "0-16383", pod: plan.PodLost}})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}, DataLost: 1}},
		{"the second half of a deletion takes the last copies: all six counted", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), func(s []srv) []srv {
				for i := range s {
					s[i].pod = plan.PodLost
					if i < 4 {
						s[i].life = plan.Leaving
					}
				}
				return s
			}))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a2", "b2"}, DataLost: 6}},
		{"every primary lost, replicas serving: partial, no data-loss flag", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), lose(plan.PodLost, "a0", "a1", "a2")),
				ghost{id: "id-a0", flags: "master,fail?", slots: "0-5460"}, ghost{id: "id-a1", flags: "master,fail?", slots: "5461-10922"},
				ghost{id: "id-a2", flags: "master,fail?", slots: "10923-16383"})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "a1", "a2"}}},
		{"the first half of a deletion: the rest still holds the slots", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), lose(plan.PodLost, "a0", "b0", "a1", "b1")))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "b0", "a1", "b1"}}},
		{"one primary without a replica lost: partial (its slots are dropped later)", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{{name: "a0", shard: 0, slots: "0-8191", pod: plan.PodLost}, {name: "a1", shard: 1, slots: "8192-16383"}})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}}},
		{"a survivor whose pod runs but that did not answer may hold data: no flag", func(t *testing.T) plan.Observed {
			o := observed(t, 3, 1, with(formed3x1(), lose(plan.PodLost, "a0", "a1", "b1", "a2", "b2")))
			o.Nodes[1].State.Reachable = false // b0: pod ready, observation failed
			return o
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0", "a1", "b1", "a2", "b2"}}},
		{"a replacement lost while the cluster forms again: no second flag", func(t *testing.T) plan.Observed {
			s := newNodes(3, 1)
			s[0].pod = plan.PodLost
			return observed(t, 3, 1, s)
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"n0"}}},
		{"the lost nodes are retired before replacements are made", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, with(formed3x1(), func(s []srv) []srv {
				for i := range s {
					s[i].pod, s[i].life = plan.PodGone, plan.Leaving
				}
				return s
			}))
		}, plan.Action{Kind: plan.Delete, Node: "a0"}},
		{"then every node is replaced at once", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, nil)
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0, 0, 1, 1, 2, 2}}},
		{"the replacements, all ready and alone, form the empty topology in one Join", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, newNodes(3, 1))
		}, plan.Action{Kind: plan.Join}},
		{"a 1x0 replacement forms too", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, newNodes(1, 0))
		}, plan.Action{Kind: plan.Join}},
		{"no rebalance after the Join: the new nodes turn Active", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "n0", shard: 0, slots: "0-5460", life: plan.Joining}, {name: "o0", shard: 0, of: "n0", life: plan.Joining},
				{name: "n1", shard: 1, slots: "5461-10922", life: plan.Joining}, {name: "o1", shard: 1, of: "n1", life: plan.Joining},
				{name: "n2", shard: 2, slots: "10923-16383", life: plan.Joining}, {name: "o2", shard: 2, of: "n2", life: plan.Joining},
			})
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"n0", "o0", "n1", "o1", "n2", "o2"}}},
		{"a lone 1x0 replacement holding every slot turns Active", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, []srv{{name: "n0", shard: 0, slots: "0-16383", life: plan.Joining, alone: true}})
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"n0"}}},
		{"a partial loss keeps adopting orphans into the empty replacement", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{{name: "a1", shard: 1, slots: "8192-16383"}, {name: "n0", shard: 0, life: plan.Joining, alone: true}})
		}, plan.Action{Kind: plan.AssignSlots, Node: "n0", Slots: []model.SlotRange{{Start: 0, End: 8191}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			require.NotEqual(t, plan.None, got.Kind)
			assert.NotEmpty(t, got.Reason, "every action says why")
			if got.DataLost > 0 {
				assert.Contains(t, got.Reason, "last copy")
			}
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}
