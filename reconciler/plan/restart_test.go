package plan_test

import (
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/stretchr/testify/assert"
)

// TestDurableRestarts: a lost durable node comes back on its volume instead of being
// replaced, in the order that keeps every acknowledged write: a crashed primary's replica
// takes over first; a primary whose pod was deleted, or one nobody replicates, is restarted at
// once and nothing takes over or drops its slots meanwhile; a full restart brings every node
// back rather than forming an empty cluster; members that restarted at new addresses are
// introduced again; a server that cannot start from its volume is replaced after three tries.
func TestDurableRestarts(t *testing.T) {
	tests := []struct {
		name string
		obs  plan.Observed
		want plan.Action
	}{
		{"a replica whose pod was deleted comes back on its volume",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable = plan.PodGone, true
				return s
			})),
			plan.Action{Kind: plan.RestartPods, Nodes: []string{"b0"}}},
		{"without a volume the same replica is replaced",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod = plan.PodGone
				return s
			})),
			plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a crashed primary with a replica: the replica takes over first",
			live(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, durable: true}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master,fail"}),
			plan.Action{Kind: plan.ForceFailover, Node: "b0"}},
		{"once its replica holds the slots, the crashed primary comes back",
			live(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, durable: true}, {name: "b0", shard: 0, slots: "0-5460"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
			}, ghost{id: "id-a0", flags: "master,fail"}),
			plan.Action{Kind: plan.RestartPods, Nodes: []string{"a0"}}},
		{"a deleted primary still owning its slots is restarted at once",
			live(t, 1, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, durable: true}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
			}, ghost{id: "id-a0", slots: "0-16383", flags: "master,fail"}),
			plan.Action{Kind: plan.RestartPods, Nodes: []string{"a0"}}},
		{"while it restarts nobody takes over, even too few primaries to elect",
			live(t, 1, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodStarting, durable: true, failed: 1}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
			}, ghost{id: "id-a0", slots: "0-16383", flags: "master,fail"}),
			plan.Action{Kind: plan.Wait}},
		{"a crashed primary nobody replicates is restarted at once, its slots never dropped",
			live(t, 3, 0, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, durable: true},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "a2", shard: 2, slots: "10923-16383"},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master,fail"}),
			plan.Action{Kind: plan.RestartPods, Nodes: []string{"a0"}}},
		{"every pod gone at once: every node comes back, no data is declared lost",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				for i := range s {
					s[i].pod, s[i].durable = plan.PodGone, true
				}
				return s
			})),
			plan.Action{Kind: plan.RestartPods, Nodes: []string{"a0", "b0", "a1", "b1"}}},
		{"a pod still being deleted is waited for, not restarted under its name",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable = plan.PodLost, true
				return s
			})),
			plan.Action{Kind: plan.Wait}},
		{"a server that failed to start from its volume three times is replaced",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable, s[1].failed = plan.PodGone, true, 3
				return s
			})),
			plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a server that cannot start from the only copy of its shard waits for the user, never replaced",
			live(t, 3, 0, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, durable: true, failed: 3},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "a2", shard: 2, slots: "10923-16383"},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master,fail"}),
			plan.Action{Kind: plan.Wait, Warning: true}},
		{"a restarted replica whose pod cannot be placed for 5 minutes is replaced",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable, s[1].failed, s[1].unsched, s[1].slow = plan.PodStarting, true, 1, "node(s) had volume node affinity conflict", plan.Unplaceable
				return s
			})),
			plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a restarted replica whose pod cannot be placed yet is waited for",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable, s[1].failed, s[1].unsched, s[1].slow = plan.PodStarting, true, 1, "node(s) had volume node affinity conflict", time.Minute
				return s
			})),
			plan.Action{Kind: plan.Wait, Warning: true}},
		{"an unplaceable restarted node holding its shard's only copy waits for the user",
			live(t, 3, 0, []srv{
				{name: "a0", shard: 0, pod: plan.PodStarting, durable: true, failed: 1, unsched: "node(s) had volume node affinity conflict", slow: plan.Unplaceable},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "a2", shard: 2, slots: "10923-16383"},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master,fail"}),
			plan.Action{Kind: plan.Wait, Warning: true}},
		{"a stale node lost while its shard has another copy is replaced, not restarted",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].durable, s[1].hash = plan.PodGone, true, "h0"
				return s
			})),
			plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"members known at old addresses are introduced again",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].movedFrom = "10.0.0.77"
				return s
			})),
			plan.Action{Kind: plan.Reintroduce, Nodes: []string{"a0", "b0", "a1", "b1"}}},
		{"a server loading its data is waited for",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].loading = true
				return s
			})),
			plan.Action{Kind: plan.Wait}},
		{"a server loading its data is not introduced until it is done",
			live(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].loading, s[1].movedFrom = true, "10.0.0.77"
				return s
			})),
			plan.Action{Kind: plan.Wait}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs)
			assert.NotEmpty(t, got.Reason, "every action says why")
			assert.Zero(t, got.DataLost, "no data is declared lost")
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}
