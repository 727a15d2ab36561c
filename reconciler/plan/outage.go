package plan

import (
	"fmt"
	"slices"
)

// A total outage: every pod of the cluster gone at once. Without persistence every copy of
// every slot went with them, and no live server remembers the old node IDs (nothing to
// forget). The lost nodes are marked Leaving in one action that says the data is gone
// (DataLost: the reconciler's Warning Event stamps the time), retireLeaving deletes their
// ValkeyNodes, createMissing makes every replacement, and once they are all ready
// adoptOrphans, finding no slot owned or known anywhere, forms the empty topology in one
// Join: shard i gets even range i, so nothing is rebalanced afterwards.

// loseAll marks every lost live node Leaving, flagged DataLost, when they take the last copy
// of the data with them. It comes before retireLeaving, so lost nodes already Leaving (a
// deletion seen over two passes) are still there to be counted.
func loseAll(v view) (Action, bool) {
	var lost []*Node
	for _, n := range v.live {
		if n.lost() && !v.restartable(n) {
			lost = append(lost, n)
		}
	}
	gone := v.everyCopyLost(lost)
	if gone == 0 {
		return Action{}, false
	}
	return Action{Kind: MarkLeaving, Nodes: names(lost), DataLost: gone,
		Reason: fmt.Sprintf("pods of %v lost, and with them the last copy of every slot (all %d nodes gone); the cluster is formed again, empty", names(lost), gone)}, true
}

// everyCopyLost reports how many nodes went with the cluster's data when lost takes its last
// copy, 0 when some copy may be left: lost holds a member (an Active node), no server left
// holds a slot, knows an owner of one or holds a key, and no node whose pod still runs may
// hold data unseen (its server did not answer this pass). The count is of every lost node
// that was ever observed, this pass's and those already Leaving.
func (v view) everyCopyLost(lost []*Node) int {
	if !slices.ContainsFunc(lost, func(n *Node) bool { return n.Lifecycle == Active }) ||
		len(v.owners) > 0 || slices.Contains(v.covered, true) {
		return 0
	}
	gone := 0
	for i := range v.Nodes {
		n := &v.Nodes[i]
		switch {
		case n.lost() && v.restartable(n):
			return 0 // it comes back on its volume, with its data
		case n.lost():
			if n.RecordedID != "" {
				gone++
			}
		case n.reachable():
			if n.State.Keys > 0 {
				return 0
			}
		case n.RecordedID != "":
			return 0 // its pod runs, its server did not answer: it may still hold data
		}
	}
	return gone
}
