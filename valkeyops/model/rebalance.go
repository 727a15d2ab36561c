package model

import (
	"fmt"
	"sort"
)

// Move is one planned transfer of slots from one primary to another (node IDs).
type Move struct {
	From, To string
	Slots    []SlotRange
}

// PlanRebalance is the pure planner behind valkeyops' Admin.Rebalance. owned maps every
// slot-holding primary's ID to its slots; targets are the primaries that should end with an
// even share (in a stable order). Every owner that is not a target is drained completely,
// spread over the targets rather than onto one (one receiver of a whole drained shard risks
// OOM). Each target keeps what it has up to its share, so no slot moves unless it must, and
// slots leave a donor from the end of its ranges to keep ranges contiguous.
func PlanRebalance(owned map[string][]SlotRange, targets []string) ([]Move, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: no target primaries", ErrInvalidSpec)
	}
	isTarget := map[string]bool{}
	for _, t := range targets {
		if isTarget[t] {
			return nil, fmt.Errorf("%w: duplicate target %s", ErrInvalidSpec, t)
		}
		isTarget[t] = true
	}
	seen := make([]bool, SlotCount)
	total := 0
	for id, rs := range owned {
		for _, s := range ExpandSlots(rs) {
			if s < 0 || s >= SlotCount {
				return nil, fmt.Errorf("%w: slot %d out of range", ErrInvalidSpec, s)
			}
			if seen[s] {
				return nil, fmt.Errorf("%w: slot %d owned twice (last by %s)", ErrInvalidSpec, s, id)
			}
			seen[s] = true
			total++
		}
	}

	// Shares: even split of the assigned slots; the remainder goes to the targets already
	// holding the most, so fewer slots move.
	cur := map[string]int{}
	for _, t := range targets {
		cur[t] = CountSlots(owned[t])
	}
	byHolding := append([]string(nil), targets...)
	sort.SliceStable(byHolding, func(i, j int) bool { return cur[byHolding[i]] > cur[byHolding[j]] })
	want := map[string]int{}
	for i, t := range byHolding {
		want[t] = total / len(targets)
		if i < total%len(targets) {
			want[t]++
		}
	}

	// Donors in a stable order: drained owners first (sorted by ID), then targets over share.
	var drained []string
	for id := range owned {
		if !isTarget[id] && len(owned[id]) > 0 {
			drained = append(drained, id)
		}
	}
	sort.Strings(drained)
	type donor struct {
		id    string
		slots []int
	}
	var donors []donor
	for _, id := range drained {
		donors = append(donors, donor{id, ExpandSlots(owned[id])})
	}
	for _, t := range targets {
		if extra := cur[t] - want[t]; extra > 0 {
			all := ExpandSlots(owned[t])
			donors = append(donors, donor{t, all[len(all)-extra:]})
		}
	}

	need := map[string]int{}
	for _, t := range targets {
		if d := want[t] - cur[t]; d > 0 {
			need[t] = d
		}
	}
	moves := map[[2]string][]int{}
	var order [][2]string
	ti := 0
	for _, d := range donors {
		for len(d.slots) > 0 {
			for ti < len(targets) && need[targets[ti]] == 0 {
				ti++
			}
			if ti == len(targets) {
				return nil, fmt.Errorf("planner: %d slots of %s have no receiver", len(d.slots), d.id)
			}
			t := targets[ti]
			n := min(need[t], len(d.slots))
			key := [2]string{d.id, t}
			if _, ok := moves[key]; !ok {
				order = append(order, key)
			}
			moves[key] = append(moves[key], d.slots[:n]...)
			d.slots = d.slots[n:]
			need[t] -= n
		}
	}
	out := make([]Move, 0, len(order))
	for _, k := range order {
		out = append(out, Move{From: k[0], To: k[1], Slots: CompactSlots(moves[k])})
	}
	return out, nil
}

// ScheduleRounds groups moves into rounds whose moves can run in parallel: no node is the
// source of two moves of a round, nor both a source and a target in it. With sharedTargets a
// node may receive several moves of one round (the key-by-key path: several sources feeding
// one new primary keep it busy, where one at a time leaves it waiting on each source);
// without, every node takes part in one move a round.
func ScheduleRounds(moves []Move, sharedTargets bool) [][]Move {
	var rounds [][]Move
	left := append([]Move(nil), moves...)
	for len(left) > 0 {
		source, target := map[string]bool{}, map[string]bool{}
		var round, rest []Move
		for _, m := range left {
			if source[m.From] || target[m.From] || source[m.To] || (target[m.To] && !sharedTargets) {
				rest = append(rest, m)
				continue
			}
			source[m.From], target[m.To] = true, true
			round = append(round, m)
		}
		rounds = append(rounds, round)
		left = rest
	}
	return rounds
}
