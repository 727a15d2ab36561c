package plan_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStrangers: a peer that is no node of the cluster is forgotten everywhere (and reported)
// before anything acts on the merged view; failed ex-members, handshakes and our own nodes
// known only by their recorded ID are not strangers.
func TestStrangers(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want plan.Action
		says []string // in the reason (the Warning Event's message)
	}{
		{"another cluster's server met by hand is forgotten", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "id-x", flags: "master"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-x"}}, []string{"id-x", "10.0.0.9:6379", "a0, b0, a1, b1"}},
		{"a stranger that took every slot is forgotten, not failed over to nor dropped", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, []srv{{name: "a0", shard: 0, keys: 10}}, ghost{id: "id-w", flags: "master", slots: "0-16383"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-w"}}, []string{"claiming 16384 slot(s)"}},
		{"a stranger that took one shard's slots is forgotten first", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].slots = ""; return s }),
				ghost{id: "id-w", flags: "master", slots: "0-8191"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-w"}}, nil},
		{"several strangers in one action, sorted", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "id-y", flags: "slave"}, ghost{id: "id-x", flags: "master"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-x", "id-y"}}, nil},
		{"our replica following a stranger is replaced", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, []srv{{name: "a0", shard: 0, slots: "0-16383"}, {name: "b0", shard: 0, of: "w", ofID: "id-w"}},
				ghost{id: "id-w", flags: "master"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-w"}, Nodes: []string{"b0"}}, []string{"replicated by b0"}},
		{"a Leaving follower that alone still knows the stranger is removed by retireLeaving", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, []srv{{name: "b0", shard: 0, of: "w", ofID: "id-w", life: plan.Leaving}, {name: "n0", shard: 0, life: plan.Joining, alone: true}},
				ghost{id: "id-w", flags: "master"})
		}, plan.Action{Kind: plan.Delete, Node: "b0"}, nil},
		{"a Leaving follower is left out of the forget while others still know the stranger", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, []srv{{name: "a0", shard: 0, slots: "0-16383"}, {name: "b0", shard: 0, of: "w", ofID: "id-w", life: plan.Leaving}},
				ghost{id: "id-w", flags: "master"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-w"}, Nodes: []string{"b0"}}, []string{"known to a0, b0"}},
		{"a follower whose pod is being deleted is left out of the forget too", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, []srv{{name: "a0", shard: 0, slots: "0-16383"}, {name: "b0", shard: 0, of: "w", ofID: "id-w", pod: plan.PodLost, answers: true}},
				ghost{id: "id-w", flags: "master"})
		}, plan.Action{Kind: plan.ForgetStrangers, IDs: []string{"id-w"}, Nodes: []string{"b0"}}, []string{"known to a0"}},
		{"after the stranger is forgotten its slots go back to our empty primary", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].slots = ""; return s }))
		}, plan.Action{Kind: plan.AssignSlots, Node: "a0", Slots: []model.SlotRange{{Start: 0, End: 8191}}}, nil},
		{"after a stranger that had every slot is forgotten the shards form again", func(t *testing.T) plan.Observed {
			return observed(t, 1, 0, []srv{{name: "a0", shard: 0, keys: 10}})
		}, plan.Action{Kind: plan.Join}, nil},
		{"a failed ex-member is left to forgetDead", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "id-gone", flags: "slave,fail"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-gone"}}, nil},
		{"an ex-member without an address is left to forgetDead", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "id-gone", flags: "master,noaddr"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-gone"}}, nil},
		{"a pfail peer is not taken for a stranger yet", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "id-gone", flags: "master,fail?"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-gone"}}, nil},
		{"a handshake entry is ignored", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1(), ghost{id: "random-handshake-id", flags: "master,handshake"})
		}, plan.Action{}, nil},
		{"our node known only by its recorded ID is not a stranger", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, formed2x1())
			o.Nodes[1].State = &model.NodeState{Node: model.Node{Name: "b0", Shard: 0}} // did not answer
			return o
		}, plan.Action{Kind: plan.Wait}, nil},
		{"our Leaving node's recorded ID is not a stranger", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].life, s[1].hung = plan.Leaving, true
				return s
			}))
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-b0"}}, nil},
		{"a peer at the address of our node whose ID is not known yet is not a stranger", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, life: plan.Joining, recorded: "-", alone: true}),
				ghost{id: "id-c0", flags: "master"})
			for i := range o.Nodes {
				if o.Nodes[i].Name == "c0" {
					o.Nodes[i].State = &model.NodeState{Node: model.Node{Name: "c0", Addr: "10.0.0.9:6379"}}
				}
			}
			return o
		}, plan.Action{Kind: plan.Wait}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			if got.Kind != plan.None {
				require.NotEmpty(t, got.Reason, "every action says why")
			}
			for _, s := range tt.says {
				assert.Contains(t, got.Reason, s)
			}
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}
