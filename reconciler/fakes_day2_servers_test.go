//go:build envtest

package reconciler_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gomomento/valkey-operator/reconciler/render"
	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The day-2 servers (fakes_day2_test.go) as they answer the operator's reads, as a test
// drives them (a pod starts or stops a server, a node timeout passes, Valkey fails a shard
// over by itself) and as a test inspects them.

// ---- what the servers answer ------------------------------------------------------------

// clusterNodes is s's CLUSTER NODES reply.
func (c *day2Cluster) clusterNodes(s *day2Server) string {
	ids := append([]string{s.id}, slices.Sorted(maps.Keys(s.known))...)
	var b strings.Builder
	for _, id := range ids {
		p := c.byID[id]
		flags, primary := "master", "-"
		if !p.primary() {
			flags, primary = "slave", p.primaryID
		}
		if p == s {
			flags = "myself," + flags
		} else if s.failing[id] {
			flags += ",fail"
		}
		link := model.BusConnected
		if p != s && !p.alive {
			link = model.BusDisconnected
		}
		host, port, _ := strings.Cut(p.node.Addr, ":")
		bus, _ := strconv.Atoi(port)
		fmt.Fprintf(&b, "%s %s:%s@%d %s %s 0 1700000000000 %d %s", id, host, port, bus+10000, flags, primary, c.epoch, link)
		for _, r := range model.CompactSlots(c.slotsOf(id)) {
			b.WriteString(" " + r.String())
		}
		if p == s {
			for _, slot := range slices.Sorted(maps.Keys(s.migrating)) {
				fmt.Fprintf(&b, " [%d->-%s]", slot, s.migrating[slot])
			}
			for _, slot := range slices.Sorted(maps.Keys(s.importing)) {
				fmt.Fprintf(&b, " [%d-<-%s]", slot, s.importing[slot])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// clusterInfo is s's CLUSTER INFO reply: ok when every slot is owned by a node it knows and
// does not flag failed.
func (c *day2Cluster) clusterInfo(s *day2Server) string {
	state, assigned := "ok", 0
	for _, o := range c.owner {
		if s.sees(o) {
			assigned++
		}
		if !s.sees(o) || s.failing[o] {
			state = "fail"
		}
	}
	return fmt.Sprintf("cluster_state:%s\ncluster_slots_assigned:%d\ncluster_known_nodes:%d\ncluster_current_epoch:%d\n",
		state, assigned, 1+len(s.known), c.epoch)
}

// info is s's INFO replication server keyspace reply. A replica's link is up while its
// primary runs.
func (c *day2Cluster) info(s *day2Server) string {
	var b strings.Builder
	b.WriteString("# Replication\n")
	if s.primary() {
		b.WriteString("role:master\n")
	} else {
		link := "down"
		if p := c.byID[s.primaryID]; p != nil && p.alive {
			link = "up"
		}
		fmt.Fprintf(&b, "role:slave\nmaster_link_status:%s\nmaster_sync_in_progress:0\n", link)
	}
	fmt.Fprintf(&b, "master_repl_offset:1000\n# Server\nvalkey_version:%s\n", fakeVersion)
	return b.String()
}

// snapshot observes nodes as valkeyops.Observe does: same order, unreachable ones kept, a
// duplicate name refused. The caller holds c.mu.
func (c *day2Cluster) snapshot(nodes []model.Node) (*model.Snapshot, error) {
	seen := map[string]bool{}
	snap := &model.Snapshot{}
	for _, n := range nodes {
		if seen[n.Name] {
			return nil, model.NewOpError(n.Name, "observe", fmt.Errorf("%w: duplicate node name", model.ErrInvalidSpec))
		}
		seen[n.Name] = true
		s := c.byAddr[n.Addr]
		if s == nil || !s.alive {
			snap.Nodes = append(snap.Nodes, model.NodeState{Node: n,
				Err: model.NewOpError(n.Name, "observe", fmt.Errorf("%w: dial tcp %s: connection refused", model.ErrUnreachable, n.Addr))})
			continue
		}
		st, err := model.ParseNodeState(n, c.clusterNodes(s), c.clusterInfo(s), c.info(s))
		if err != nil {
			return nil, err
		}
		snap.Nodes = append(snap.Nodes, st)
	}
	return snap, nil
}

// Observe is the Reads port's snapshot.
func (c *day2Cluster) Observe(_ context.Context, nodes []model.Node) (*model.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshot(nodes)
}

// ---- what the test makes happen to the servers -------------------------------------------

// start runs a fresh, empty server for ValkeyNode name at ip (its pod started).
func (c *day2Cluster) start(name, ip string, shard int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.serial++
	sum := sha1.Sum(fmt.Appendf(nil, "%s/%s/%d", c.key, name, c.serial))
	s := &day2Server{node: model.Node{Name: name, Addr: ip + ":" + strconv.Itoa(render.ClientPort), Shard: shard},
		id: hex.EncodeToString(sum[:]), alive: true, known: map[string]bool{}, failing: map[string]bool{},
		importing: map[int]string{}, migrating: map[int]string{}}
	c.byAddr[s.node.Addr], c.byName[name], c.byID[s.id] = s, s, s
}

// stop ends the server of ValkeyNode name (its pod is gone): it answers nothing; its peers
// see their link to it down, and flag it failed only after a node timeout.
func (c *day2Cluster) stop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.byName[name]; s != nil {
		s.alive = false
	}
	c.check()
}

// nodeTimeout is a node timeout passing after name stopped: every live server that knows it
// flags it failed.
func (c *day2Cluster) nodeTimeout(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.byName[name]
	if d == nil || d.alive {
		return fmt.Errorf("fake: %s is not a stopped process", name)
	}
	for _, s := range c.byID {
		if s.alive && s.known[d.id] {
			s.failing[d.id] = true
		}
	}
	return nil
}

// valkeyFailover is Valkey's own failover of the failed primary name: a majority of the
// slot-holding primaries flag it failed and elect its live replica. It returns the replica.
func (c *day2Cluster) valkeyFailover(name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.check()
	d := c.byName[name]
	if d == nil || d.alive || !d.primary() || len(c.slotsOf(d.id)) == 0 {
		return "", fmt.Errorf("fake: %s is not a stopped slot-holding primary", name)
	}
	if votes, holders := c.votes(d.id, func(s *day2Server) bool { return s.failing[d.id] }); 2*votes <= holders {
		return "", fmt.Errorf("fake: %d of %d primaries flag %s failed: no majority to elect a replica", votes, holders, name)
	}
	var heirs []*day2Server
	for _, s := range c.byID {
		if s.alive && s.primaryID == d.id {
			heirs = append(heirs, s)
		}
	}
	if len(heirs) == 0 {
		return "", fmt.Errorf("fake: %s has no live replica to promote", name)
	}
	sort.Slice(heirs, func(i, j int) bool { return heirs[i].node.Name < heirs[j].node.Name })
	c.promote(heirs[0])
	return heirs[0].node.Name, nil
}

// manualFailover is someone running CLUSTER FAILOVER on replica name.
func (c *day2Cluster) manualFailover(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.check()
	r := c.byName[name]
	if r == nil {
		return fmt.Errorf("fake: no process %s", name)
	}
	return c.gracefulFailover(r)
}

// openFirstMove leaves open, as a move cut short right after SETSLOT IMPORTING/MIGRATING
// does, up to n slots of the first move a Rebalance of nodes would make. It returns how many.
func (c *day2Cluster) openFirstMove(nodes []model.Node, leaving []string, n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	snap, err := c.snapshot(nodes)
	if err != nil {
		return 0
	}
	moves, err := planMoves(snap, leaving)
	if err != nil || len(moves) == 0 {
		return 0
	}
	slots := model.ExpandSlots(moves[0].Slots)
	slots = slots[:min(n, len(slots))]
	src, dst := c.byID[moves[0].From], c.byID[moves[0].To]
	for _, slot := range slots {
		src.migrating[slot], dst.importing[slot] = dst.id, src.id
	}
	return len(slots)
}

// watchSynced checks, from now on, after every change, that each of shards 0..shards-1 holds
// at least least synced members: a live slot-holding primary and its live replicas.
func (c *day2Cluster) watchSynced(shards, least int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.invariant = func() string {
		got := map[int]int{}
		for _, p := range c.byID {
			if p.alive && p.primary() && len(c.slotsOf(p.id)) > 0 {
				for _, s := range c.byID {
					if s.alive && (s == p || s.primaryID == p.id) {
						got[p.node.Shard]++
					}
				}
			}
		}
		var short []string
		for s := 0; s < shards; s++ {
			if got[s] < least {
				short = append(short, fmt.Sprintf("shard %d has %d synced member(s)", s, got[s]))
			}
		}
		return strings.Join(short, "; ")
	}
	c.check()
}

// check records what the invariant reports of the servers now. The caller holds c.mu.
func (c *day2Cluster) check() {
	if c.invariant != nil {
		if why := c.invariant(); why != "" {
			c.broken = append(c.broken, why)
		}
	}
}

// ---- inspection -----------------------------------------------------------------------------

// day2State is one server as a test checks it.
type day2State struct {
	Name, ID, Role, Primary string // Primary: the name of the server it follows
	Alive, Linked           bool   // Linked: a replica whose primary runs
	Slots, Open             int    // slots owned; slots open (importing or migrating)
	Known                   []string
}

// inspect is the latest server of ValkeyNode name.
func (c *day2Cluster) inspect(name string) (day2State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byName[name]
	if s == nil {
		return day2State{}, false
	}
	st := day2State{Name: name, ID: s.id, Role: string(s.roleName()), Alive: s.alive, Slots: len(c.slotsOf(s.id)), Open: s.open()}
	if p := c.byID[s.primaryID]; p != nil {
		st.Primary, st.Linked = p.node.Name, p.alive
	}
	for id := range s.known {
		st.Known = append(st.Known, c.byID[id].node.Name)
	}
	sort.Strings(st.Known)
	return st, true
}

// roleOf is the role of ValkeyNode name's server, "" when there is none.
func (c *day2Cluster) roleOf(name string) string {
	st, _ := c.inspect(name)
	return st.Role
}

// knownBy lists the live servers whose table still has node ID id.
func (c *day2Cluster) knownBy(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.byID {
		if s.alive && s.known[id] {
			out = append(out, s.node.Name)
		}
	}
	sort.Strings(out)
	return out
}

// inCluster lists the live servers that know another node or are known by a live one: the
// cluster as its servers see it.
func (c *day2Cluster) inCluster() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.byID {
		in := len(s.known) > 0
		for _, o := range c.byID {
			in = in || o.alive && o.known[s.id]
		}
		if s.alive && in {
			out = append(out, s.node.Name)
		}
	}
	sort.Strings(out)
	return out
}

// health judges the servers of the given ValkeyNodes with model.Health, the Active criteria
// of docs/status.md, and adds the balance Rebalance promises: slot-holding primaries within 1%.
func (c *day2Cluster) health(names []string, shards, replicas int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var nodes []model.Node
	for _, n := range names {
		node := model.Node{Name: n, Addr: "nowhere:6379"}
		if s := c.byName[n]; s != nil {
			node = s.node
		}
		nodes = append(nodes, node)
	}
	snap, err := c.snapshot(nodes)
	if err != nil {
		return []string{err.Error()}
	}
	problems := model.Health(snap, shards, replicas)
	lo, hi := model.SlotCount, 0
	for _, p := range snap.Primaries() {
		if n := model.CountSlots(p.Slots); n > 0 {
			lo, hi = min(lo, n), max(hi, n)
		}
	}
	if hi-lo > model.SlotCount/100 {
		problems = append(problems, fmt.Sprintf("slots uneven across primaries (%d..%d)", lo, hi))
	}
	return problems
}

// violations is what the invariant of watchSynced found so far.
func (c *day2Cluster) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.broken...)
}

// describe is the servers in one line each, for failure messages.
func (c *day2Cluster) describe() string {
	c.mu.Lock()
	names := slices.Sorted(maps.Keys(c.byName))
	c.mu.Unlock()
	var b strings.Builder
	for _, n := range names {
		st, _ := c.inspect(n)
		fmt.Fprintf(&b, "\n  %s id=%.8s alive=%v role=%s primary=%s slots=%d open=%d knows=%v", n, st.ID, st.Alive, st.Role, st.Primary, st.Slots, st.Open, st.Known)
	}
	return b.String()
}
