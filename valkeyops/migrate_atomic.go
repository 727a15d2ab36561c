package valkeyops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// Valkey >= 9.0: atomic slot migration (CLUSTER MIGRATESLOTS / GETSLOTMIGRATIONS).

// slotMigration is one entry of CLUSTER GETSLOTMIGRATIONS.
type slotMigration struct {
	Name, Operation, SlotRanges, Target, Source, State, Message string
}

// id tells one migration from another: its name (unique per job), or, from a server that
// gives none, every field (an ended job's fields no longer change).
func (m slotMigration) id() string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%+v", m)
}

func (m slotMigration) terminal() bool {
	switch m.State {
	case "success", "failed", "cancelled", "canceled":
		return true
	}
	return false
}

func (a *Admin) slotMigrations(ctx context.Context, n model.Node) ([]slotMigration, error) {
	msg, err := a.cmd(ctx, n, "getslotmigrations", "CLUSTER", "GETSLOTMIGRATIONS")
	if err != nil {
		return nil, err
	}
	list, err := msg.ToArray()
	if err != nil {
		return nil, model.NewOpError(n.Name, "getslotmigrations", err)
	}
	out := make([]slotMigration, 0, len(list))
	for _, e := range list {
		m, err := e.AsStrMap()
		if err != nil {
			return nil, model.NewOpError(n.Name, "getslotmigrations", err)
		}
		out = append(out, slotMigration{
			Name: m["name"], Operation: m["operation"], SlotRanges: m["slot_ranges"], Target: m["target_node"],
			Source: m["source_node"], State: m["state"], Message: m["message"],
		})
	}
	return out, nil
}

// waitAtomicIdle waits until no primary has an atomic slot migration in flight (one started
// by an interrupted run finishes or fails on its own inside the server).
func (a *Admin) waitAtomicIdle(ctx context.Context, snap *model.Snapshot) error {
	var ps []model.Node
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
func (a *Admin) runAtomic(ctx context.Context, snap *model.Snapshot, moves []model.Move, t *moveTally) error {
	return runRounds(moves, false, func(m model.Move) error { return a.moveAtomic(ctx, snap, m, t) })
}

func (a *Admin) moveAtomic(ctx context.Context, snap *model.Snapshot, m model.Move, t *moveTally) error {
	src, dst := snap.ByID(m.From), snap.ByID(m.To)
	if src == nil || dst == nil {
		return model.NewOpError("", "migrateslots", fmt.Errorf("%w: move endpoint not observed", model.ErrUnreachable))
	}
	want := model.FormatRanges(m.Slots)
	var lastErr error
	for attempt := 0; attempt < a.opts.AtomicRetries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return model.NewOpError(src.Name, "migrateslots", ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
			if err := a.waitImportEnded(ctx, dst.Node, src.ID); err != nil {
				return errors.Join(lastErr, err)
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
		// This attempt's job is the export of these slots to dst that was not listed before
		// the MIGRATESLOTS. An earlier attempt's failed job stays listed (newest first), so
		// telling them apart by position read that failure again at once and fell back to
		// MIGRATE while the new job was still running (SETSLOT IMPORTING then failed with
		// "Slot import in progress").
		known := map[string]bool{}
		for _, e := range before {
			known[e.id()] = true
		}
		var final slotMigration
		err = a.waitFor(ctx, "migrateslots-wait", 10*time.Minute, func() (bool, error) {
			ms, err := a.slotMigrations(ctx, src.Node)
			if err != nil {
				return false, err
			}
			for _, e := range ms {
				if e.Operation == "EXPORT" && e.Target == dst.ID && sameRanges(e.SlotRanges, want) && !known[e.id()] {
					final = e
					return e.terminal(), fmt.Errorf("migration %s", e.State)
				}
			}
			return false, errors.New("migration not listed yet")
		})
		if err != nil {
			return model.NewOpError(src.Name, "migrateslots-wait", err)
		}
		if final.State == "success" {
			a.logf("atomic migration of %d slots (%d keys) %s -> %s: success", model.CountSlots(m.Slots), keys, src.Name, dst.Name)
			t.addAtomic(model.CountSlots(m.Slots), keys)
			return nil
		}
		// The source only says the target dropped the link; the target's entry says why (a
		// refused command, say, when the replication user may not write the keys).
		why := final.Message
		if ms, err := a.slotMigrations(ctx, dst.Node); err == nil {
			for _, e := range ms {
				if e.Operation == "IMPORT" && e.Source == src.ID && sameRanges(e.SlotRanges, want) && e.terminal() && e.Message != "" {
					why = final.Message + "; target: " + e.Message
				}
			}
		}
		a.logf("atomic migration of %d slots %s -> %s (attempt %d): %s: %s", model.CountSlots(m.Slots), src.Name, dst.Name, attempt+1, final.State, why)
		lastErr = model.NewOpError(src.Name, "migrateslots", fmt.Errorf("atomic migration to %s %s: %s", dst.Name, final.State, why))
	}
	// Fall back to the key-by-key path for whatever src still owns of this move, once the
	// target has ended its side of the failed migration: while it still lists the import as
	// running it refuses SETSLOT IMPORTING ("Slot import in progress").
	a.logf("moving %s -> %s key by key after %d failed atomic migrations: %v", src.Name, dst.Name, a.opts.AtomicRetries, lastErr)
	if err := a.waitImportEnded(ctx, dst.Node, src.ID); err != nil {
		return errors.Join(lastErr, err)
	}
	cur := a.observeOne(ctx, src.Node)
	if !cur.Reachable {
		return model.NewOpError(src.Name, "migrateslots-fallback", errors.Join(lastErr, cur.Err))
	}
	dcur := a.observeOne(ctx, dst.Node)
	owns := model.SlotSet(cur.Slots)
	var rest []int
	for _, s := range model.ExpandSlots(m.Slots) {
		if owns[s] {
			rest = append(rest, s)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return a.moveSlotsLegacy(ctx, snap, &cur, &dcur, rest, t)
}

// waitImportEnded waits until dst lists no import from the node srcID that is still running:
// a failed migration ends on the source first, and the target cleans its side up after.
func (a *Admin) waitImportEnded(ctx context.Context, dst model.Node, srcID string) error {
	return a.waitFor(ctx, "import-ended", rebalanceTimeout, func() (bool, error) {
		ms, err := a.slotMigrations(ctx, dst)
		if err != nil {
			return false, err
		}
		for _, m := range ms {
			if m.Operation == "IMPORT" && m.Source == srcID && !m.terminal() {
				return false, fmt.Errorf("%s: import of %s still %s", dst.Name, m.SlotRanges, m.State)
			}
		}
		return true, nil
	})
}

// countKeys counts the keys n holds in slots (CLUSTER COUNTKEYSINSLOT, pipelined).
func (a *Admin) countKeys(ctx context.Context, n model.Node, slots []model.SlotRange) (int, error) {
	var cmds [][]string
	for _, s := range model.ExpandSlots(slots) {
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
			return 0, model.NewOpError(n.Name, "countkeysinslot", err)
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
