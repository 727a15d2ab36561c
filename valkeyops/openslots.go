package valkeyops

import (
	"context"
	"sort"
	"strconv"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// finishOpenSlots completes every slot some primary reports importing or migrating, moving
// the rest of its keys to the importing side: after a crash the keys may already be split
// between both ends, so finishing is the direction that never strands a key.
func (a *Admin) finishOpenSlots(ctx context.Context, snap *model.Snapshot, t *moveTally) (bool, error) {
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
		case src != nil && dst != nil && dst.Role == model.RolePrimary:
			if err := a.moveSlotsLegacy(ctx, snap, src, dst, slots, t); err != nil {
				return true, err
			}
		case src != nil && src.Role == model.RolePrimary:
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

func (a *Admin) setStable(ctx context.Context, n model.Node, slots []int) error {
	cmds := make([][]string, len(slots))
	for i, s := range slots {
		cmds[i] = []string{"CLUSTER", "SETSLOT", strconv.Itoa(s), "STABLE"}
	}
	return a.multiSpread(ctx, n, "setslot-stable", cmds)
}
