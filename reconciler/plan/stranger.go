package plan

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// A stranger is a peer in some server's view that is no node of this cluster: a server of
// another cluster, met by hand or reached through a pod IP that another cluster's pod took
// over. Two clusters that meet merge: every slot both claim goes to the claim with the higher
// config epoch (equal epochs collide, and the node with the lower ID bumps its own), so one
// side's primaries lose their slots to the other's within a gossip round trip, long before a
// pass can look. With cluster-allow-replica-migration off (render.Args) a primary that lost
// every slot stays an empty primary and keeps its keys; one that lost only some deletes the
// keys of those. Forgetting the stranger on every server separates the clusters again; the
// slots it had taken become nobody's in our servers' views, and adoptOrphans gives them back
// (to the empty primary of their shard, which may still hold their keys).

// stranger is one peer that belongs to no node of this cluster.
type stranger struct {
	id, addr string
	slots    int      // slots it claims in our servers' views
	knownBy  []string // our servers that list it
	follow   []*Node  // ours that replicate it (answering, or whose pod is being deleted)
}

// ours is every Valkey ID this cluster's nodes have or had: the observed ID of each reachable
// server, each node's status.nodeID, and the ID of a server whose pod is being deleted.
func (v view) ours() map[string]bool {
	out := map[string]bool{}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if n.RecordedID != "" {
			out[n.RecordedID] = true
		}
		if n.reachable() {
			out[n.State.ID] = true
		}
		if n.dying != nil && n.dying.ID != "" {
			out[n.dying.ID] = true
		}
	}
	return out
}

// unknownAddrs are the IPs of our servers whose ID the pass does not know (their pod runs
// but the server did not answer, and no ID was recorded yet): a peer there may be one of
// ours, so it is not taken for a stranger.
func (v view) unknownAddrs() map[string]bool {
	out := map[string]bool{}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, st := range []*model.NodeState{n.State, n.dying} {
			if st == nil || (st.Reachable && st.ID != "") || n.RecordedID != "" {
				continue
			}
			if host, _, err := net.SplitHostPort(st.Addr); err == nil {
				out[host] = true
			}
		}
	}
	return out
}

// strangers lists, by ID, the peers of reachable servers that belong to no node of this
// cluster. Handshake entries (not yet identified) and peers flagged failing or without an
// address are left out: a failed ID that owns no slot is forgetDead's (it cannot tell an
// ex-member from a dead stranger, and forgets both quietly), one that owns slots is
// waitFailover's.
func (v view) strangers() []*stranger {
	ours, unknown := v.ours(), v.unknownAddrs()
	byID := map[string]*stranger{}
	for _, o := range v.reachable {
		for i := range o.State.View {
			peer := &o.State.View[i]
			if peer.Myself() || ours[peer.ID] || peer.InHandshake() || peer.Failing() || peer.NoAddr() || unknown[peer.IP] {
				continue
			}
			s := byID[peer.ID]
			if s == nil {
				s = &stranger{id: peer.ID, addr: peer.Addr()}
				byID[peer.ID] = s
			}
			s.knownBy = append(s.knownBy, o.Name)
			s.slots = max(s.slots, model.CountSlots(peer.Slots))
		}
	}
	out := make([]*stranger, 0, len(byID))
	for _, s := range byID {
		for i := range v.Nodes {
			n := &v.Nodes[i]
			for _, st := range []*model.NodeState{n.State, n.dying} {
				if st != nil && st.Reachable && st.Role == model.RoleReplica && st.PrimaryID == s.id {
					s.follow = append(s.follow, n)
				}
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// forgetStrangers forgets every stranger on every server of the cluster but those that
// replicate it (Valkey refuses to forget a node's own primary; a pod being deleted still
// answers), and marks those followers Leaving: they hold the other cluster's data now. Once
// only followers, all Leaving or going, still know a stranger, retireLeaving removes them,
// and the rule has nothing more to do.
func forgetStrangers(v view) (Action, bool) {
	var ids, parts, follow []string
	for _, s := range v.strangers() {
		staying, knowing := 0, 0
		for _, f := range s.follow {
			if f.Lifecycle != Leaving && !f.lost() {
				staying++
			}
			if f.reachable() {
				knowing++
			}
		}
		if len(s.knownBy) == knowing && staying == 0 {
			continue // only followers on their way out know it: retireLeaving removes them
		}
		ids = append(ids, s.id)
		part := fmt.Sprintf("node %s at %s, known to %s", s.id, s.addr, strings.Join(s.knownBy, ", "))
		if s.slots > 0 {
			part += fmt.Sprintf(", claiming %d slot(s)", s.slots)
		}
		if len(s.follow) > 0 {
			part += fmt.Sprintf(", replicated by %s (replaced: it holds the other cluster's data)", strings.Join(names(s.follow), ", "))
			follow = append(follow, names(s.follow)...)
		}
		parts = append(parts, part)
	}
	if len(ids) == 0 {
		return Action{}, false
	}
	reason := fmt.Sprintf("%d server(s) of no ValkeyNode of this cluster (another cluster's, met by hand or through a reused pod IP) forgotten on every server: %s",
		len(ids), strings.Join(parts, "; "))
	a := Action{Kind: ForgetStrangers, IDs: ids, Reason: reason}
	if len(follow) > 0 {
		sort.Strings(follow)
		a.Nodes = slices.Compact(follow)
	}
	return a, true
}
