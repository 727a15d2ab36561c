package backup

import (
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// member is one server of the cluster as its ValkeyNode records it.
type member struct {
	Name  string
	Shard int
	PodIP string
}

// node is how valkeyops addresses a member.
func (m member) node(port int) model.Node {
	return model.Node{Name: m.Name, Addr: net.JoinHostPort(m.PodIP, strconv.Itoa(port)), Shard: m.Shard}
}

// shardSource is where one shard's snapshot comes from, and which slots it holds.
type shardSource struct {
	Index int
	// Candidates are the members the snapshot may be streamed from, best first: the shard's
	// in-sync replicas, the most caught up first, then its primary. A stream that fails
	// (the source died, lost its primary, reset the connection) is retried from the next.
	Candidates []member
	// FromPrimary: no in-sync replica, so the primary forks for the snapshot.
	FromPrimary bool
	Slots       []model.SlotRange
}

// Source is the member a shard is streamed from first.
func (s shardSource) Source() member { return s.Candidates[0] }

// chooseSources lists, for every shard that owns slots, the members to snapshot in order:
// the in-sync replicas (link up, initial sync done, not loading), the closest to their
// primary's offset first, so the primary does not fork; the primary itself last, and first
// only when no replica qualifies. A shard whose primary cannot be seen, or a slot owned by
// no observed primary, is an error: a backup must hold every slot's data or be no backup.
func chooseSources(members []member, snap *model.Snapshot) ([]shardSource, error) {
	byName := map[string]member{}
	for _, m := range members {
		byName[m.Name] = m
	}
	primaries := map[int]*model.NodeState{}
	for i := range snap.Nodes {
		s := &snap.Nodes[i]
		m, ok := byName[s.Name]
		if !ok || !s.Reachable || s.Role != model.RolePrimary || len(s.Slots) == 0 {
			continue
		}
		if other, dup := primaries[m.Shard]; dup {
			return nil, fmt.Errorf("shard %d has two primaries owning slots (%s and %s): the cluster is changing; try again when it is settled", m.Shard, other.Name, s.Name)
		}
		primaries[m.Shard] = s
	}
	var out []shardSource
	owned := 0
	for shard, p := range primaries {
		var replicas []*model.NodeState
		for i := range snap.Nodes {
			r := &snap.Nodes[i]
			if _, ok := byName[r.Name]; !ok || !r.Reachable || r.Role != model.RoleReplica || r.PrimaryID != p.ID ||
				!r.LinkedToPrimary() || r.SyncInProgress || r.Loading {
				continue
			}
			replicas = append(replicas, r)
		}
		sort.Slice(replicas, func(i, j int) bool {
			if replicas[i].ReplOffset != replicas[j].ReplOffset {
				return replicas[i].ReplOffset > replicas[j].ReplOffset
			}
			return replicas[i].Name < replicas[j].Name
		})
		src := shardSource{Index: shard, FromPrimary: len(replicas) == 0, Slots: p.Slots}
		for _, r := range replicas {
			src.Candidates = append(src.Candidates, byName[r.Name])
		}
		src.Candidates = append(src.Candidates, byName[p.Name])
		owned += model.CountSlots(p.Slots)
		out = append(out, src)
	}
	if owned != model.SlotCount {
		return nil, fmt.Errorf("the reachable primaries own %d of %d slots: every slot's data must be in a backup", owned, model.SlotCount)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, nil
}
