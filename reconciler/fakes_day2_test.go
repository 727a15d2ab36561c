//go:build envtest

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gomomento/valkey-operator/valkeyops"
	"github.com/gomomento/valkey-operator/valkeyops/model"
	"k8s.io/apimachinery/pkg/types"
)

// The day-2 servers: one cluster's Valkey processes as state (who runs, who knows whom, who
// follows whom, which node owns each slot, which slots are open), and the Topology and
// Failovers ports as the outcomes valkeyops produces on real servers: Bootstrap joins nodes,
// Rebalance moves slots as model.PlanRebalance plans them, RemoveNode forgets a node, and the
// failovers swap roles. Each port refuses what valkeyops or a real server refuses, with the
// same sentinels (valkeyops/model/errors.go); how the commands get there is valkeyops' own
// business, tested on real Valkey in integration/. Observe renders every server's CLUSTER
// NODES, CLUSTER INFO and INFO replies and parses them with model.ParseNodeState, as
// valkeyops.Observe does, so the planner sees the real shape.
//
// The simplifications are all of time: gossip converges at once among servers that know each
// other, a failure is flagged only when the test says a node timeout passed, replica links
// come up at once, and every operation is one step.

// fakeVersion is what every server reports: 8.x, whose slot moves can be left open.
const fakeVersion = "8.0.2"

// day2Server is one Valkey process.
type day2Server struct {
	node      model.Node
	id        string
	alive     bool
	primaryID string          // "" for a primary
	known     map[string]bool // peer IDs in its node table
	failing   map[string]bool // peer IDs it flags "fail"
	importing map[int]string  // slot -> source ID
	migrating map[int]string  // slot -> target ID
}

func (s *day2Server) primary() bool       { return s.primaryID == "" }
func (s *day2Server) sees(id string) bool { return id != "" && (id == s.id || s.known[id]) }
func (s *day2Server) open() int           { return len(s.importing) + len(s.migrating) }
func (s *day2Server) roleName() model.Role {
	return map[bool]model.Role{true: model.RolePrimary, false: model.RoleReplica}[s.primary()]
}

// day2Servers is every cluster's servers, created empty on first use.
type day2Servers struct {
	mu       sync.Mutex
	clusters map[types.NamespacedName]*day2Cluster
}

func newDay2Servers() *day2Servers {
	return &day2Servers{clusters: map[types.NamespacedName]*day2Cluster{}}
}

func (f *day2Servers) cluster(key types.NamespacedName) *day2Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.clusters[key]
	if c == nil {
		c = &day2Cluster{key: key, byName: map[string]*day2Server{}, byAddr: map[string]*day2Server{}, byID: map[string]*day2Server{}}
		f.clusters[key] = c
	}
	return c
}

// day2Cluster is one cluster's servers. A slot's owner is kept once: a server that knows the
// owner sees the slot owned by it, one that does not sees it unassigned.
type day2Cluster struct {
	mu     sync.Mutex
	key    types.NamespacedName
	byName map[string]*day2Server // the latest process of each ValkeyNode
	byAddr map[string]*day2Server
	byID   map[string]*day2Server
	owner  [model.SlotCount]string
	epoch  uint64
	serial int
	// invariant, when set, is checked after every change; what it reports is kept in broken.
	invariant func() string
	broken    []string
}

// serverErr is an error reply of a real server, as valkeyops surfaces it.
func serverErr(node, step, msg string) error {
	return model.NewOpError(node, step, errors.New("ERR "+msg))
}

func (c *day2Cluster) slotsOf(id string) []int {
	var out []int
	for slot, o := range c.owner {
		if o == id {
			out = append(out, slot)
		}
	}
	return out
}

// ---- the ports: outcomes, and valkeyops' refusals -----------------------------------------

// act observes nodes, runs fn on the snapshot and the servers under the lock, and checks the
// invariant afterwards.
func (c *day2Cluster) act(nodes []model.Node, fn func(*model.Snapshot) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	snap, err := c.snapshot(nodes)
	if err != nil {
		return err
	}
	defer c.check()
	return fn(snap)
}

// named is node name's state, refused (as step) when it is not among the snapshot's nodes or
// does not answer.
func named(snap *model.Snapshot, name, step string) (*model.NodeState, error) {
	st := snap.ByName(name)
	if st == nil {
		return nil, model.NewOpError(name, step, fmt.Errorf("%w: node not in the given set", model.ErrInvalidSpec))
	}
	if !st.Reachable {
		return nil, model.NewOpError(name, step, fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err))
	}
	return st, nil
}

// serving refuses, as ErrNotConverged, a snapshot in which a node does not answer, sees a slot
// unassigned or reports the cluster failing: what valkeyops' waits time out on.
func (c *day2Cluster) serving(nodes []model.Node, step string) error {
	snap, err := c.snapshot(nodes)
	if err != nil {
		return err
	}
	for _, st := range snap.Nodes {
		if !st.Reachable || st.SlotsAssigned != model.SlotCount || !st.ClusterOK() {
			return model.NewOpError("", step, fmt.Errorf("%w: %s reachable=%v, %d slots assigned, cluster_state %q",
				model.ErrNotConverged, st.Name, st.Reachable, st.SlotsAssigned, st.ClusterState))
		}
	}
	return nil
}

// BootstrapSlots refuses a layout: no test of the day-2 fakes restores a backup (e2e does,
// on real servers); without one it is Bootstrap.
func (c *day2Cluster) BootstrapSlots(ctx context.Context, nodes []model.Node, shards int, layout [][]model.SlotRange) error {
	if layout != nil {
		return fmt.Errorf("fake: the day-2 fakes form only even ranges")
	}
	return c.Bootstrap(ctx, nodes, shards)
}

// Bootstrap forms the cluster, or joins new nodes to it: shard i's primary (chosen from the
// live cluster, never by name) gets the unowned part of even range i, every pair of nodes
// meets, and the others follow it. Refused: invalid shards, any node not answering, a shard
// without a node that can be primary, a replica-to-be that owns slots.
func (c *day2Cluster) Bootstrap(_ context.Context, nodes []model.Node, shards int) error {
	if shards <= 0 {
		return model.NewOpError("", "validate", fmt.Errorf("%w: shards must be positive, got %d", model.ErrInvalidSpec, shards))
	}
	groups := make([][]model.Node, shards)
	for _, n := range nodes {
		if n.Shard < 0 || n.Shard >= shards {
			return model.NewOpError(n.Name, "validate", fmt.Errorf("%w: shard %d outside 0..%d", model.ErrInvalidSpec, n.Shard, shards-1))
		}
		groups[n.Shard] = append(groups[n.Shard], n)
	}
	for i, g := range groups {
		if len(g) == 0 {
			return model.NewOpError("", "validate", fmt.Errorf("%w: shard %d has no nodes", model.ErrInvalidSpec, i))
		}
	}
	return c.act(nodes, func(snap *model.Snapshot) error {
		for _, st := range snap.Nodes {
			if !st.Reachable {
				return model.NewOpError(st.Name, "observe", fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err))
			}
		}
		primaries := make([]*day2Server, shards)
		for shard, g := range groups {
			if primaries[shard] = c.choosePrimary(snap, g); primaries[shard] == nil {
				return model.NewOpError(g[0].Name, "choose-primary", fmt.Errorf("%w: shard %d has no node that can be primary", model.ErrUnsafe, shard))
			}
		}
		for shard, g := range groups {
			for _, n := range g {
				if s := c.byAddr[n.Addr]; s != primaries[shard] && s.primaryID != primaries[shard].id && len(c.slotsOf(s.id)) > 0 {
					return model.NewOpError(n.Name, "replicate", fmt.Errorf("%w: node owns slots", model.ErrUnsafe))
				}
			}
		}
		owned := map[int]bool{}
		for _, st := range snap.Nodes {
			for _, slot := range model.ExpandSlots(viewSlots(st)) {
				owned[slot] = true
			}
		}
		for shard, r := range model.EvenRanges(shards) {
			for slot := r.Start; slot <= r.End; slot++ {
				if !owned[slot] {
					c.owner[slot] = primaries[shard].id
				}
			}
		}
		c.meet(c.servers(nodes))
		for shard, g := range groups {
			for _, n := range g {
				if s := c.byAddr[n.Addr]; s != primaries[shard] {
					c.follow(s, primaries[shard])
				}
			}
		}
		return c.serving(nodes, "bootstrap-converge")
	})
}

// viewSlots are the slots of every line of a node's view.
func viewSlots(st model.NodeState) []model.SlotRange {
	var out []model.SlotRange
	for _, cn := range st.View {
		out = append(out, cn.Slots...)
	}
	return out
}

// choosePrimary is valkeyops' rule: the member owning the most slots, else a primary a member
// already follows, else the first member that is a primary.
func (c *day2Cluster) choosePrimary(snap *model.Snapshot, group []model.Node) *day2Server {
	var best *model.NodeState
	for _, n := range group {
		if st := snap.ByName(n.Name); st.Role == model.RolePrimary && len(st.Slots) > 0 &&
			(best == nil || model.CountSlots(st.Slots) > model.CountSlots(best.Slots)) {
			best = st
		}
	}
	for _, n := range group {
		st := snap.ByName(n.Name)
		for _, o := range group {
			if os := snap.ByName(o.Name); best == nil && st.Role == model.RolePrimary && os.Role == model.RoleReplica && os.PrimaryID == st.ID {
				best = st
			}
		}
	}
	for _, n := range group {
		if st := snap.ByName(n.Name); best == nil && st.Role == model.RolePrimary {
			best = st
		}
	}
	if best == nil {
		return nil
	}
	return c.byAddr[best.Addr]
}

// servers are the live servers at the nodes' addresses.
func (c *day2Cluster) servers(nodes []model.Node) []*day2Server {
	var out []*day2Server
	for _, n := range nodes {
		if s := c.byAddr[n.Addr]; s != nil && s.alive {
			out = append(out, s)
		}
	}
	return out
}

// meet makes every pair of ss know each other: gossip merges their tables, failure flags
// included.
func (c *day2Cluster) meet(ss []*day2Server) {
	ids, failed := map[string]bool{}, map[string]bool{}
	for _, s := range ss {
		ids[s.id] = true
		maps.Copy(ids, s.known)
		maps.Copy(failed, s.failing)
	}
	for id := range ids {
		s := c.byID[id]
		if s == nil || !s.alive {
			continue
		}
		for other := range ids {
			if other != id {
				s.known[other] = true
				if failed[other] {
					s.failing[other] = true
				}
			}
		}
	}
}

// follow makes s a replica of p (CLUSTER REPLICATE); its open slots are gone with its role.
func (c *day2Cluster) follow(s, p *day2Server) {
	s.primaryID, s.importing, s.migrating = p.id, map[int]string{}, map[int]string{}
}

// Settle succeeds on every named node that answers; the fake keeps no settings.
func (c *day2Cluster) Settle(_ context.Context, nodes []model.Node) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		var errs []error
		for _, st := range snap.Nodes {
			if !st.Reachable {
				errs = append(errs, model.NewOpError(st.Name, "settle-node-timeout", fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err)))
			}
		}
		return errors.Join(errs...)
	})
}

// Replicate makes node name a replica of its shard's slot-holding primary, meeting the
// cluster first if it does not know that primary. Refused: a node that does not answer, a
// shard without a slot-holding primary, a node that owns slots.
func (c *day2Cluster) Replicate(_ context.Context, nodes []model.Node, name string, shard int) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		r := snap.ByName(name)
		if r == nil || !r.Reachable {
			return model.NewOpError(name, "replicate", model.ErrUnreachable)
		}
		holders := slices.DeleteFunc(snap.Primaries(), func(st *model.NodeState) bool {
			return st.Shard != shard || st.Name == name || len(st.Slots) == 0
		})
		if len(holders) == 0 {
			return model.NewOpError(name, "replicate", fmt.Errorf("%w: shard %d has no slot-holding primary", model.ErrInvalidSpec, shard))
		}
		p := holders[len(holders)-1]
		if r.PrimaryID == p.ID {
			return nil
		}
		if len(r.Slots) > 0 {
			return model.NewOpError(name, "replicate", fmt.Errorf("%w: node owns slots %s", model.ErrUnsafe, model.FormatRanges(r.Slots)))
		}
		if r.Peer(p.ID) == nil {
			c.meet(c.servers(nodes))
		}
		c.follow(c.byAddr[r.Addr], c.byAddr[p.Addr])
		return nil
	})
}

// Rebalance first finishes every slot left open (moved on to the importing side when both
// ends answer, else closed where it is), then moves slots as model.PlanRebalance plans them
// from the live layout: an even share on one primary per shard not leaving. Refused: a node
// that does not answer or reports the cluster failing (valkeyops waits for it, then gives up:
// ErrNotConverged), no primary left to hold slots.
func (c *day2Cluster) Rebalance(_ context.Context, nodes []model.Node, leaving []string) (valkeyops.MoveStats, error) {
	var moved valkeyops.MoveStats
	err := c.act(nodes, func(snap *model.Snapshot) error {
		// valkeyops waits (bounded) for every node to answer and report ok, and then gives up.
		for _, st := range snap.Nodes {
			if !st.Reachable || !st.ClusterOK() {
				return model.NewOpError(st.Name, "rebalance-precheck", fmt.Errorf("%w (last: reachable=%v, cluster_state is %q: moving now is unsafe)",
					model.ErrNotConverged, st.Reachable, st.ClusterState))
			}
		}
		moved.Slots = c.finishOpen(snap)
		snap, _ = c.snapshot(nodes)
		moves, err := planMoves(snap, leaving)
		if err != nil {
			return err
		}
		for _, mv := range moves {
			for _, slot := range model.ExpandSlots(mv.Slots) {
				c.owner[slot] = mv.To
			}
			moved.Slots += model.CountSlots(mv.Slots)
		}
		if len(moves) > 0 {
			c.epoch++
		}
		moved.MigrateSlots = moved.Slots
		return c.serving(nodes, "rebalance-converge")
	})
	return moved, err
}

// finishOpen completes every open slot of the snapshot's primaries and returns how many
// moved. The caller holds c.mu.
func (c *day2Cluster) finishOpen(snap *model.Snapshot) int {
	moved := 0
	for _, p := range snap.Primaries() {
		self := c.byAddr[p.Addr]
		for slot, to := range self.migrating {
			if dst := c.byID[to]; dst != nil && dst.primary() && snap.ByID(to) != nil && c.owner[slot] == self.id {
				c.owner[slot] = to
				moved++
			}
		}
		for slot, from := range self.importing {
			if snap.ByID(from) != nil && c.owner[slot] == from {
				c.owner[slot] = self.id
				moved++
			}
		}
	}
	for _, p := range snap.Primaries() {
		s := c.byAddr[p.Addr]
		s.importing, s.migrating = map[int]string{}, map[int]string{}
	}
	return moved
}

// planMoves is the moves a Rebalance of snap's servers makes: model.PlanRebalance from the
// primaries' slots to rebalanceTargets. Refused: no primary left to hold slots.
func planMoves(snap *model.Snapshot, leaving []string) ([]model.Move, error) {
	owned := map[string][]model.SlotRange{}
	for _, p := range snap.Primaries() {
		if len(p.Slots) > 0 {
			owned[p.ID] = p.Slots
		}
	}
	targets := rebalanceTargets(snap, leaving)
	if len(targets) == 0 {
		return nil, model.NewOpError("", "plan", fmt.Errorf("%w: no primary left to hold slots", model.ErrInvalidSpec))
	}
	moves, err := model.PlanRebalance(owned, targets)
	return moves, model.NewOpError("", "plan", err)
}

// rebalanceTargets is valkeyops' choice of who holds slots after a Rebalance: per shard, the
// primary not leaving that holds slots, else its first primary; then any other slot-holding
// primary not leaving (a second one in a shard is kept, not drained by accident).
func rebalanceTargets(snap *model.Snapshot, leaving []string) []string {
	per := map[int]*model.NodeState{}
	for _, p := range snap.Primaries() {
		if cur, ok := per[p.Shard]; !slices.Contains(leaving, p.Name) && (!ok || len(cur.Slots) == 0 && len(p.Slots) > 0) {
			per[p.Shard] = p
		}
	}
	var out []string
	for _, shard := range slices.Sorted(maps.Keys(per)) {
		out = append(out, per[shard].ID)
	}
	for _, p := range snap.Primaries() {
		if !slices.Contains(leaving, p.Name) && len(p.Slots) > 0 && !slices.Contains(out, p.ID) {
			out = append(out, p.ID)
		}
	}
	return out
}

// RemoveNode makes every other node forget node name. Refused: a name not among nodes, a node
// that does not answer (its role cannot be told), a node that owns slots.
func (c *day2Cluster) RemoveNode(_ context.Context, nodes []model.Node, name string) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		r, err := named(snap, name, "remove-node")
		if err != nil {
			return err
		}
		if len(r.Slots) > 0 {
			return model.NewOpError(name, "remove-node", fmt.Errorf("%w: node owns slots %s", model.ErrUnsafe, model.FormatRanges(r.Slots)))
		}
		return c.forget(snap, []string{r.ID}, name)
	})
}

// Forget makes every reachable node that knows one of ids forget it.
func (c *day2Cluster) Forget(_ context.Context, nodes []model.Node, ids []string) error {
	return c.act(nodes, func(snap *model.Snapshot) error { return c.forget(snap, ids, "") })
}

// forget is CLUSTER FORGET on every reachable node but skip that knows an ID; a server
// refuses to forget itself or its own primary, and one refusal does not stop the others.
func (c *day2Cluster) forget(snap *model.Snapshot, ids []string, skip string) error {
	var errs []error
	for _, st := range snap.Nodes {
		s := c.byAddr[st.Addr]
		if !st.Reachable || st.Name == skip || slices.Contains(ids, s.id) {
			continue
		}
		for _, id := range ids {
			switch {
			case !s.known[id]:
			case id == s.primaryID:
				errs = append(errs, serverErr(st.Name, "forget", "Can't forget my master!"))
			default:
				delete(s.known, id)
				delete(s.failing, id)
			}
		}
	}
	return errors.Join(errs...)
}

// Failover hands a primary's slots to its best in-sync replica (model.BestReplica), which
// real Valkey refuses while the primary is down; nothing for a node already a replica.
// Refused: a node that does not answer, no in-sync replica (ErrNoInSyncReplica).
func (c *day2Cluster) Failover(_ context.Context, nodes []model.Node, primary string) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		p, err := named(snap, primary, "failover")
		if err != nil || p.Role != model.RolePrimary {
			return err
		}
		best := model.BestReplica(snap, p.ID)
		if best == nil {
			return model.NewOpError(primary, "failover", model.ErrNoInSyncReplica)
		}
		return c.gracefulFailover(c.byAddr[best.Addr])
	})
}

// gracefulFailover is CLUSTER FAILOVER on replica r, refused as a real server refuses it.
func (c *day2Cluster) gracefulFailover(r *day2Server) error {
	old := c.byID[r.primaryID]
	switch {
	case r.primary():
		return serverErr(r.node.Name, "failover", "You should send CLUSTER FAILOVER to a replica")
	case old == nil || !old.alive || r.failing[old.id]:
		return serverErr(r.node.Name, "failover", "Master is down or failed, please use CLUSTER FAILOVER FORCE")
	}
	c.promote(r)
	return nil
}

// ForceFailover promotes a replica by an election started at once: it needs the votes of a
// majority of the slot-holding primaries, its own primary's not counted (it is gone); without
// them the replica never turns primary and valkeyops' wait gives up (ErrNotConverged).
func (c *day2Cluster) ForceFailover(_ context.Context, nodes []model.Node, replica string) error {
	return c.promoteNamed(nodes, replica, "force-failover", true)
}

// Takeover promotes a replica without a vote; nothing for a primary.
func (c *day2Cluster) Takeover(_ context.Context, nodes []model.Node, replica string) error {
	return c.promoteNamed(nodes, replica, "takeover", false)
}

// promoteNamed promotes replica (elected by the primaries when vote), nothing for a primary.
func (c *day2Cluster) promoteNamed(nodes []model.Node, replica, step string, vote bool) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		r, err := named(snap, replica, step)
		if err != nil || r.Role == model.RolePrimary {
			return err
		}
		if votes, holders := c.votes(r.PrimaryID, func(*day2Server) bool { return true }); vote && 2*votes <= holders {
			return model.NewOpError("", step+"-wait", fmt.Errorf("%w: %d of %d primaries can vote", model.ErrNotConverged, votes, holders))
		}
		c.promote(c.byAddr[r.Addr])
		return nil
	})
}

// votes counts the live slot-holding primaries other than primaryID that pass ok, and all
// slot-holding primaries.
func (c *day2Cluster) votes(primaryID string, ok func(*day2Server) bool) (votes, holders int) {
	ids := map[string]bool{}
	for _, o := range c.owner {
		if o != "" {
			ids[o] = true
		}
	}
	for id := range ids {
		if s := c.byID[id]; s != nil && s.alive && id != primaryID && ok(s) {
			votes++
		}
	}
	return votes, len(ids)
}

// promote makes replica r its shard's primary: its old primary's slots are its own, the old
// primary's other replicas follow it, and a live old primary turns its replica.
func (c *day2Cluster) promote(r *day2Server) {
	old := c.byID[r.primaryID]
	c.epoch++
	r.primaryID = ""
	for _, slot := range c.slotsOf(old.id) {
		c.owner[slot] = r.id
	}
	for _, s := range c.byID {
		if s != r && (s.primaryID == old.id || s == old && old.alive) {
			c.follow(s, r)
		}
	}
}

// AssignSlots gives the slots no reachable node sees owned to the empty primary name, meeting
// the cluster first when it knows nobody. Refused: a node that does not answer, a replica.
func (c *day2Cluster) AssignSlots(_ context.Context, nodes []model.Node, name string, slots []model.SlotRange) error {
	return c.act(nodes, func(snap *model.Snapshot) error {
		n, err := named(snap, name, "assign-slots")
		if err != nil {
			return err
		}
		if n.Role != model.RolePrimary {
			return model.NewOpError(name, "assign-slots", fmt.Errorf("%w: node is a replica", model.ErrUnsafe))
		}
		if n.KnownNodes <= 1 {
			c.meet(c.servers(nodes))
		}
		s := c.byAddr[n.Addr]
		for _, slot := range model.ExpandSlots(slots) {
			if !slices.ContainsFunc(c.servers(nodes), func(o *day2Server) bool { return o.sees(c.owner[slot]) }) {
				c.owner[slot] = s.id
			}
		}
		c.epoch++
		return c.serving(nodes, "assign-slots-wait")
	})
}
