package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomomento/valkey-operator/reconciler/plan"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// srv describes one ValkeyNode and, when its pod is ready, its server.
type srv struct {
	name, of  string // of: the primary's name for a replica ("" = primary)
	ofID      string // the primary's ID when it is no longer any node's (default: of's ID)
	shard     int
	slots     string // "0-8191" (primaries)
	life      string // default Active
	pod       plan.Pod
	alone     bool   // reachable but knows nobody (new, or restarted empty)
	id        string // default "id-"+name
	recorded  string // status.nodeID; default id, "-" for never observed
	linkDown  bool
	syncing   bool // a replica loading its initial sync (its link is down meanwhile)
	importing bool
	unsched   string
	answers   bool          // with pod PodLost: the server still answers while its pod is deleted
	hung      bool          // pod ready, server not answering, flagged fail by its peers
	exited    bool          // the pod's container terminated (pod Failed)
	slow      time.Duration // with pod PodStarting: how long it has not been ready
	hash      string        // spec hash; default "h1"
	lag       int64         // a replica's offset behind its primary
	keys      int64         // keys the server holds
	durable   bool          // it keeps its data on a volume
	failed    int           // restarts on its volume that never answered
	loading   bool          // loading its data from its volume
	movedFrom string        // the IP its peers still know it at (it restarted at a new one)
}

// ipOf is the pod IP of the i-th server of a fixture.
func ipOf(i int) string { return fmt.Sprintf("10.0.1.%d", i+1) }

// ghost is a node ID some servers still know: a dead node.
type ghost struct {
	id, slots, flags string // flags e.g. "master,fail"
}

// observed builds what a pass observes: every reachable, non-alone server sees the others and
// the ghosts, through model.ParseClusterNodes, the parser valkeyops.Observe uses.
func observed(t *testing.T, shards, replicas int, servers []srv, ghosts ...ghost) plan.Observed {
	t.Helper()
	o := plan.Observed{Shards: shards, Replicas: replicas}
	id := func(s srv) string {
		if s.id != "" {
			return s.id
		}
		return "id-" + s.name
	}
	byName := map[string]srv{}
	ips := map[string]string{}
	for i, s := range servers {
		byName[s.name] = s
		ips[s.name] = ipOf(i)
	}
	line := func(s srv, self bool) string {
		flags, primary := "master", "-"
		if s.of != "" {
			flags, primary = "slave", id(byName[s.of])
			if s.ofID != "" {
				primary = s.ofID
			}
		}
		if self {
			flags = "myself," + flags
		}
		if s.hung {
			flags += ",fail"
		}
		slots := s.slots
		if self && s.importing {
			slots += " [5->-id-other]"
		}
		ip := ips[s.name]
		if !self && s.movedFrom != "" {
			ip = s.movedFrom
		}
		return fmt.Sprintf("%s %s:6379@16379 %s %s 0 1 1 connected %s", id(s), ip, flags, primary, slots)
	}
	for _, s := range servers {
		n := plan.Node{Name: s.name, Shard: s.shard, Lifecycle: s.life, Pod: s.pod, Unschedulable: s.unsched, RecordedID: s.recorded, Hash: s.hash, Exited: s.exited, NotReadyFor: s.slow,
			Durable: s.durable, FailedStarts: s.failed}
		if n.Lifecycle == "" {
			n.Lifecycle = plan.Active
		}
		if n.Hash == "" {
			n.Hash = "h1"
		}
		switch n.RecordedID {
		case "":
			n.RecordedID = id(s)
		case "-": // never observed
			n.RecordedID = ""
		}
		if s.hung {
			n.State = &model.NodeState{Node: model.Node{Name: s.name, Shard: s.shard}}
		} else if s.pod == plan.PodReady || s.answers {
			var text []string
			known := 1
			text = append(text, line(s, true))
			if !s.alone {
				for _, other := range servers {
					if other.name != s.name && (other.pod == plan.PodReady || other.answers) && !other.alone {
						text = append(text, line(other, false))
						known++
					}
				}
				for _, g := range ghosts {
					text = append(text, fmt.Sprintf("%s 10.0.0.9:6379@16379 %s - 0 0 1 disconnected %s", g.id, g.flags, g.slots))
					known++
				}
			}
			view, err := model.ParseClusterNodes(strings.Join(text, "\n") + "\n")
			require.NoError(t, err)
			st := &model.NodeState{Node: model.Node{Name: s.name, Shard: s.shard, Addr: ips[s.name] + ":6379"}, Reachable: true, View: view, KnownNodes: known, Loading: s.loading}
			self := st.Self()
			st.ID, st.Slots = self.ID, self.Slots
			for _, peer := range view {
				st.SlotsAssigned += model.CountSlots(peer.Slots)
			}
			st.ClusterState = "fail"
			if st.SlotsAssigned == model.SlotCount {
				st.ClusterState = "ok"
			}
			st.Role, st.PrimaryLink, st.ReplOffset, st.Keys = model.RolePrimary, model.PrimaryLinkUp, 1000, s.keys
			if s.of != "" {
				st.Role, st.PrimaryID, st.ReplOffset = model.RoleReplica, self.PrimaryID, 1000-s.lag
				if s.linkDown || s.syncing {
					st.PrimaryLink = model.PrimaryLinkDown
				}
				st.SyncInProgress = s.syncing
			}
			n.State = st
		}
		o.Nodes = append(o.Nodes, n)
	}
	return o
}

// formed2x1 is a healthy 2-shard cluster with one replica each.
func formed2x1() []srv {
	return []srv{
		{name: "a0", shard: 0, slots: "0-8191"}, {name: "b0", shard: 0, of: "a0"},
		{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
	}
}

func with(base []srv, edit func([]srv) []srv) []srv {
	return edit(append([]srv(nil), base...))
}

func TestNext(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want plan.Action
	}{
		{"converged", func(t *testing.T) plan.Observed { return observed(t, 2, 1, formed2x1()) }, plan.Action{}},
		{"replica pod deleted", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].pod = plan.PodLost; return s }),
				ghost{id: "id-b0", flags: "slave,fail"})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a new node whose server stopped before joining stalls with a warning", func(t *testing.T) plan.Observed {
			return observed(t, 2, 2, append(formed2x1(), srv{name: "c0", shard: 0, life: plan.Joining, pod: plan.PodGone, recorded: "-"}))
		}, plan.Action{Kind: plan.Wait, Warning: true}},
		{"a new node whose server stopped before joining is replaced once its config was edited", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 2, append(formed2x1(), srv{name: "c0", shard: 0, hash: "h1", life: plan.Joining, pod: plan.PodGone, recorded: "-"}))
			o.Hash = "h2"
			return o
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"c0"}}},
		{"lost replica is forgotten", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].pod, s[1].life = plan.PodLost, plan.Leaving
				return append(s, srv{name: "c0", shard: 0, life: plan.Joining, alone: true})
			}), ghost{id: "id-b0", flags: "slave,fail"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-b0"}}},
		{"forgotten node is deleted", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].pod, s[1].life = plan.PodLost, plan.Leaving; return s }))
		}, plan.Action{Kind: plan.Delete, Node: "b0"}},
		{"dead primary: replacement first", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].pod, s[0].life = plan.PodLost, plan.Leaving; return s }),
				ghost{id: "id-a0", flags: "master,fail", slots: "0-8191"})
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"dead primary of two: too few to elect, its replica takes over", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].pod, s[0].life = plan.PodGone, plan.Leaving
				return append(s, srv{name: "c0", shard: 0, life: plan.Joining, alone: true})
			}), ghost{id: "id-a0", flags: "master", slots: "0-8191"})
		}, plan.Action{Kind: plan.Takeover, Node: "b0"}},
		{"crashed primary of two, flagged failing: its replica takes over", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].pod, s[0].life = plan.PodLost, plan.Leaving
				return append(s, srv{name: "c0", shard: 0, life: plan.Joining, alone: true})
			}), ghost{id: "id-a0", flags: "master,fail?", slots: "0-8191"})
		}, plan.Action{Kind: plan.Takeover, Node: "b0"}},
		{"terminating primary of two, still answering: no takeover yet", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].pod, s[0].life = plan.PodLost, plan.Leaving
				return append(s, srv{name: "c0", shard: 0, life: plan.Joining, alone: true})
			}), ghost{id: "id-a0", flags: "master", slots: "0-8191"})
		}, plan.Action{Kind: plan.Wait}},
		{"dead primary of three: wait for Valkey's own failover", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodLost, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", flags: "master,fail", slots: "0-5460"})
		}, plan.Action{Kind: plan.Wait}},
		{"dead primary without a replica: its slots are dropped once it is surely gone", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{
				{name: "a0", shard: 0, pod: plan.PodLost, life: plan.Leaving},
				{name: "a1", shard: 1, slots: "8192-16383"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", flags: "master,fail", slots: "0-8191"})
		}, plan.Action{Kind: plan.DropSlots, IDs: []string{"id-a0"}}},
		{"dead primary without a replica, not surely gone yet: wait", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{
				{name: "a0", shard: 0, pod: plan.PodLost, life: plan.Leaving},
				{name: "a1", shard: 1, slots: "8192-16383"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", flags: "master", slots: "0-8191"})
		}, plan.Action{Kind: plan.Wait}},
		{"dropped slots go to the shard's empty replacement", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{
				{name: "a1", shard: 1, slots: "8192-16383"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			})
		}, plan.Action{Kind: plan.AssignSlots, Node: "c0", Slots: []model.SlotRange{{Start: 0, End: 8191}}}},
		{"slots nobody owns, every shard formed: the primary holding the fewest takes them", func(t *testing.T) plan.Observed {
			return observed(t, 3, 0, []srv{
				{name: "a0", shard: 0, slots: "0-1 10-8000"},
				{name: "a1", shard: 1, slots: "8001-9000"},
				{name: "a2", shard: 2, slots: "9001-16383"},
			})
		}, plan.Action{Kind: plan.AssignSlots, Node: "a1", Slots: []model.SlotRange{{Start: 2, End: 9}}}},
		{"a primary whose pod is being deleted hands over while it still serves", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].pod, s[0].answers = plan.PodLost, true; return s }))
		}, plan.Action{Kind: plan.Failover, Node: "a0"}},
		{"a primary being deleted waits for a replica that other servers do not know as one yet", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[0].pod, s[0].answers = plan.PodLost, true; return s }))
			seesPrimary(t, o, "a1", "id-b0")
			return o
		}, plan.Action{Kind: plan.Wait}},
		{"a primary left without slots but with keys cannot become a replica: it is replaced", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, []srv{
				{name: "a0", shard: 0, keys: 50}, {name: "c0", shard: 0, slots: "0-8191"},
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}}},
		{"an empty primary without slots joins its shard as a replica", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, []srv{
				{name: "a0", shard: 0}, {name: "c0", shard: 0, slots: "0-8191"},
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.Replicate, Node: "a0"}},
		{"a primary being deleted without a linked replica is not handed over", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].pod, s[0].answers, s[1].linkDown = plan.PodLost, true, true
				return s
			}))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}}},
		{"a primary whose pod is terminating is left to Valkey's failover", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodLost, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", flags: "master", slots: "0-5460"}) // still answering its peers
		}, plan.Action{Kind: plan.Wait}},
		{"after failover the dead primary is forgotten", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].pod, s[0].life = plan.PodLost, plan.Leaving
				s[1].of, s[1].slots = "", "0-8191"
				return append(s, srv{name: "c0", shard: 0, life: plan.Joining, alone: true})
			}), ghost{id: "id-a0", flags: "master,fail"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-a0"}}},
		{"replacement joins its shard", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0] = srv{name: "c0", shard: 0, life: plan.Joining, alone: true}
				s[1].of, s[1].slots = "", "0-8191"
				return s
			}))
		}, plan.Action{Kind: plan.Replicate, Node: "c0"}},
		{"attached replacement becomes Active", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0] = srv{name: "c0", shard: 0, life: plan.Joining, of: "b0"}
				s[1].of, s[1].slots = "", "0-8191"
				return s
			}))
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"c0"}}},
		{"a replica loading its initial sync is watched, not attached again", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].syncing = true; return s }))
		}, plan.Action{Kind: plan.Wait}},
		{"a replica loading its sync does not hold up attaching another", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].syncing = true
				s[3] = srv{name: "c1", shard: 1, life: plan.Joining, alone: true}
				return s
			}))
		}, plan.Action{Kind: plan.Replicate, Node: "c1"}},
		{"a primary being deleted hands over while another shard's replica syncs", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].syncing = true
				s[2].pod, s[2].answers = plan.PodLost, true
				return s
			}))
		}, plan.Action{Kind: plan.Failover, Node: "a1"}},
		{"replica whose link is down is re-attached", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].linkDown = true; return s }))
		}, plan.Action{Kind: plan.Replicate, Node: "b0"}},
		{"primary restarted empty in place: its replica takes over first", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].id, s[0].slots, s[0].alone = "id-a0-new", "", true
				s[0].recorded = "id-a0"
				s[1].ofID, s[1].linkDown = "id-a0", true
				return s
			}), ghost{id: "id-a0", flags: "master,fail?", slots: "0-8191"})
		}, plan.Action{Kind: plan.Takeover, Node: "b0"}},
		{"restarted empty in place: old ID forgotten", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].id, s[1].of, s[1].alone = "id-b0-new", "", true
				s[1].recorded = "id-b0"
				return s
			}), ghost{id: "id-b0", flags: "slave,fail"})
		}, plan.Action{Kind: plan.Forget, IDs: []string{"id-b0"}}},
		{"restarted empty in place: rejoins as replica", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv {
				s[1].id, s[1].of, s[1].alone = "id-b0-new", "", true
				return s
			}))
		}, plan.Action{Kind: plan.Replicate, Node: "b0"}},
		{"scale-out creates the new shard's nodes", func(t *testing.T) plan.Observed { return observed(t, 3, 1, formed2x1()) },
			plan.Action{Kind: plan.CreateNodes, Shards: []int{2, 2}}},
		{"scale-out waits for pods", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Wait}},
		{"unschedulable pod warns", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, unsched: "0/6 nodes are available"},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Wait, Warning: true}},
		{"scale-out joins the new shard", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, alone: true},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Join}},
		{"scale-out moves slots to the joined shard", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining},
				srv{name: "b2", shard: 2, life: plan.Joining, of: "a2"}))
		}, plan.Action{Kind: plan.Rebalance}},
		{"scale-out ends with the new nodes Active", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, slots: "0-5460"}, {name: "b0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383", life: plan.Joining}, {name: "b2", shard: 2, of: "a2", life: plan.Joining},
			})
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"a2", "b2"}}},
		{"slots within 1% are balanced", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, []srv{{name: "a0", shard: 0, slots: "0-8250"}, {name: "a1", shard: 1, slots: "8251-16383"}})
		}, plan.Action{}},
		{"scale-in drains the departing shard", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, formed2x1())
		}, plan.Action{Kind: plan.Rebalance, Nodes: []string{"a1"}}},
		{"scale-in marks the drained shard Leaving", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, with(formed2x1(), func(s []srv) []srv { s[0].slots, s[2].slots = "0-16383", ""; return s }))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a1", "b1"}}},
		{"half-finished scale-in removes replicas first", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].slots, s[2].slots = "0-16383", ""
				s[2].life, s[3].life = plan.Leaving, plan.Leaving
				return s
			}))
		}, plan.Action{Kind: plan.Remove, Node: "b1"}},
		{"a primary whose container exited: its best replica is elected at once", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master"})
		}, plan.Action{Kind: plan.ForceFailover, Node: "b0"}},
		{"a primary whose container just exited: the election comes before its node is marked Leaving and replaced", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master"})
		}, plan.Action{Kind: plan.ForceFailover, Node: "b0"}},
		{"a primary whose pod is merely gone (it may still run): Valkey's own failover is waited for", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", slots: "0-5460", flags: "master"})
		}, plan.Action{Kind: plan.Wait}},
		{"a primary whose container exited, too few primaries to vote: takeover", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, []srv{
				{name: "a0", shard: 0, pod: plan.PodGone, exited: true, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0", ofID: "id-a0"},
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			}, ghost{id: "id-a0", slots: "0-8191", flags: "master"})
		}, plan.Action{Kind: plan.Takeover, Node: "b0"}},
		{"a hung replica (pod ready, flagged fail) is replaced", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].hung = true; return s }))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"a hung node not flagged fail yet is waited for", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, formed2x1())
			o.Nodes[1].State = &model.NodeState{Node: model.Node{Name: "b0", Shard: 0}}
			return o
		}, plan.Action{Kind: plan.Wait}},
		{"a leaving hung primary: its replacement is created while Valkey fails it over", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, slots: "0-5460", hung: true, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
			})
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"a leaving hung primary is not removed before a replica holds its slots", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, []srv{
				{name: "a0", shard: 0, slots: "0-5460", hung: true, life: plan.Leaving}, {name: "b0", shard: 0, of: "a0"},
				{name: "a1", shard: 1, slots: "5461-10922"}, {name: "b1", shard: 1, of: "a1"},
				{name: "a2", shard: 2, slots: "10923-16383"}, {name: "b2", shard: 2, of: "a2"},
				{name: "c0", shard: 0, life: plan.Joining, alone: true},
			})
		}, plan.Action{Kind: plan.Wait}},
		{"a leaving primary waits while its replica is not seen leaving yet", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, with(formed2x1(), func(s []srv) []srv {
				s[0].slots, s[2].slots = "0-16383", ""
				s[2].life = plan.Leaving // b1's Leaving is still on its way through the cache
				return s
			}))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b1"}}},
		{"leaving primary still holding slots is drained", func(t *testing.T) plan.Observed {
			return observed(t, 1, 1, with(formed2x1(), func(s []srv) []srv { s[2].life, s[3].life = plan.Leaving, plan.Leaving; return s }))
		}, plan.Action{Kind: plan.Rebalance, Nodes: []string{"a1"}}},
		{"open slots are finished first", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[2].importing = true; return s }))
		}, plan.Action{Kind: plan.Rebalance}},
		{"replica scale-down never takes a primary", func(t *testing.T) plan.Observed {
			return observed(t, 2, 0, formed2x1())
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0", "b1"}}},
		{"replica scale-up", func(t *testing.T) plan.Observed { return observed(t, 2, 2, formed2x1()) },
			plan.Action{Kind: plan.CreateNodes, Shards: []int{0, 1}}},
		{"a new pod not ready for a while is waited for quietly", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, slow: time.Minute},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Wait}},
		{"a new pod not ready for minutes is waited for with a warning", func(t *testing.T) plan.Observed {
			return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, slow: plan.SlowStart},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Wait, Warning: true}},
		{"a shorter SlowStart warns sooner", func(t *testing.T) plan.Observed {
			o := observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, slow: 20 * time.Second},
				srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
			o.SlowStart = 20 * time.Second
			return o
		}, plan.Action{Kind: plan.Wait, Warning: true}},
		{"a scale-out undone while its pods cannot be scheduled retires them", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, append(formed2x1(),
				srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, unsched: "0/6 nodes are available"},
				srv{name: "b2", shard: 2, life: plan.Joining, pod: plan.PodStarting, unsched: "0/6 nodes are available"}))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a2", "b2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			if got.Kind != plan.None {
				assert.NotEmpty(t, got.Reason, "every action says why")
			}
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}

// rollTo is what a pass observes after the spec was edited: the live hash is "h2" while the
// servers were made from "h1" unless they say otherwise.
func rollTo(t *testing.T, shards, replicas int, servers []srv) plan.Observed {
	o := observed(t, shards, replicas, servers)
	o.Hash = "h2"
	return o
}

// seesPrimary makes server observer's view list node id as a primary (it has not yet learned
// that id became a replica).
func seesPrimary(t *testing.T, o plan.Observed, observer, id string) {
	t.Helper()
	for _, n := range o.Nodes {
		if n.Name != observer {
			continue
		}
		peer := n.State.Peer(id)
		require.NotNil(t, peer, "%s knows %s", observer, id)
		peer.Flags, peer.PrimaryID = []string{"master"}, ""
		return
	}
	t.Fatalf("no server %s", observer)
}

// surged2x1 is formed2x1 rolling shard 0 with only its stale primary a0 left, followed by two
// synced replacements c0 and d0.
func surged2x1() []srv {
	return []srv{
		{name: "a0", shard: 0, slots: "0-8191"}, fresh("c0", 0, "a0"), fresh("d0", 0, "a0"),
		{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
	}
}

// fresh is a replacement made from the live spec.
func fresh(name string, shard int, of string) srv {
	return srv{name: name, shard: shard, of: of, hash: "h2"}
}

func TestRoll(t *testing.T) {
	tests := []struct {
		name string
		obs  func(t *testing.T) plan.Observed
		want plan.Action
	}{
		{"an unchanged hash gives no action", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, formed2x1())
			o.Hash = "h1"
			return o
		}, plan.Action{}},
		{"an unresolved live spec rolls nothing", func(t *testing.T) plan.Observed {
			return observed(t, 2, 1, formed2x1()) // Hash ""
		}, plan.Action{}},
		{"the first stale shard surges a replacement first", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, formed2x1())
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"a replacement still starting is waited for", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, hash: "h2", life: plan.Joining, pod: plan.PodStarting}))
		}, plan.Action{Kind: plan.Wait}},
		{"an unschedulable replacement stalls the shard with a warning, nothing retires", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, hash: "h2", life: plan.Joining, pod: plan.PodStarting, unsched: "0/1 nodes are available: insufficient memory"}))
		}, plan.Action{Kind: plan.Wait, Warning: true}},
		{"a replacement that is not yet a replica is attached", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, hash: "h2", life: plan.Joining, alone: true}))
		}, plan.Action{Kind: plan.Replicate, Node: "c0"}},
		{"a joined replacement becomes Active first", func(t *testing.T) plan.Observed {
			c := fresh("c0", 0, "a0")
			c.life = plan.Joining
			return rollTo(t, 2, 1, append(formed2x1(), c))
		}, plan.Action{Kind: plan.MarkActive, Nodes: []string{"c0"}}},
		{"a replacement lagging behind its primary is waited for", func(t *testing.T) plan.Observed {
			c := fresh("c0", 0, "a0")
			c.lag = model.MaxSyncLag + 1
			return rollTo(t, 2, 1, append(formed2x1(), c))
		}, plan.Action{Kind: plan.Wait}},
		{"with a synced replacement the stale replica retires before its primary", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, append(formed2x1(), fresh("c0", 0, "a0")))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0"}}},
		{"the retiring replica is removed before anything else", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, with(append(formed2x1(), fresh("c0", 0, "a0")), func(s []srv) []srv { s[1].life = plan.Leaving; return s }))
		}, plan.Action{Kind: plan.Remove, Node: "b0"}},
		{"only the primary stale: a second replacement surges before the failover", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, []srv{
				{name: "a0", shard: 0, slots: "0-8191"}, fresh("c0", 0, "a0"),
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"a stale primary fails over gracefully to a synced replacement", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, surged2x1())
		}, plan.Action{Kind: plan.Failover, Node: "a0"}},
		{"after the failover the old primary, now a replica, retires", func(t *testing.T) plan.Observed {
			c := fresh("c0", 0, "")
			c.slots = "0-8191"
			return rollTo(t, 2, 1, []srv{
				{name: "a0", shard: 0, of: "c0"}, c, fresh("d0", 0, "c0"),
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}}},
		{"an old primary left without slots but with its keys (REPLICATE refuses it) retires", func(t *testing.T) plan.Observed {
			c := fresh("c0", 0, "")
			c.slots = "0-8191"
			return rollTo(t, 2, 1, []srv{
				{name: "a0", shard: 0}, c, fresh("d0", 0, "c0"),
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"a0"}}},
		{"a stale replica that lost its link is not reattached: it is replaced", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, with(formed2x1(), func(s []srv) []srv { s[1].linkDown = true; return s }))
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{0}}},
		{"a replacement not yet known to every primary as a replica is waited for (its election would fail)", func(t *testing.T) plan.Observed {
			o := rollTo(t, 2, 1, surged2x1())
			seesPrimary(t, o, "a1", "id-d0")
			return o
		}, plan.Action{Kind: plan.Wait}},
		{"a replacement that has not learned every slot's owner yet is waited for", func(t *testing.T) plan.Observed {
			o := rollTo(t, 2, 1, surged2x1())
			d0 := o.Nodes[2].State
			require.Equal(t, "d0", d0.Name)
			d0.SlotsAssigned, d0.ClusterState = 8192, "fail"
			return o
		}, plan.Action{Kind: plan.Wait}},
		{"a rolled shard is done: the next shard starts", func(t *testing.T) plan.Observed {
			c := fresh("c0", 0, "")
			c.slots = "0-8191"
			return rollTo(t, 2, 1, []srv{
				c, fresh("d0", 0, "c0"),
				{name: "a1", shard: 1, slots: "8192-16383"}, {name: "b1", shard: 1, of: "a1"},
			})
		}, plan.Action{Kind: plan.CreateNodes, Shards: []int{1}}},
		{"no replicas: the replacement surges, then takes the slots by failover", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 0, []srv{
				{name: "a0", shard: 0, slots: "0-8191"}, fresh("c0", 0, "a0"),
				{name: "a1", shard: 1, slots: "8192-16383"},
			})
		}, plan.Action{Kind: plan.Failover, Node: "a0"}},
		{"a stale replacement still joining is retired, not waited for (the edit was undone)", func(t *testing.T) plan.Observed {
			o := observed(t, 2, 1, append(formed2x1(), srv{name: "c0", shard: 0, hash: "h2", life: plan.Joining, pod: plan.PodStarting, unsched: "no room"}))
			o.Hash = "h1"
			return o
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"c0"}}},
		{"a replica scale-down during a roll retires stale nodes first", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 0, append(formed2x1(), fresh("c0", 0, "a0")))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b0", "b1"}}},
		{"a lost node is healed before the roll goes on", func(t *testing.T) plan.Observed {
			return rollTo(t, 2, 1, with(append(formed2x1(), fresh("c0", 0, "a0")), func(s []srv) []srv { s[3].pod = plan.PodGone; return s }))
		}, plan.Action{Kind: plan.MarkLeaving, Nodes: []string{"b1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan.Next(tt.obs(t))
			if got.Kind != plan.None {
				assert.NotEmpty(t, got.Reason, "every action says why")
			}
			got.Reason = ""
			assert.Equal(t, tt.want, got)
		})
	}
}

// The slow-start warning names the pod and the configured wait, which the operator's
// --slow-start sets; without one it is SlowStart.
func TestSlowStartMessage(t *testing.T) {
	starting := func(slow time.Duration) plan.Observed {
		return observed(t, 3, 1, append(formed2x1(), srv{name: "a2", shard: 2, life: plan.Joining, pod: plan.PodStarting, slow: slow},
			srv{name: "b2", shard: 2, life: plan.Joining, alone: true}))
	}
	assert.Equal(t, "pod a2 has not become ready in 3m0s; see `kubectl describe pod a2`", plan.Next(starting(plan.SlowStart)).Reason)
	o := starting(20 * time.Second)
	o.SlowStart = 20 * time.Second
	assert.Equal(t, "pod a2 has not become ready in 20s; see `kubectl describe pod a2`", plan.Next(o).Reason)
	o = starting(19 * time.Second)
	o.SlowStart = 20 * time.Second
	assert.False(t, plan.Next(o).Warning, "not yet")
}
