package model

// MaxSyncLag is the replication lag (bytes) under which a linked replica counts as in sync.
// CLUSTER FAILOVER itself pauses writes on the primary and waits for the chosen replica to
// catch up completely, so a small lag costs nothing; a replica far behind or not linked is
// never chosen.
const MaxSyncLag = 1 << 20

// BestReplica is the in-sync, electable replica of primaryID with the highest replication
// offset, or nil. Pure: it reads the snapshot only.
func BestReplica(snap *Snapshot, primaryID string) *NodeState {
	p := snap.ByID(primaryID)
	if p == nil {
		return nil
	}
	voters := snap.Primaries()
	var best *NodeState
	for _, r := range snap.ReplicasOf(primaryID) {
		if !r.LinkedToPrimary() || r.SyncInProgress || r.Failing() || !Electable(r, primaryID, voters) {
			continue
		}
		if p.ReplOffset-r.ReplOffset > MaxSyncLag {
			continue
		}
		if best == nil || r.ReplOffset > best.ReplOffset {
			best = r
		}
	}
	return best
}

// Electable reports whether replica r of primaryID can win an election among voters (the
// observed servers; the slot-holding primaries among them vote) now. A replica that joined a
// moment ago cannot until gossip has settled, and CLUSTER FAILOVER to it then fails or, worse,
// half succeeds: it counts a primary's vote only once it has learned that primary's slots,
// and a primary that does not list it yet as primaryID's replica refuses its vote. So: r
// sees every slot assigned and the cluster ok, and every slot-holding primary lists it as a
// replica of primaryID. Pure.
func Electable(r *NodeState, primaryID string, voters []*NodeState) bool {
	if r.SlotsAssigned != SlotCount || !r.ClusterOK() {
		return false
	}
	for _, o := range voters {
		if !o.Reachable || o.Role != RolePrimary || len(o.Slots) == 0 {
			continue
		}
		peer := o.Peer(r.ID)
		if peer == nil || !peer.IsReplica() || peer.PrimaryID != primaryID || !talking(peer) {
			return false
		}
		if back := r.Peer(o.ID); back == nil || !talking(back) {
			return false
		}
	}
	return true
}

// talking reports whether the observer's bus link to peer is up and has carried a PONG:
// an election's request and its vote travel on those links, and a message for a peer whose
// link is not up yet is dropped.
func talking(peer *ClusterNode) bool {
	return peer.Connected() && peer.PongRecv > 0
}
