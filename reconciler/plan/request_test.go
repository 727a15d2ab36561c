package plan_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/stretchr/testify/assert"
)

func TestAnswerRequest(t *testing.T) {
	uneven := func() []srv {
		return []srv{
			{name: "a0", shard: 0, slots: "0-9999"}, {name: "b0", shard: 0, of: "a0"},
			{name: "a1", shard: 1, slots: "10000-16383"}, {name: "b1", shard: 1, of: "a1"},
		}
	}
	tests := []struct {
		name       string
		servers    []srv
		req        plan.Request
		want       plan.Action
		refused    string // a part of the refusal
		note       string // a part of the note
		noReplicas bool
	}{
		{name: "failover of a primary with an in-sync replica", servers: formed2x1(), req: plan.Request{Failover: "a0"},
			want: plan.Action{Kind: plan.Failover, Node: "a0", Reason: "requested: a0 hands its slots to an in-sync replica"}},
		{name: "failover of a replica is refused", servers: formed2x1(), req: plan.Request{Failover: "b0"},
			refused: "b0 is not a primary holding slots (it is a replica)"},
		{name: "failover of an unknown node is refused", servers: formed2x1(), req: plan.Request{Failover: "zz"},
			refused: "zz is no ValkeyNode of this cluster"},
		{name: "failover to a lagging replica is refused", req: plan.Request{Failover: "a0"},
			servers: with(formed2x1(), func(s []srv) []srv { s[1].lag = 1 << 21; return s }),
			refused: "a0 has no in-sync replica"},
		{name: "failover of a primary without replicas is refused", req: plan.Request{Failover: "a0"},
			servers: []srv{{name: "a0", shard: 0, slots: "0-8191"}, {name: "a1", shard: 1, slots: "8192-16383"}}, noReplicas: true,
			refused: "a0 has no in-sync replica"},
		{name: "refused while another action runs", req: plan.Request{Failover: "a0"},
			servers: with(formed2x1(), func(s []srv) []srv { s[3].syncing = true; return s }),
			refused: "another topology action runs: Wait (b1 is loading its initial sync from a1)"},
		{name: "rebalance of a balanced cluster does nothing", servers: formed2x1(), req: plan.Request{Rebalance: true},
			note: "the slots are balanced already (8192..8192 per primary): nothing to move"},
		{name: "rebalance of slots uneven under the planner's 1% moves them", req: plan.Request{Rebalance: true},
			servers: []srv{{name: "a0", shard: 0, slots: "0-8241"}, {name: "b0", shard: 0, of: "a0"}, {name: "a1", shard: 1, slots: "8242-16383"}, {name: "b1", shard: 1, of: "a1"}},
			want:    plan.Action{Kind: plan.Rebalance, Reason: "requested: slots uneven across primaries (8142..8242)"}},
		{name: "a cluster the planner rebalances itself refuses the request meanwhile", servers: uneven(), req: plan.Request{Rebalance: true},
			refused: "another topology action runs: Rebalance"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			replicas := 1
			if tc.noReplicas {
				replicas = 0
			}
			got := plan.AnswerRequest(observed(t, 2, replicas, tc.servers), tc.req)
			assert.Equal(t, tc.want, got.Action)
			if tc.refused == "" {
				assert.Empty(t, got.Refused)
			} else {
				assert.Contains(t, got.Refused, tc.refused)
			}
			if tc.note == "" {
				assert.Empty(t, got.Note)
			} else {
				assert.Contains(t, got.Note, tc.note)
			}
		})
	}
}
