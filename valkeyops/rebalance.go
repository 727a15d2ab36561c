package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// slotChunk is how many slots one pipelined SETSLOT/GETKEYSINSLOT/MIGRATE round covers.
const slotChunk = 512

// rebalanceTimeout bounds the wait for every node to agree on the new slot layout.
const rebalanceTimeout = 60 * time.Second

// Rebalance moves slots WITH keys so that primaries not in `leaving` hold an even share and
// primaries whose node names are in `leaving` hold none. Resumable: every run first finishes
// any slot left importing/migrating (and waits out atomic migrations still running) from an
// earlier, interrupted run, then plans from the live layout, so a crash at any point is
// completed by the next call.
//
// Valkey >= 9.0 on every primary: atomic CLUSTER MIGRATESLOTS with bounded retries, falling
// back to the key-by-key path for a move that keeps failing. Older: SETSLOT IMPORTING/MIGRATING
// and pipelined, batched MIGRATE (MigrateBatch keys per call, authenticated with AUTH2), with
// disjoint source->target pairs running in parallel.
func (a *Admin) Rebalance(ctx context.Context, nodes []Node, leaving []string) error {
	leave := map[string]bool{}
	for _, name := range leaving {
		leave[name] = true
	}
	snap, err := a.observeForMoves(ctx, nodes)
	if err != nil {
		return err
	}
	if err := a.waitAtomicIdle(ctx, snap); err != nil {
		return err
	}
	fixed, err := a.finishOpenSlots(ctx, snap)
	if err != nil {
		return err
	}
	if fixed {
		if snap, err = a.observeForMoves(ctx, nodes); err != nil {
			return err
		}
	}

	owned := map[string][]SlotRange{}
	for _, p := range snap.Primaries() {
		if len(p.Slots) > 0 {
			owned[p.ID] = p.Slots
		}
	}
	targets := chooseTargets(snap, leave)
	if len(targets) == 0 {
		return opErr("", "plan", fmt.Errorf("%w: no primary left to hold slots", ErrInvalidSpec))
	}
	moves, err := PlanRebalance(owned, targets)
	if err != nil {
		return opErr("", "plan", err)
	}
	if len(moves) > 0 {
		if a.useAtomic(snap) {
			err = a.runAtomic(ctx, snap, moves)
		} else {
			err = a.runLegacy(ctx, snap, moves)
		}
		if err != nil {
			return err
		}
	}
	return a.waitLayoutAgreed(ctx, nodes, leave)
}

// observeForMoves observes and waits (bounded) until every node is reachable and reports
// cluster_state ok: a move needs both ends, moving during a failure risks keys, and a freshly
// joined primary reports "fail" for up to a node timeout before it rejoins.
func (a *Admin) observeForMoves(ctx context.Context, nodes []Node) (*Snapshot, error) {
	var snap *Snapshot
	var bad string
	err := a.waitFor(ctx, "rebalance-precheck", 2*formTimeout, func() (bool, error) {
		var err error
		if snap, err = a.Observe(ctx, nodes); err != nil {
			return false, err
		}
		for _, st := range snap.Nodes {
			bad = st.Name
			if !st.Reachable {
				return false, fmt.Errorf("%w: %v", ErrUnreachable, st.Err)
			}
			if st.ClusterState != "ok" {
				return false, fmt.Errorf("%w: cluster_state is %q", ErrUnsafe, st.ClusterState)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, opErr(bad, "rebalance-precheck", err)
	}
	return snap, nil
}

// chooseTargets is one primary per shard among nodes not leaving: the one already holding
// slots, else the first primary of that shard (other empty primaries are future replicas).
func chooseTargets(snap *Snapshot, leave map[string]bool) []string {
	perShard := map[int]*NodeState{}
	var shards []int
	for _, p := range snap.Primaries() {
		if leave[p.Name] {
			continue
		}
		cur, ok := perShard[p.Shard]
		if !ok {
			shards = append(shards, p.Shard)
		}
		if !ok || (len(cur.Slots) == 0 && len(p.Slots) > 0) {
			perShard[p.Shard] = p
		}
	}
	sort.Ints(shards)
	var out []string
	for _, s := range shards {
		out = append(out, perShard[s].ID)
	}
	// A second slot-holding primary in a shard (e.g. after an odd failover) keeps being a target
	// rather than being drained by accident.
	seen := map[string]bool{}
	for _, id := range out {
		seen[id] = true
	}
	for _, p := range snap.Primaries() {
		if !leave[p.Name] && len(p.Slots) > 0 && !seen[p.ID] {
			out = append(out, p.ID)
		}
	}
	return out
}

func (a *Admin) useAtomic(snap *Snapshot) bool {
	if a.opts.DisableAtomic {
		return false
	}
	for _, p := range snap.Primaries() {
		if p.MajorVersion() < 9 {
			return false
		}
	}
	return true
}

// runRounds executes moves in rounds of disjoint source->target pairs (scheduleRounds), the
// moves of one round in parallel; the first round with a failure ends the run, so a later
// round never builds on a move that did not finish.
func runRounds(moves []Move, move func(Move) error) error {
	for _, round := range scheduleRounds(moves) {
		errs := make([]error, len(round))
		var wg sync.WaitGroup
		for i, m := range round {
			wg.Go(func() { errs[i] = move(m) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// runLegacy executes moves key by key (SETSLOT IMPORTING/MIGRATING + batched MIGRATE).
func (a *Admin) runLegacy(ctx context.Context, snap *Snapshot, moves []Move) error {
	return runRounds(moves, func(m Move) error {
		return a.moveSlotsLegacy(ctx, snap, snap.ByID(m.From), snap.ByID(m.To), ExpandSlots(m.Slots))
	})
}

// peerAddr is dst's announced host and port as src sees it (what MIGRATE must dial).
func peerAddr(src, dst *NodeState) (string, string) {
	if p := src.Peer(dst.ID); p != nil && p.IP != "" {
		return p.IP, strconv.Itoa(p.Port)
	}
	host, port, _ := net.SplitHostPort(dst.Addr)
	return host, port
}

// moveSlotsLegacy moves slots from src to dst with SETSLOT IMPORTING/MIGRATING, pipelined
// GETKEYSINSLOT and batched MIGRATE, then SETSLOT NODE on dst and then src (in that order, so
// the slot is never owned by nobody); the target's bumped epoch carries the new owner to every
// other node by gossip, which Rebalance waits for. It also completes a half-done move: slots
// dst already owns are not set importing, and only slots src still owns are drained.
func (a *Admin) moveSlotsLegacy(ctx context.Context, snap *Snapshot, src, dst *NodeState, slots []int) error {
	if src == nil || dst == nil {
		return opErr("", "migrate", fmt.Errorf("%w: move endpoint not observed", ErrUnreachable))
	}
	host, port := peerAddr(src, dst)
	srcOwns := slotSet(src.Slots)
	dstOwns := slotSet(dst.Slots)
	for len(slots) > 0 {
		t0 := time.Now()
		chunk := slots[:min(slotChunk, len(slots))]
		slots = slots[len(chunk):]
		var imp, mig [][]string
		var movable []int
		for _, s := range chunk {
			ss := strconv.Itoa(s)
			if !dstOwns[s] {
				imp = append(imp, []string{"CLUSTER", "SETSLOT", ss, "IMPORTING", src.ID})
			}
			if srcOwns[s] {
				mig = append(mig, []string{"CLUSTER", "SETSLOT", ss, "MIGRATING", dst.ID})
				movable = append(movable, s)
			}
		}
		if err := a.multiSpread(ctx, dst.Node, "setslot-importing", imp); err != nil {
			return err
		}
		if err := a.multiSpread(ctx, src.Node, "setslot-migrating", mig); err != nil {
			return err
		}
		tSet := time.Since(t0)
		a.logf("opened %d slots %s -> %s", len(chunk), src.Name, dst.Name)
		if err := a.migrateKeys(ctx, src.Node, host, port, movable); err != nil {
			return err
		}
		tKeys := time.Since(t0)
		node := make([][]string, len(chunk))
		for i, s := range chunk {
			node[i] = []string{"CLUSTER", "SETSLOT", strconv.Itoa(s), "NODE", dst.ID}
		}
		if err := a.claimSlots(ctx, dst, chunk, dstOwns); err != nil {
			return err
		}
		if err := a.multiSpread(ctx, src.Node, "setslot-node-source", node); err != nil {
			// The source may already have learned the new owner by gossip (and, having lost its
			// last slot, turned into a replica of the target): fine if it owns none of them now.
			cur := a.observeOne(ctx, src.Node)
			if !cur.Reachable || ownsAny(cur.Slots, chunk) {
				return err
			}
		}
		a.logf("moved %d slots %s -> %s in %s (setslot %s, keys %s)", len(chunk), src.Name, dst.Name,
			time.Since(t0).Round(time.Millisecond), tSet.Round(time.Millisecond), (tKeys - tSet).Round(time.Millisecond))
	}
	return nil
}

// claimSlots makes dst the owner of slots after their keys have moved. SETSLOT NODE on an
// importing node bumps its config epoch and broadcasts a PONG to the whole cluster, per slot;
// that broadcast, not the keys, dominated the time of a move. So only the first slot takes
// that path: it leaves dst with the highest config epoch in the cluster, which makes every
// later claim by dst win over the source's older one. The other slots are claimed without a
// broadcast (SETSLOT STABLE, then SETSLOT NODE to itself, pipelined per slot so the window
// without importing state is one command long) and reach the other nodes with dst's next
// pings. The order matters: a claim made with an epoch lower than the source's would be
// answered with an UPDATE that takes the slot, and its keys, away from dst.
func (a *Admin) claimSlots(ctx context.Context, dst *NodeState, slots []int, dstOwns map[int]bool) error {
	var first []string
	var rest [][]string
	for _, s := range slots {
		ss := strconv.Itoa(s)
		if first == nil && !dstOwns[s] {
			first = []string{"CLUSTER", "SETSLOT", ss, "NODE", dst.ID}
			continue
		}
		if !dstOwns[s] {
			rest = append(rest, []string{"CLUSTER", "SETSLOT", ss, "STABLE"})
		}
		rest = append(rest, []string{"CLUSTER", "SETSLOT", ss, "NODE", dst.ID})
	}
	if first != nil {
		if _, err := a.cmd(ctx, dst.Node, "setslot-node-target", first...); err != nil {
			return err
		}
	}
	return a.multiSpreadPairs(ctx, dst.Node, "setslot-node-target", rest)
}

// migrateKeys drains the given slots of src into host:port, MigrateBatch keys per MIGRATE,
// all slots of a round pipelined. REPLACE makes a retried batch idempotent: while a slot is
// migrating, the source's copy of a key is the authoritative one.
func (a *Admin) migrateKeys(ctx context.Context, src Node, host, port string, slots []int) error {
	batch := strconv.Itoa(a.opts.MigrateBatch)
	pending := slots
	for len(pending) > 0 {
		get := make([][]string, len(pending))
		for i, s := range pending {
			get[i] = []string{"CLUSTER", "GETKEYSINSLOT", strconv.Itoa(s), batch}
		}
		res, err := a.multi(ctx, src, "getkeysinslot", get)
		if err != nil {
			return err
		}
		var migrate [][]string
		var next []int
		for i, r := range res {
			keys, err := r.AsStrSlice()
			if err != nil {
				return opErr(src.Name, "getkeysinslot", err)
			}
			if len(keys) == 0 {
				continue
			}
			cmd := append([]string{"MIGRATE", host, port, "", "0", "15000", "REPLACE", "AUTH2", a.opts.Username, a.opts.Password, "KEYS"}, keys...)
			migrate = append(migrate, cmd)
			if len(keys) >= a.opts.MigrateBatch {
				next = append(next, pending[i])
			}
		}
		if _, err := a.multi(ctx, src, "migrate", migrate); err != nil {
			return err
		}
		pending = next
	}
	return nil
}

func slotSet(rs []SlotRange) map[int]bool {
	out := make(map[int]bool, CountSlots(rs))
	for _, r := range rs {
		for s := r.Start; s <= r.End; s++ {
			out[s] = true
		}
	}
	return out
}

// finishOpenSlots completes every slot some primary reports importing or migrating, moving
// the rest of its keys to the importing side: after a crash the keys may already be split
// between both ends, so finishing is the direction that never strands a key.
func (a *Admin) finishOpenSlots(ctx context.Context, snap *Snapshot) (bool, error) {
	type pair struct{ from, to string }
	open := map[pair]map[int]bool{}
	add := func(from, to string, s int) {
		k := pair{from, to}
		if open[k] == nil {
			open[k] = map[int]bool{}
		}
		open[k][s] = true
	}
	for _, p := range snap.Primaries() {
		self := p.Self()
		if self == nil {
			continue
		}
		for s, to := range self.Migrating {
			add(p.ID, to, s)
		}
		for s, from := range self.Importing {
			add(from, p.ID, s)
		}
	}
	if len(open) == 0 {
		return false, nil
	}
	for k, set := range open {
		src, dst := snap.ByID(k.from), snap.ByID(k.to)
		var slots []int
		for s := range set {
			slots = append(slots, s)
		}
		sort.Ints(slots)
		switch {
		case src != nil && dst != nil && dst.Role == RolePrimary:
			if err := a.moveSlotsLegacy(ctx, snap, src, dst, slots); err != nil {
				return true, err
			}
		case src != nil && src.Role == RolePrimary:
			// The importing side is gone: the source still owns the slot and its keys; close it.
			if err := a.setStable(ctx, src.Node, slots); err != nil {
				return true, err
			}
		case dst != nil:
			if err := a.setStable(ctx, dst.Node, slots); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

func (a *Admin) setStable(ctx context.Context, n Node, slots []int) error {
	cmds := make([][]string, len(slots))
	for i, s := range slots {
		cmds[i] = []string{"CLUSTER", "SETSLOT", strconv.Itoa(s), "STABLE"}
	}
	return a.multiSpread(ctx, n, "setslot-stable", cmds)
}

// waitLayoutAgreed waits until every node's view of every primary's slots matches what that
// primary says about itself, leaving primaries own nothing and all slots are assigned.
func (a *Admin) waitLayoutAgreed(ctx context.Context, nodes []Node, leave map[string]bool) error {
	return a.waitFor(ctx, "rebalance-converge", rebalanceTimeout, func() (bool, error) {
		snap, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for _, p := range snap.Primaries() {
			if leave[p.Name] && len(p.Slots) > 0 {
				return false, fmt.Errorf("leaving %s still owns %d slots", p.Name, CountSlots(p.Slots))
			}
			if self := p.Self(); self != nil && (len(self.Importing) > 0 || len(self.Migrating) > 0) {
				return false, fmt.Errorf("%s has open slots", p.Name)
			}
		}
		for _, st := range snap.Nodes {
			if !st.Reachable {
				continue
			}
			if st.SlotsAssigned != SlotCount {
				return false, fmt.Errorf("%s sees %d slots assigned", st.Name, st.SlotsAssigned)
			}
			for _, p := range snap.Primaries() {
				v := st.Peer(p.ID)
				if v == nil || FormatRanges(v.Slots) != FormatRanges(p.Slots) {
					return false, fmt.Errorf("%s's view of %s differs", st.Name, p.Name)
				}
			}
		}
		return true, nil
	})
}

// ---- Valkey >= 9.0: atomic slot migration ----

// slotMigration is one entry of CLUSTER GETSLOTMIGRATIONS.
type slotMigration struct {
	Operation, SlotRanges, Target, Source, State, Message string
}

func (m slotMigration) terminal() bool {
	switch m.State {
	case "success", "failed", "cancelled", "canceled":
		return true
	}
	return false
}

func (a *Admin) slotMigrations(ctx context.Context, n Node) ([]slotMigration, error) {
	msg, err := a.cmd(ctx, n, "getslotmigrations", "CLUSTER", "GETSLOTMIGRATIONS")
	if err != nil {
		return nil, err
	}
	list, err := msg.ToArray()
	if err != nil {
		return nil, opErr(n.Name, "getslotmigrations", err)
	}
	out := make([]slotMigration, 0, len(list))
	for _, e := range list {
		m, err := e.AsStrMap()
		if err != nil {
			return nil, opErr(n.Name, "getslotmigrations", err)
		}
		out = append(out, slotMigration{
			Operation: m["operation"], SlotRanges: m["slot_ranges"], Target: m["target_node"],
			Source: m["source_node"], State: m["state"], Message: m["message"],
		})
	}
	return out, nil
}

// waitAtomicIdle waits until no primary has an atomic slot migration in flight (one started
// by an interrupted run finishes or fails on its own inside the server).
func (a *Admin) waitAtomicIdle(ctx context.Context, snap *Snapshot) error {
	var ps []Node
	for _, p := range snap.Primaries() {
		if p.MajorVersion() >= 9 {
			ps = append(ps, p.Node)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return a.waitFor(ctx, "atomic-idle", rebalanceTimeout, func() (bool, error) {
		for _, n := range ps {
			ms, err := a.slotMigrations(ctx, n)
			if err != nil {
				return false, err
			}
			for _, m := range ms {
				if !m.terminal() {
					return false, fmt.Errorf("%s: migration of %s still %s", n.Name, m.SlotRanges, m.State)
				}
			}
		}
		return true, nil
	})
}

// runAtomic runs every source's moves as atomic migrations, sources in parallel; a move that
// fails AtomicRetries times falls back to the key-by-key path (high write rates can make
// atomic migration fail repeatedly).
func (a *Admin) runAtomic(ctx context.Context, snap *Snapshot, moves []Move) error {
	return runRounds(moves, func(m Move) error { return a.moveAtomic(ctx, snap, m) })
}

func (a *Admin) moveAtomic(ctx context.Context, snap *Snapshot, m Move) error {
	src, dst := snap.ByID(m.From), snap.ByID(m.To)
	if src == nil || dst == nil {
		return opErr("", "migrateslots", fmt.Errorf("%w: move endpoint not observed", ErrUnreachable))
	}
	want := FormatRanges(m.Slots)
	var lastErr error
	for attempt := 0; attempt < a.opts.AtomicRetries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return opErr(src.Name, "migrateslots", ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		before, err := a.slotMigrations(ctx, src.Node)
		if err != nil {
			return err
		}
		args := []string{"CLUSTER", "MIGRATESLOTS", "SLOTSRANGE"}
		for _, r := range m.Slots {
			args = append(args, strconv.Itoa(r.Start), strconv.Itoa(r.End))
		}
		args = append(args, "NODE", dst.ID)
		if _, err := a.cmd(ctx, src.Node, "migrateslots", args...); err != nil {
			lastErr = err
			continue
		}
		var final slotMigration
		err = a.waitFor(ctx, "migrateslots-wait", 10*time.Minute, func() (bool, error) {
			ms, err := a.slotMigrations(ctx, src.Node)
			if err != nil {
				return false, err
			}
			var matches []slotMigration
			for _, e := range ms {
				if e.Operation == "EXPORT" && e.Target == dst.ID && sameRanges(e.SlotRanges, want) {
					matches = append(matches, e)
				}
			}
			if len(matches) > 0 {
				last := matches[len(matches)-1]
				if len(matches) > countMatches(before, dst.ID, want) || !last.terminal() {
					final = last
					return last.terminal(), fmt.Errorf("migration %s", last.State)
				}
			}
			return false, errors.New("migration not listed yet")
		})
		if err != nil {
			return opErr(src.Name, "migrateslots-wait", err)
		}
		if final.State == "success" {
			return nil
		}
		lastErr = opErr(src.Name, "migrateslots", fmt.Errorf("atomic migration to %s %s: %s", dst.Name, final.State, final.Message))
	}
	// Fall back to the key-by-key path for whatever src still owns of this move.
	cur := a.observeOne(ctx, src.Node)
	if !cur.Reachable {
		return opErr(src.Name, "migrateslots-fallback", errors.Join(lastErr, cur.Err))
	}
	dcur := a.observeOne(ctx, dst.Node)
	owns := slotSet(cur.Slots)
	var rest []int
	for _, s := range ExpandSlots(m.Slots) {
		if owns[s] {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return a.moveSlotsLegacy(ctx, snap, &cur, &dcur, rest)
}

// sameRanges compares a GETSLOTMIGRATIONS slot_ranges field with our rendering, accepting
// "5-5" for a single slot.
func sameRanges(got, want string) bool {
	norm := func(s string) string {
		f := strings.Fields(strings.ReplaceAll(s, ",", " "))
		for i, x := range f {
			if a, b, ok := strings.Cut(x, "-"); ok && a == b {
				f[i] = a
			}
		}
		return strings.Join(f, " ")
	}
	return norm(got) == norm(want)
}

func countMatches(ms []slotMigration, target, ranges string) int {
	n := 0
	for _, e := range ms {
		if e.Operation == "EXPORT" && e.Target == target && sameRanges(e.SlotRanges, ranges) {
			n++
		}
	}
	return n
}

func ownsAny(rs []SlotRange, slots []int) bool {
	set := slotSet(rs)
	for _, s := range slots {
		if set[s] {
			return true
		}
	}
	return false
}
