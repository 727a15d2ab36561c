package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The rules of a cluster being formed (Observed.Forming: the cluster is Creating, and Shards
// and Replicas are its targetSpec snapshot). They use the same actions, performed the same
// way, as the Active rules, but fewer of them, for three reasons:
//   - nothing holds data yet, so nothing is handed over, failed over or drained;
//   - a node's spec is fixed when it is created, and a stuck one is not repaired by a spec
//     edit (docs/status.md): a node is replaced only when its server stopped AND its config
//     has changed since (the fix the user made), never rolled;
//   - formation is one idempotent Bootstrap of every node at once, repeated until the
//     servers meet the Active criteria (model.Health), which is faster than growing the
//     cluster shard by shard, and what a restarted operator resumes.

// formingRules are the rules of Next for Observed.Forming, first match wins:
//  1. a node whose server stopped and whose spec hash is no longer the live one: Delete it
//     (a CreateNodes for its shard follows);
//  2. a shard below 1+Replicas nodes: CreateNodes (every missing node at once);
//  3. a node whose pod is not ready: Wait (a warning naming every pod that cannot be scheduled);
//  4. the servers not yet meeting the Active criteria: Join (Bootstrap every node);
//  5. otherwise the cluster is formed: MarkActive every node.
var formingRules = []func(view) (Action, bool){replaceStopped, createMissing, waitPods, form, formed}

func replaceStopped(v view) (Action, bool) {
	if v.Hash == "" {
		return Action{}, false
	}
	for _, n := range v.live {
		if n.Exited && n.Hash != v.Hash {
			return Action{Kind: Delete, Node: n.Name, Reason: fmt.Sprintf(
				"its server stopped and its config has changed since; a new node takes its place in shard %d", n.Shard)}, true
		}
	}
	return Action{}, false
}

// UnschedulablePrefix starts the reason of the Wait of a forming cluster whose pods cannot
// be scheduled.
const UnschedulablePrefix = "pods cannot be scheduled, the cluster stays Creating until they fit: "

// waitPods waits until every node's pod is ready. A pod the scheduler cannot place makes it a
// warning that names every such pod with the scheduler's reason: a wrong placement stamped on
// the nodes at creation keeps the cluster Creating, and the user must see why.
func waitPods(v view) (Action, bool) {
	var starting string
	var unschedulable []string
	for _, n := range v.live {
		if n.Pod == PodReady {
			continue
		}
		if starting == "" {
			starting = n.Name
		}
		if n.Unschedulable != "" {
			unschedulable = append(unschedulable, n.Name+": "+n.Unschedulable)
		}
	}
	switch {
	case len(unschedulable) > 0:
		sort.Strings(unschedulable)
		return Action{Kind: Wait, Warning: true, Reason: UnschedulablePrefix + strings.Join(unschedulable, "; ")}, true
	case starting != "":
		return Action{Kind: Wait, Reason: starting + " is starting"}, true
	}
	return Action{}, false
}

// health is the Active criteria applied to what the servers report of themselves.
func (v view) health() []string {
	snap := &model.Snapshot{}
	for _, n := range v.live {
		if n.State == nil {
			snap.Nodes = append(snap.Nodes, model.NodeState{Node: model.Node{Name: n.Name}})
			continue
		}
		snap.Nodes = append(snap.Nodes, *n.State)
	}
	return model.Health(snap, v.Shards, v.Replicas)
}

func form(v view) (Action, bool) {
	problems := v.health()
	if len(problems) == 0 {
		return Action{}, false
	}
	return Action{Kind: Join, Reason: "forming: " + strings.Join(problems, "; ")}, true
}

func formed(v view) (Action, bool) {
	return Action{Kind: MarkActive, Nodes: names(v.live), Reason: fmt.Sprintf(
		"cluster formed: %d shards, %d replicas per shard", v.Shards, v.Replicas)}, true
}
