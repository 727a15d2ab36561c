package model

import (
	"fmt"
	"sort"
)

// Health applies the Active criteria of docs/status.md to a snapshot: every node's view is
// healthy, all 16384 slots are assigned, the number of slot-holding primaries is at least
// shards, and every slot-holding primary has at least replicasPerShard linked replicas. It is
// pure; an empty result means healthy, otherwise each entry is one unmet reason.
func Health(s *Snapshot, shards, replicasPerShard int) []string {
	var reasons []string
	if s == nil || len(s.Nodes) == 0 {
		return []string{"no nodes observed"}
	}
	ids := map[string]string{} // id -> name
	for _, n := range s.Nodes {
		if n.Reachable && n.ID != "" {
			ids[n.ID] = n.Name
		}
	}
	for _, n := range s.Nodes {
		if !n.Reachable {
			reasons = append(reasons, fmt.Sprintf("node %s unreachable", n.Name))
			continue
		}
		if !n.ClusterOK() {
			reasons = append(reasons, fmt.Sprintf("node %s reports cluster_state %q", n.Name, n.ClusterState))
		}
		if n.SlotsAssigned != SlotCount {
			reasons = append(reasons, fmt.Sprintf("node %s sees %d of %d slots assigned", n.Name, n.SlotsAssigned, SlotCount))
		}
		for _, peer := range n.View {
			for _, bad := range peer.UnhealthyFlags() {
				reasons = append(reasons, fmt.Sprintf("node %s flags %s as %s", n.Name, peer.ID, bad))
			}
			if !peer.Myself() && !peer.Connected() {
				reasons = append(reasons, fmt.Sprintf("node %s has no link to %s", n.Name, peer.ID))
			}
		}
		for id, name := range ids {
			if id != n.ID && n.Peer(id) == nil {
				reasons = append(reasons, fmt.Sprintf("node %s does not know %s", n.Name, name))
			}
		}
		if self := n.Self(); self != nil && (len(self.Importing) > 0 || len(self.Migrating) > 0) {
			reasons = append(reasons, fmt.Sprintf("node %s has open slots (importing %d, migrating %d)", n.Name, len(self.Importing), len(self.Migrating)))
		}
		if n.Role == RoleReplica && !n.LinkedToPrimary() {
			reasons = append(reasons, fmt.Sprintf("replica %s link to primary is %q", n.Name, n.PrimaryLink))
		}
	}
	owned := make([]int, SlotCount)
	holders := 0
	for _, p := range s.Primaries() {
		if len(p.Slots) == 0 {
			continue
		}
		holders++
		for _, r := range p.Slots {
			for sl := r.Start; sl <= r.End; sl++ {
				owned[sl]++
			}
		}
		linked := 0
		for _, r := range s.ReplicasOf(p.ID) {
			if r.LinkedToPrimary() {
				linked++
			}
		}
		if linked < replicasPerShard {
			reasons = append(reasons, fmt.Sprintf("primary %s has %d of %d linked replicas", p.Name, linked, replicasPerShard))
		}
	}
	var missing, doubled []int
	for sl, c := range owned {
		if c == 0 {
			missing = append(missing, sl)
		} else if c > 1 {
			doubled = append(doubled, sl)
		}
	}
	if len(missing) > 0 {
		reasons = append(reasons, fmt.Sprintf("%d slots not owned by an observed primary (%s)", len(missing), truncRanges(CompactSlots(missing))))
	}
	if len(doubled) > 0 {
		reasons = append(reasons, fmt.Sprintf("%d slots claimed by several primaries (%s)", len(doubled), truncRanges(CompactSlots(doubled))))
	}
	if holders < shards {
		reasons = append(reasons, fmt.Sprintf("%d slot-holding primaries, want %d", holders, shards))
	}
	sort.Strings(reasons)
	return reasons
}

func truncRanges(rs []SlotRange) string {
	if len(rs) > 5 {
		return FormatRanges(rs[:5]) + " ..."
	}
	return FormatRanges(rs)
}
