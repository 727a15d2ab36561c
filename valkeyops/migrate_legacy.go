package valkeyops

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gomomento/valkey-operator/valkeyops/model"
)

// The key-by-key slot move: SETSLOT IMPORTING/MIGRATING, batched MIGRATE, SETSLOT NODE. It is
// the only path before Valkey 9.0 and the fallback of the atomic one.

// runLegacy executes moves key by key (SETSLOT IMPORTING/MIGRATING + batched MIGRATE).
func (a *Admin) runLegacy(ctx context.Context, snap *model.Snapshot, moves []model.Move, t *moveTally) error {
	return runRounds(moves, true, func(m model.Move) error {
		return a.moveSlotsLegacy(ctx, snap, snap.ByID(m.From), snap.ByID(m.To), model.ExpandSlots(m.Slots), t)
	})
}

// peerAddr is dst's announced host and port as src sees it (what MIGRATE must dial).
func peerAddr(src, dst *model.NodeState) (string, string) {
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
func (a *Admin) moveSlotsLegacy(ctx context.Context, snap *model.Snapshot, src, dst *model.NodeState, slots []int, t *moveTally) error {
	if src == nil || dst == nil {
		return model.NewOpError("", "migrate", fmt.Errorf("%w: move endpoint not observed", model.ErrUnreachable))
	}
	host, port := peerAddr(src, dst)
	srcOwns := model.SlotSet(src.Slots)
	dstOwns := model.SlotSet(dst.Slots)
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
		keys, err := a.migrateKeys(ctx, src.Node, host, port, movable)
		t.addMigrate(0, keys)
		if err != nil {
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
			if !cur.Reachable || model.OwnsAny(cur.Slots, chunk) {
				return err
			}
		}
		t.addMigrate(len(movable), 0)
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
func (a *Admin) claimSlots(ctx context.Context, dst *model.NodeState, slots []int, dstOwns map[int]bool) error {
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
// all slots of a round pipelined, and says how many keys it moved. REPLACE makes a retried
// batch idempotent: while a slot is migrating, the source's copy of a key is the
// authoritative one.
func (a *Admin) migrateKeys(ctx context.Context, src model.Node, host, port string, slots []int) (int, error) {
	moved := 0
	batch := strconv.Itoa(a.opts.MigrateBatch)
	pending := slots
	for len(pending) > 0 {
		get := make([][]string, len(pending))
		for i, s := range pending {
			get[i] = []string{"CLUSTER", "GETKEYSINSLOT", strconv.Itoa(s), batch}
		}
		res, err := a.multi(ctx, src, "getkeysinslot", get)
		if err != nil {
			return moved, err
		}
		var migrate [][]string
		var next []int
		batchKeys := 0
		for i, r := range res {
			keys, err := r.AsStrSlice()
			if err != nil {
				return moved, model.NewOpError(src.Name, "getkeysinslot", err)
			}
			if len(keys) == 0 {
				continue
			}
			cmd := append([]string{"MIGRATE", host, port, "", "0", "15000", "REPLACE", "AUTH2", a.opts.Credentials.Username, a.opts.Credentials.Password, "KEYS"}, keys...)
			migrate = append(migrate, cmd)
			batchKeys += len(keys)
			if len(keys) >= a.opts.MigrateBatch {
				next = append(next, pending[i])
			}
		}
		if _, err := a.multi(ctx, src, "migrate", migrate); err != nil {
			return moved, err
		}
		moved += batchKeys
		pending = next
	}
	return moved, nil
}
