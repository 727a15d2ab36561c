package plan_test

import (
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/stretchr/testify/assert"
)

// TestDepartingServerWithClientAddresses: a server whose pod is being deleted, its slots
// handed over, is forgotten at once, and a retiring one is forgotten while it runs; with
// client addresses announced (external access) a departing server is forgotten only once it
// has exited (its replacement made meanwhile), and a retiring one is stopped first.
func TestDepartingServerWithClientAddresses(t *testing.T) {
	// a0's pod is being deleted after its slots went to b0: a0 still answers, as b0's replica.
	departing := func(answers bool) []srv {
		return with(formed2x1(), func(s []srv) []srv {
			s[0].pod, s[0].life, s[0].answers, s[0].of, s[0].slots = plan.PodLost, plan.Leaving, answers, "b0", ""
			s[1].of, s[1].slots = "", "0-8191"
			return s
		})
	}
	// b1 retires (a scale-in's replica): Leaving, its pod still running.
	retiring := with(formed2x1(), func(s []srv) []srv { s[3].life = plan.Leaving; return s })
	for _, tc := range []struct {
		name            string
		clientAddresses bool
		servers         []srv
		ghosts          []ghost
		want            plan.Action
	}{
		{"pod addresses only: forgotten while it still answers", false, departing(true), nil,
			plan.Action{Kind: plan.Forget, IDs: []string{"id-a0"}}},
		{"client addresses: kept while it still answers, its replacement made", true, departing(true), nil,
			plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"client addresses: forgotten once it has exited", true, departing(false), []ghost{{id: "id-a0", flags: "slave,fail"}},
			plan.Action{Kind: plan.Forget, IDs: []string{"id-a0"}}},
		{"pod addresses only: a retiring server is forgotten while it runs", false, retiring, nil,
			plan.Action{Kind: plan.Remove}},
		{"client addresses: a retiring server is stopped first", true, retiring, nil,
			plan.Action{Kind: plan.StopServer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := observed(t, 2, 1, tc.servers, tc.ghosts...)
			o.ClientAddresses = tc.clientAddresses
			got := plan.Next(o)
			assert.Equal(t, tc.want.Kind, got.Kind, got.Reason)
			assert.Equal(t, tc.want.IDs, got.IDs, got.Reason)
			assert.Equal(t, tc.want.Shards, got.Shards, got.Reason)
			if tc.want.Kind == plan.Remove || tc.want.Kind == plan.StopServer {
				assert.Equal(t, "b1", got.Node)
			}
		})
	}
}
