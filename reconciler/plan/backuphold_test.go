package plan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gomomento/valkey-operator/reconciler/plan"
)

// TestBackupHoldsSlotMoves: while a backup of the cluster streams, every slot move the
// planner would start (a scale-out's, a scale-in's drain, an uneven spread, an interrupted
// move, a Leaving primary's drain) is a Held Wait naming the backup; what moves no slot
// (a lost pod's replacement, a new replica) goes on; with no backup the same clusters move.
func TestBackupHoldsSlotMoves(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		// without is the action with no backup running; with a backup every Rebalance is held.
		without plan.Action
	}{
		{"scale-out", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining},
				srv{name: "b2", shard: 2, life: plan.Joining, of: "a2"}))
		}, plan.Action{Kind: plan.Rebalance}},
		{"scale-in", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, formed2x1())
		}, plan.Action{Kind: plan.Rebalance, Nodes: []string{"a1"}}},
		{"uneven slots", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{{name: "a0", shard: 0, slots: "0-12000"}, {name: "a1", shard: 1, slots: "12001-16383"}})
		}, plan.Action{Kind: plan.Rebalance}},
		{"an interrupted move", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[2].importing = true; return s }))
		}, plan.Action{Kind: plan.Rebalance}},
		{"a leaving primary holding slots", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, with(formed2x1(), func(s []srv) []srv { s[2].life, s[3].life = plan.Leaving, plan.Leaving; return s }))
		}, plan.Action{Kind: plan.Rebalance, Nodes: []string{"a1"}}},
		{"a lost replica is replaced", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].pod = plan.PodGone; return s }))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"replica scale-up", func(t *testing.T) plan.Observed { return observed(t, 2, 2, formed2x1()) },
			plan.Action{Kind: plan.CreateNodes, Shards: []int{0, 1}}},
		{"settled", func(t *testing.T) plan.Observed { return observed(t, 2, 1, formed2x1()) }, plan.Action{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			free := plan.Next(tt.obs(t))
			free.Reason = ""
			assert.Equal(t, tt.without, free, "no backup running")

			o := tt.obs(t)
			o.BackupRunning = "nightly"
			held := plan.Next(o)
			if tt.without.Kind != plan.Rebalance {
				held.Reason = ""
				assert.Equal(t, tt.without, held, "a backup holds only slot moves")
				return
			}
			assert.Equal(t, plan.Wait, held.Kind)
			assert.True(t, held.Held, "held, not a warning: nothing is wrong")
			assert.False(t, held.Warning)
			assert.Contains(t, held.Reason, "backup nightly")
			assert.Contains(t, held.Reason, "Rebalance")
		})
	}
}
