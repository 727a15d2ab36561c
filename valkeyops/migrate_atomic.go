package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Valkey >= 9.0: atomic slot migration (CLUSTER MIGRATESLOTS / GETSLOTMIGRATIONS).

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
func (a *Admin) runAtomic(ctx context.Context, snap *Snapshot, moves []Move, t *moveTally) error {
	return runRounds(moves, false, func(m Move) error { return a.moveAtomic(ctx, snap, m, t) })
}

func (a *Admin) moveAtomic(ctx context.Context, snap *Snapshot, m Move, t *moveTally) error {
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
		// The keys the move will carry: counted first, as the migration reports none.
		keys, err := a.countKeys(ctx, src.Node, m.Slots)
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
			t.add(CountSlots(m.Slots), keys)
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
	return a.moveSlotsLegacy(ctx, snap, &cur, &dcur, rest, t)
}

// countKeys counts the keys n holds in slots (CLUSTER COUNTKEYSINSLOT, pipelined).
func (a *Admin) countKeys(ctx context.Context, n Node, slots []SlotRange) (int, error) {
	var cmds [][]string
	for _, s := range ExpandSlots(slots) {
		cmds = append(cmds, []string{"CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(s)})
	}
	res, err := a.multi(ctx, n, "countkeysinslot", cmds)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, r := range res {
		c, err := r.AsInt64()
		if err != nil {
			return 0, opErr(n.Name, "countkeysinslot", err)
		}
		total += int(c)
	}
	return total, nil
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
