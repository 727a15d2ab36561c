package plan_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The planner's decisions at the turning points of the reconciler's Active-phase scenarios
// (reconciler's TestActivePhase runs them end to end on the day-2 fakes): each server's
// replies are parsed by model.ParseNodeState, as valkeyops.Observe parses real ones.

// member is one ValkeyNode of a scenario and, when its pod is ready, its server.
type member struct {
	name, of string // of: the primary's name, for a replica
	shard    int
	slots    string // "0-8191"
	life     string // default Active
	pod      plan.Pod
	hash     string // default "h1"
	opens    string // the slot this primary migrates, as "[5->-id-x]" (or imports, "[5-<-id-x]")
}

// scene is what a pass observes of members: every ready server knows every member (one whose
// pod is gone as a disconnected peer) and reports the cluster ok when it sees every slot.
func scene(t *testing.T, shards, replicas int, hash string, members ...member) plan.Observed {
	t.Helper()
	o := plan.Observed{Shards: shards, Replicas: replicas, Hash: hash}
	ips := map[string]string{}
	for i, m := range members {
		ips[m.name] = ipOf(i)
	}
	line := func(m member, self bool) string {
		flags, primary, link := "master", "-", "connected"
		if m.of != "" {
			flags, primary = "slave", "id-"+m.of
		}
		if self {
			flags = "myself," + flags
		} else if m.pod != plan.PodReady {
			link = "disconnected"
		}
		text := fmt.Sprintf("id-%s %s:6379@16379 %s %s 0 1700000000000 1 %s %s", m.name, ips[m.name], flags, primary, link, m.slots)
		if self {
			text += " " + m.opens
		}
		return text
	}
	for _, m := range members {
		n := plan.Node{Name: m.name, Shard: m.shard, Lifecycle: m.life, Pod: m.pod, Hash: m.hash, RecordedID: "id-" + m.name}
		if n.Lifecycle == "" {
			n.Lifecycle = plan.Active
		}
		if n.Hash == "" {
			n.Hash = "h1"
		}
		if m.pod == plan.PodReady {
			lines, assigned := []string{line(m, true)}, 0
			for _, other := range members {
				if other.name != m.name {
					lines = append(lines, line(other, false))
				}
			}
			for _, other := range members {
				assigned += model.CountSlots(mustRanges(t, other.slots))
			}
			state := map[bool]string{true: "ok", false: "fail"}[assigned == model.SlotCount]
			info := fmt.Sprintf("cluster_state:%s\ncluster_slots_assigned:%d\ncluster_known_nodes:%d\n", state, assigned, len(members))
			repl := "role:master\nmaster_repl_offset:1000\n"
			if m.of != "" {
				repl = "role:slave\nmaster_link_status:up\nmaster_repl_offset:1000\n"
			}
			st, err := model.ParseNodeState(model.Node{Name: m.name, Shard: m.shard, Addr: ips[m.name] + ":6379"}, strings.Join(lines, "\n")+"\n", info, repl)
			require.NoError(t, err)
			n.State = &st
		}
		o.Nodes = append(o.Nodes, n)
	}
	return o
}

func mustRanges(t *testing.T, slots string) []model.SlotRange {
	t.Helper()
	var out []model.SlotRange
	for _, f := range strings.Fields(slots) {
		var r model.SlotRange
		if _, err := fmt.Sscanf(f, "%d-%d", &r.Start, &r.End); err != nil {
			_, err = fmt.Sscanf(f, "%d", &r.Start)
			require.NoError(t, err)
			r.End = r.Start
		}
		out = append(out, r)
	}
	return out
}

// formed3 is a healthy 3-shard cluster with one replica each.
func formed3() []member {
	return []member{
		{name: "a0", shard: 0, slots: "0-5460"}, {name: "b0", shard: 0, of: "a0"},
		{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
		{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
	}
}

func TestActivePhaseScenarios(t *testing.T) {
	tests := []struct {
		name  string
		seen  func(t *testing.T) plan.Observed
		kind  plan.Kind
		node  string   // Action.Node, when the scenario names one
		nodes []string // Action.Nodes, in any order
	}{
		{name: "shards 3->2: the departing primary is drained first", kind: plan.Rebalance, nodes: []string{"a2"},
			seen: func(t *testing.T) plan.Observed { return scene(t, 2, 1, "h1", formed3()...) }},
		{name: "shards 3->2: the drained shard's nodes are marked Leaving", kind: plan.MarkLeaving, nodes: []string{"a2", "b2"},
			seen: func(t *testing.T) plan.Observed {
				m := formed3()
				m[0].slots, m[2].slots, m[4].slots = "0-8191", "8192-16383", ""
				return scene(t, 2, 1, "h1", m...)
			}},
		{name: "shards 3->2: the replica leaves before the primary it follows", kind: plan.Remove, node: "b2",
			seen: func(t *testing.T) plan.Observed {
				m := formed3()
				m[0].slots, m[2].slots, m[4].slots = "0-8191", "8192-16383", ""
				m[4].life, m[5].life = plan.Leaving, plan.Leaving
				return scene(t, 2, 1, "h1", m...)
			}},
		{name: "resume: slots left migrating are finished before anything else", kind: plan.Rebalance,
			seen: func(t *testing.T) plan.Observed {
				m := formed3()[:4]
				m[0].slots, m[0].opens = "0-8191", "[0->-id-a2]"
				m[2].slots = "8192-16383"
				m = append(m, member{name: "a2", shard: 2, life: plan.Joining, opens: "[0-<-id-a0]"},
					member{name: "b2", shard: 2, of: "a2", life: plan.Joining})
				return scene(t, 3, 1, "h1", m...)
			}},
		{name: "replicas 2->1: a replica leaves, never the primary first by name", kind: plan.MarkLeaving, nodes: []string{"b0", "b1"},
			seen: func(t *testing.T) plan.Observed {
				return scene(t, 2, 1, "h1",
					member{name: "a0", shard: 0, slots: "0-8191"}, member{name: "b0", shard: 0, of: "a0"}, member{name: "c0", shard: 0, of: "a0"},
					member{name: "a1", shard: 1, slots: "8192-16383"}, member{name: "b1", shard: 1, of: "a1"}, member{name: "c1", shard: 1, of: "a1"})
			}},
		{name: "lost primary pod, a majority survives: wait for Valkey's own failover", kind: plan.Wait,
			seen: func(t *testing.T) plan.Observed {
				m := formed3()
				m[0].pod, m[0].life = plan.PodGone, plan.Leaving
				return scene(t, 3, 1, "h1", append(m, member{name: "c0", shard: 0, life: plan.Joining})...)
			}},
		{name: "resume a roll: the failed-over stale primary is retired next", kind: plan.MarkLeaving, nodes: []string{"a0"},
			seen: func(t *testing.T) plan.Observed {
				return scene(t, 2, 1, "h2",
					member{name: "a0", shard: 0, of: "d0"}, member{name: "c0", shard: 0, of: "d0", hash: "h2"},
					member{name: "d0", shard: 0, slots: "0-8191", hash: "h2"},
					member{name: "a1", shard: 1, slots: "8192-16383"}, member{name: "b1", shard: 1, of: "a1"})
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := plan.Next(tc.seen(t))
			assert.Equal(t, tc.kind, a.Kind, "%+v", a)
			assert.Equal(t, tc.node, a.Node, "%+v", a)
			assert.ElementsMatch(t, tc.nodes, a.Nodes, "%+v", a)
		})
	}
}
