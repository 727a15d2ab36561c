package plan

import (
	"fmt"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Request is a user's request for a topology action (the cluster's request annotation, set
// by `kubectl valkey failover` or `kubectl valkey rebalance`): exactly one of Failover (the
// ValkeyNode whose primary role goes to a replica) or Rebalance.
type Request struct {
	Failover  string
	Rebalance bool
}

// Answer is what the operator does about a Request: Action when it acts (Kind None when it
// does not), Refused why it will not (the user gets a Warning), or Note why nothing needs
// doing (a balanced cluster).
type Answer struct {
	Action  Action
	Refused string
	Note    string
}

// AnswerRequest decides a request against what was observed. A request is carried out only on a
// converged cluster (Next plans nothing): one topology action at a time, so a requested
// failover never races a heal, a roll or a slot move. It is never queued either: a refused
// request is answered, and the user asks again.
func AnswerRequest(o Observed, r Request) Answer {
	if next := Next(o); next.Kind != None {
		return Answer{Refused: fmt.Sprintf("another topology action runs: %s (%s)", next.Kind, next.Reason)}
	}
	v := index(o)
	if r.Rebalance {
		return v.answerRebalance()
	}
	return v.answerFailover(r.Failover)
}

// answerFailover hands the named primary's slots to an in-sync, electable replica, the same
// graceful CLUSTER FAILOVER a roll uses.
func (v view) answerFailover(name string) Answer {
	var n *Node
	for i := range v.Nodes {
		if v.Nodes[i].Name == name {
			n = &v.Nodes[i]
		}
	}
	switch {
	case n == nil:
		return Answer{Refused: fmt.Sprintf("%s is no ValkeyNode of this cluster", name)}
	case !n.reachable():
		return Answer{Refused: fmt.Sprintf("%s does not answer", name)}
	case !n.primaryWithSlots():
		return Answer{Refused: fmt.Sprintf("%s is not a primary holding slots (it is a %s)", name, n.State.Role)}
	}
	for _, o := range v.reachable {
		if synced(o, n) && v.electable(o, n) {
			return Answer{Action: Action{Kind: Failover, Node: name, Reason: fmt.Sprintf("requested: %s hands its slots to an in-sync replica", name)}}
		}
	}
	return Answer{Refused: fmt.Sprintf("%s has no in-sync replica that can take its slots over", name)}
}

// answerRebalance moves slots when the kept shards' primaries hold uneven shares at all
// (the planner's own rule waits for a 1% difference); a share within one slot of the others
// is as even as 16384 slots split.
func (v view) answerRebalance() Answer {
	lo, hi := model.SlotCount, 0
	for s := 0; s < v.Shards; s++ {
		c := 0
		if p := v.primaryOf(s); p != nil {
			c = model.CountSlots(p.State.Slots)
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	if hi-lo <= 1 {
		return Answer{Note: fmt.Sprintf("the slots are balanced already (%d..%d per primary): nothing to move", lo, hi)}
	}
	return Answer{Action: Action{Kind: Rebalance, Reason: fmt.Sprintf("requested: slots uneven across primaries (%d..%d)", lo, hi)}}
}
