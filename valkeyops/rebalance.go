package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
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
//
// The MoveStats count what moved, also when an error ends the run part-way.
func (a *Admin) Rebalance(ctx context.Context, nodes []model.Node, leaving []string) (MoveStats, error) {
	var t moveTally
	err := a.rebalance(ctx, nodes, leaving, &t)
	return t.stats(), err
}

// MoveStats count what a Rebalance moved: slots whose ownership passed to another primary,
// and the keys that went with them. AtomicSlots of the Slots moved by an atomic migration
// (CLUSTER MIGRATESLOTS, Valkey >= 9.0), MigrateSlots key by key (SETSLOT and MIGRATE: the
// only path before 9.0, the fallback of the atomic one, and how a slot left open is finished).
type MoveStats struct {
	Slots, Keys               int
	AtomicSlots, MigrateSlots int
}

// moveTally adds up MoveStats from moves running in parallel.
type moveTally struct {
	atomicSlots, migrateSlots, keys atomic.Int64
}

// addAtomic counts slots (and their keys) an atomic migration moved.
func (t *moveTally) addAtomic(slots, keys int) {
	t.atomicSlots.Add(int64(slots))
	t.keys.Add(int64(keys))
}

// addMigrate counts slots and keys the key-by-key path moved.
func (t *moveTally) addMigrate(slots, keys int) {
	t.migrateSlots.Add(int64(slots))
	t.keys.Add(int64(keys))
}

func (t *moveTally) stats() MoveStats {
	at, mi := int(t.atomicSlots.Load()), int(t.migrateSlots.Load())
	return MoveStats{Slots: at + mi, Keys: int(t.keys.Load()), AtomicSlots: at, MigrateSlots: mi}
}

func (a *Admin) rebalance(ctx context.Context, nodes []model.Node, leaving []string, t *moveTally) error {
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
	fixed, err := a.finishOpenSlots(ctx, snap, t)
	if err != nil {
		return err
	}
	if fixed {
		if snap, err = a.observeForMoves(ctx, nodes); err != nil {
			return err
		}
	}

	owned := map[string][]model.SlotRange{}
	for _, p := range snap.Primaries() {
		if len(p.Slots) > 0 {
			owned[p.ID] = p.Slots
		}
	}
	targets := chooseTargets(snap, leave)
	if len(targets) == 0 {
		return model.NewOpError("", "plan", fmt.Errorf("%w: no primary left to hold slots", model.ErrInvalidSpec))
	}
	moves, err := model.PlanRebalance(owned, targets)
	if err != nil {
		return model.NewOpError("", "plan", err)
	}
	if len(moves) > 0 {
		if a.useAtomic(snap) {
			err = a.runAtomic(ctx, snap, moves, t)
		} else {
			err = a.runLegacy(ctx, snap, moves, t)
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
func (a *Admin) observeForMoves(ctx context.Context, nodes []model.Node) (*model.Snapshot, error) {
	var snap *model.Snapshot
	var bad string
	err := a.waitFor(ctx, "rebalance-precheck", 2*formTimeout, func() (bool, error) {
		var err error
		if snap, err = a.Observe(ctx, nodes); err != nil {
			return false, err
		}
		for _, st := range snap.Nodes {
			bad = st.Name
			if !st.Reachable {
				return false, fmt.Errorf("%w: %v", model.ErrUnreachable, st.Err)
			}
			if !st.ClusterOK() {
				return false, fmt.Errorf("%w: cluster_state is %q", model.ErrUnsafe, st.ClusterState)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, model.NewOpError(bad, "rebalance-precheck", err)
	}
	return snap, nil
}

// chooseTargets is one primary per shard among nodes not leaving: the one already holding
// slots, else the first primary of that shard (other empty primaries are future replicas).
func chooseTargets(snap *model.Snapshot, leave map[string]bool) []string {
	perShard := map[int]*model.NodeState{}
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

func (a *Admin) useAtomic(snap *model.Snapshot) bool {
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

// runRounds executes moves in rounds (model.ScheduleRounds), the moves of one round in
// parallel; the first round with a failure ends the run, so a later round never builds on a
// move that did not finish.
func runRounds(moves []model.Move, sharedTargets bool, move func(model.Move) error) error {
	for _, round := range model.ScheduleRounds(moves, sharedTargets) {
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

// waitLayoutAgreed waits until every node's view of every primary's slots matches what that
// primary says about itself, leaving primaries own nothing and all slots are assigned.
func (a *Admin) waitLayoutAgreed(ctx context.Context, nodes []model.Node, leave map[string]bool) error {
	return a.waitFor(ctx, "rebalance-converge", rebalanceTimeout, func() (bool, error) {
		snap, err := a.Observe(ctx, nodes)
		if err != nil {
			return false, err
		}
		for _, p := range snap.Primaries() {
			if leave[p.Name] && len(p.Slots) > 0 {
				return false, fmt.Errorf("leaving %s still owns %d slots", p.Name, model.CountSlots(p.Slots))
			}
			if self := p.Self(); self != nil && (len(self.Importing) > 0 || len(self.Migrating) > 0) {
				return false, fmt.Errorf("%s has open slots", p.Name)
			}
		}
		for _, st := range snap.Nodes {
			if !st.Reachable {
				continue
			}
			if st.SlotsAssigned != model.SlotCount {
				return false, fmt.Errorf("%s sees %d slots assigned", st.Name, st.SlotsAssigned)
			}
			for _, p := range snap.Primaries() {
				v := st.Peer(p.ID)
				if v == nil || model.FormatRanges(v.Slots) != model.FormatRanges(p.Slots) {
					return false, fmt.Errorf("%s's view of %s differs", st.Name, p.Name)
				}
			}
		}
		return true, nil
	})
}
