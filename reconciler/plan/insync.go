package plan

import (
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// StayInSyncLag is how far (bytes) a replica already in sync may fall behind its primary
// before it no longer counts as in sync. Entering takes model.MaxSyncLag, the rule a roll
// uses before it retires anything; the wider bound to leave keeps a replica under a burst of
// writes from flapping its pod's readiness (and with it the shard's budget and a status
// write per flap).
const StayInSyncLag = 8 * model.MaxSyncLag

// InSync decides, for each node whose server the pass observed, whether its pod counts as an
// in-sync copy of its shard (its readiness gate, render.InSyncCondition): a primary serving
// slots, or a replica of its shard's slot-holding primary whose link is up, whose initial sync
// is done and whose offset is within MaxSyncLag of the primary's (StayInSyncLag once it was
// in sync). A node the pass could not observe is left out: no news is not evidence, and a
// primary that missed one observation must not become evictable. A node on its way out
// (Leaving, or its pod being deleted) is not in sync: nothing may count on it.
func InSync(o Observed) map[string]bool {
	v := index(o)
	out := map[string]bool{}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		switch {
		case n.dying != nil || n.Lifecycle == Leaving:
			out[n.Name] = false
		case !n.reachable():
			// Not observed this pass: keep what was set.
		case n.primaryWithSlots():
			out[n.Name] = true
		default:
			out[n.Name] = replicaInSync(n, v.primaryOf(n.Shard))
		}
	}
	return out
}

// replicaInSync is the replica half of InSync, with its hysteresis.
func replicaInSync(n, primary *Node) bool {
	if primary == nil || primary == n {
		return false
	}
	s := n.State
	if s.Role != model.RoleReplica || s.PrimaryID != primary.State.ID || !s.LinkedToPrimary() || s.SyncInProgress {
		return false
	}
	limit := int64(model.MaxSyncLag)
	if n.InSync {
		limit = StayInSyncLag
	}
	return primary.State.ReplOffset-s.ReplOffset <= limit
}
