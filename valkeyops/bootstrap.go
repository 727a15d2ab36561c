package valkeyops

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// formingNodeTimeout (ms) is the cluster-node-timeout fresh nodes run with while Bootstrap
// forms them; see Bootstrap.
const formingNodeTimeout = 1000

// formTimeout bounds each wait of Bootstrap (handshakes, slot gossip, replica attach).
const formTimeout = 60 * time.Second

// Bootstrap forms the cluster from nodes grouped by Shard: one primary per shard with an even
// contiguous slot range (shard i gets range i of `shards`), the rest replicate it. Sets
// the replication login (see ReplicationLogin) so replicas authenticate. Idempotent; never moves an owned slot.
//
// It observes first and only does what is missing, so it can be rerun on a formed or
// half-formed cluster: fresh nodes get distinct config epochs before they meet anyone (nodes
// at epoch 0 can accept gossip handing their slots away), every pair is MET directly (a node
// learned only through gossip can take node_timeout/2 to be fully known), only slots nobody
// owns are assigned, and only nodes not yet following their shard's primary are attached.
func (a *Admin) Bootstrap(ctx context.Context, nodes []Node, shards int) error {
	groups, err := groupShards(nodes, shards)
	if err != nil {
		return err
	}
	snap, err := a.Observe(ctx, nodes)
	if err != nil {
		return err
	}
	if err := requireReachable(snap); err != nil {
		return err
	}

	// Replication credentials first: a replica attached below must authenticate (auth is
	// always on).
	if err := parallel(nodes, func(n Node) error {
		return a.setReplicationLogin(ctx, n)
	}); err != nil {
		return err
	}

	// Distinct config epochs for nodes that know nobody and own nothing.
	var maxEpoch uint64
	for _, st := range snap.Nodes {
		maxEpoch = max(maxEpoch, st.ConfigEpoch, st.CurrentEpoch)
	}
	next := maxEpoch + 1
	var fresh []Node
	epochs := map[string]uint64{}
	for _, st := range snap.Nodes {
		if st.KnownNodes <= 1 && st.ConfigEpoch == 0 && len(st.Slots) == 0 {
			epochs[st.Name] = next
			next++
			fresh = append(fresh, st.Node)
		}
	}
	// A primary that was alone (as every fresh node is) keeps reporting cluster_state:fail for
	// a "rejoin delay" of cluster-node-timeout (clamped to 0.5-5 s) after it stops being in the
	// minority. Fresh, empty nodes get formingNodeTimeout while the cluster forms and their
	// configured value back once it is formed.
	origTimeout := map[string]string{}
	var mu sync.Mutex
	if err := parallel(fresh, func(n Node) error {
		res, err := a.multi(ctx, n, "set-config-epoch", [][]string{
			{"CONFIG", "GET", "cluster-node-timeout"},
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.FormatUint(epochs[n.Name], 10)},
			// Empty new nodes sync their replicas at once instead of after the default 5s delay.
			{"CONFIG", "SET", "repl-diskless-sync-delay", "0"},
		})
		if err != nil {
			return err
		}
		kv, err := res[0].AsStrMap()
		if err != nil {
			return opErr(n.Name, "set-config-epoch", err)
		}
		if v, _ := strconv.Atoi(kv["cluster-node-timeout"]); v > formingNodeTimeout {
			if _, err := a.cmd(ctx, n, "set-node-timeout", "CONFIG", "SET", "cluster-node-timeout", strconv.Itoa(formingNodeTimeout)); err != nil {
				return err
			}
			mu.Lock()
			origTimeout[n.Name] = kv["cluster-node-timeout"]
			mu.Unlock()
		}
		return nil
	}); err != nil {
		return err
	}
	defer func() {
		var touched []Node
		for _, n := range fresh {
			if origTimeout[n.Name] != "" {
				touched = append(touched, n)
			}
		}
		_ = parallel(touched, func(n Node) error {
			_, err := a.cmd(context.WithoutCancel(ctx), n, "restore-node-timeout", "CONFIG", "SET", "cluster-node-timeout", origTimeout[n.Name])
			return err
		})
	}()

	// Slots: shard i's primary takes the unowned part of range i. Assigned before MEET so the
	// ownership travels with the handshake.
	owned := ownedSlots(snap)
	ranges := EvenRanges(shards)
	primaries := make([]*NodeState, shards)
	for shard, members := range groups {
		p := choosePrimary(snap, members)
		if p == nil {
			return opErr(members[0].Name, "choose-primary", fmt.Errorf("%w: shard %d has no node that can be primary", ErrUnsafe, shard))
		}
		primaries[shard] = p
	}
	if err := parallelIdx(shards, func(shard int) error {
		p := primaries[shard]
		var free []int
		for s := ranges[shard].Start; s <= ranges[shard].End; s++ {
			if !owned[s] {
				free = append(free, s)
			}
		}
		if len(free) == 0 {
			return nil
		}
		args := []string{"CLUSTER", "ADDSLOTSRANGE"}
		for _, r := range CompactSlots(free) {
			args = append(args, strconv.Itoa(r.Start), strconv.Itoa(r.End))
		}
		_, err := a.cmd(ctx, p.Node, "addslots", args...)
		return err
	}); err != nil {
		return err
	}

	if err := a.meetAll(ctx, snap); err != nil {
		return err
	}

	// Attach replicas once each knows its primary.
	byShard := map[string]int{}
	var replicas []Node
	for shard, members := range groups {
		for _, m := range members {
			if m.Name != primaries[shard].Name {
				byShard[m.Name] = shard
				replicas = append(replicas, m)
			}
		}
	}
	if err := parallel(replicas, func(n Node) error {
		p := primaries[byShard[n.Name]]
		return a.attachReplica(ctx, n, p.Node, p.ID)
	}); err != nil {
		return err
	}

	// Converged: every node sees every slot assigned and every replica follows its primary.
	return a.waitServing(ctx, nodes, "bootstrap-converge", func(st *NodeState) error {
		if shard, ok := byShard[st.Name]; ok && (st.Role != RoleReplica || st.PrimaryID != primaries[shard].ID) {
			return fmt.Errorf("%s not yet a replica of %s", st.Name, primaries[shard].Name)
		}
		return nil
	})
}

// waitServing waits (formTimeout) until every node answers, sees all slots assigned and
// reports cluster_state ok, and passes check (nil = no further condition).
func (a *Admin) waitServing(ctx context.Context, nodes []Node, step string, check func(*NodeState) error) error {
	return a.waitFor(ctx, step, formTimeout, func() (bool, error) {
		s, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for i := range s.Nodes {
			st := &s.Nodes[i]
			switch {
			case !st.Reachable:
				return false, st.Err
			case st.SlotsAssigned != SlotCount:
				return false, fmt.Errorf("%s sees %d slots assigned", st.Name, st.SlotsAssigned)
			case st.ClusterState != "ok":
				return false, fmt.Errorf("%s reports cluster_state %q", st.Name, st.ClusterState)
			}
			if check != nil {
				if err := check(st); err != nil {
					return false, err
				}
			}
		}
		return true, nil
	})
}

// groupShards validates nodes and groups them by shard index.
func groupShards(nodes []Node, shards int) ([][]Node, error) {
	if shards <= 0 {
		return nil, opErr("", "validate", fmt.Errorf("%w: shards must be positive, got %d", ErrInvalidSpec, shards))
	}
	groups := make([][]Node, shards)
	for _, n := range nodes {
		if n.Shard < 0 || n.Shard >= shards {
			return nil, opErr(n.Name, "validate", fmt.Errorf("%w: shard %d outside 0..%d", ErrInvalidSpec, n.Shard, shards-1))
		}
		groups[n.Shard] = append(groups[n.Shard], n)
	}
	for i, g := range groups {
		if len(g) == 0 {
			return nil, opErr("", "validate", fmt.Errorf("%w: shard %d has no nodes", ErrInvalidSpec, i))
		}
	}
	return groups, nil
}

func requireReachable(snap *Snapshot) error {
	for _, st := range snap.Nodes {
		if !st.Reachable {
			return opErr(st.Name, "observe", fmt.Errorf("%w: %v", ErrUnreachable, st.Err))
		}
	}
	return nil
}

// ownedSlots is every slot some node's view says is owned.
func ownedSlots(snap *Snapshot) []bool {
	owned := make([]bool, SlotCount)
	for _, st := range snap.Nodes {
		for _, cn := range st.View {
			for _, r := range cn.Slots {
				for s := r.Start; s <= r.End; s++ {
					owned[s] = true
				}
			}
		}
	}
	return owned
}

// choosePrimary picks the shard's primary from the live cluster, never from names: the member
// owning slots (most first), else a primary that already has a member replicating it, else the
// first member that reports itself primary.
func choosePrimary(snap *Snapshot, members []Node) *NodeState {
	var best *NodeState
	for _, m := range members {
		st := snap.ByName(m.Name)
		if st.Role == RolePrimary && len(st.Slots) > 0 && (best == nil || CountSlots(st.Slots) > CountSlots(best.Slots)) {
			best = st
		}
	}
	if best != nil {
		return best
	}
	for _, m := range members {
		st := snap.ByName(m.Name)
		if st.Role != RolePrimary {
			continue
		}
		for _, o := range members {
			if os := snap.ByName(o.Name); os.Role == RoleReplica && os.PrimaryID == st.ID {
				return st
			}
		}
	}
	for _, m := range members {
		if st := snap.ByName(m.Name); st.Role == RolePrimary {
			return st
		}
	}
	return nil
}

// meetAddr is the address other nodes should use to reach st: what it announces, else the
// host we dial it on.
func meetAddr(st *NodeState) (ip string, port, bus int, err error) {
	host, p, err := net.SplitHostPort(st.Addr)
	if err != nil {
		return "", 0, 0, err
	}
	port, _ = strconv.Atoi(p)
	ip = host
	if self := st.Self(); self != nil {
		if self.IP != "" {
			ip = self.IP
		}
		if self.Port != 0 {
			port = self.Port
		}
		bus = self.BusPort
	}
	if bus == 0 {
		bus = port + 10000
	}
	if net.ParseIP(ip) == nil {
		addrs, err := net.LookupHost(ip)
		if err != nil || len(addrs) == 0 {
			return "", 0, 0, fmt.Errorf("resolve %s: %v", ip, err)
		}
		ip = addrs[0]
	}
	return ip, port, bus, nil
}

// meetAll MEETs every pair in which one side does not know the other (or knows it at another
// address or as failed) and waits until every node knows every other, handshakes finished.
func (a *Admin) meetAll(ctx context.Context, snap *Snapshot) error {
	type target struct{ ip, port, bus string }
	addrs := map[string]target{}
	for i := range snap.Nodes {
		ip, port, bus, err := meetAddr(&snap.Nodes[i])
		if err != nil {
			return opErr(snap.Nodes[i].Name, "meet", err)
		}
		addrs[snap.Nodes[i].Name] = target{ip, strconv.Itoa(port), strconv.Itoa(bus)}
	}
	meets := map[string][][]string{}
	var from []Node
	for i := range snap.Nodes {
		ai := &snap.Nodes[i]
		for j := i + 1; j < len(snap.Nodes); j++ {
			bj := &snap.Nodes[j]
			if knowsWell(ai, bj, addrs[bj.Name].ip) && knowsWell(bj, ai, addrs[ai.Name].ip) {
				continue
			}
			t := addrs[bj.Name]
			if len(meets[ai.Name]) == 0 {
				from = append(from, ai.Node)
			}
			meets[ai.Name] = append(meets[ai.Name], []string{"CLUSTER", "MEET", t.ip, t.port, t.bus})
		}
	}
	if err := parallel(from, func(n Node) error {
		_, err := a.multi(ctx, n, "meet", meets[n.Name])
		return err
	}); err != nil {
		return err
	}
	if len(from) == 0 {
		return nil
	}
	nodes := make([]Node, len(snap.Nodes))
	for i, st := range snap.Nodes {
		nodes[i] = st.Node
	}
	return a.waitFor(ctx, "meet-wait", formTimeout, func() (bool, error) {
		s, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for i := range s.Nodes {
			for j := range s.Nodes {
				if i == j {
					continue
				}
				if !s.Nodes[i].Reachable {
					return false, s.Nodes[i].Err
				}
				p := s.Nodes[i].Peer(s.Nodes[j].ID)
				if p == nil || p.HasFlag("handshake") || p.HasFlag("noaddr") {
					return false, fmt.Errorf("%s does not know %s yet", s.Nodes[i].Name, s.Nodes[j].Name)
				}
			}
		}
		return true, nil
	})
}

// knowsWell: a's view has b's ID at b's current address and not marked failed.
func knowsWell(a, b *NodeState, bIP string) bool {
	p := a.Peer(b.ID)
	if p == nil {
		return false
	}
	if p.HasFlag("fail") || p.HasFlag("noaddr") || p.HasFlag("handshake") {
		return false
	}
	return p.IP == bIP
}

// attachReplica makes n follow primary (ID primaryID) unless it already does. It refuses to
// touch a node owning slots.
func (a *Admin) attachReplica(ctx context.Context, n, primary Node, primaryID string) error {
	var st NodeState
	err := a.waitFor(ctx, "replicate-wait-known", formTimeout, func() (bool, error) {
		st = a.observeOne(ctx, n)
		if !st.Reachable {
			return false, st.Err
		}
		p := st.Peer(primaryID)
		if p == nil || p.HasFlag("handshake") || !p.IsPrimary() {
			return false, fmt.Errorf("%s does not know primary %s yet", n.Name, primary.Name)
		}
		return true, nil
	})
	if err != nil {
		return opErr(n.Name, "replicate", err)
	}
	if st.Role == RoleReplica && st.PrimaryID == primaryID {
		return nil
	}
	if len(st.Slots) > 0 {
		return opErr(n.Name, "replicate", fmt.Errorf("%w: node owns slots %s", ErrUnsafe, FormatRanges(st.Slots)))
	}
	if err := a.setReplicationLogin(ctx, n); err != nil {
		return err
	}
	_, err = a.cmd(ctx, n, "replicate", "CLUSTER", "REPLICATE", primaryID)
	return err
}

func parallelIdx(n int, fn func(int) error) error {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{Name: strconv.Itoa(i)}
	}
	return parallel(nodes, func(x Node) error {
		i, _ := strconv.Atoi(x.Name)
		return fn(i)
	})
}
