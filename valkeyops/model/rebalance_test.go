package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// applyMoves replays a plan on an ownership map, failing if a move takes a slot its source
// does not own.
func applyMoves(t *testing.T, owned map[string][]SlotRange, moves []Move) map[string]int {
	t.Helper()
	owner := map[int]string{}
	for id, rs := range owned {
		for _, s := range ExpandSlots(rs) {
			owner[s] = id
		}
	}
	for _, m := range moves {
		require.NotEqual(t, m.From, m.To)
		for _, s := range ExpandSlots(m.Slots) {
			require.Equal(t, m.From, owner[s], "slot %d moved from a non-owner", s)
			owner[s] = m.To
		}
	}
	counts := map[string]int{}
	for _, id := range owner {
		counts[id]++
	}
	return counts
}

func TestPlanRebalance(t *testing.T) {
	r3 := EvenRanges(3)
	r4 := EvenRanges(4)
	tests := []struct {
		name      string
		owned     map[string][]SlotRange
		targets   []string
		wantMoved int            // slots moved in total
		wantCount map[string]int // final slot counts (absent = 0)
		wantErr   bool
	}{
		{
			name:      "already balanced: no moves",
			owned:     map[string][]SlotRange{"a": {r3[0]}, "b": {r3[1]}, "c": {r3[2]}},
			targets:   []string{"a", "b", "c"},
			wantCount: map[string]int{"a": 5462, "b": 5461, "c": 5461},
		},
		{
			name:      "scale out 3 -> 4: every old primary gives to the new one",
			owned:     map[string][]SlotRange{"a": {r3[0]}, "b": {r3[1]}, "c": {r3[2]}},
			targets:   []string{"a", "b", "c", "d"},
			wantMoved: 4096,
			wantCount: map[string]int{"a": 4096, "b": 4096, "c": 4096, "d": 4096},
		},
		{
			name:      "scale in 4 -> 3: drained slots spread over all remaining",
			owned:     map[string][]SlotRange{"a": {r4[0]}, "b": {r4[1]}, "c": {r4[2]}, "d": {r4[3]}},
			targets:   []string{"a", "b", "c"},
			wantMoved: 4096,
			wantCount: map[string]int{"a": 5462, "b": 5461, "c": 5461},
		},
		{
			name:      "drain two at once",
			owned:     map[string][]SlotRange{"a": {{0, 8191}}, "b": {{8192, 16383}}},
			targets:   []string{"c", "d"},
			wantMoved: 16384,
			wantCount: map[string]int{"c": 8192, "d": 8192},
		},
		{
			name:      "uneven after partial run",
			owned:     map[string][]SlotRange{"a": {{0, 9999}}, "b": {{10000, 16383}}, "c": nil},
			targets:   []string{"a", "b", "c"},
			wantMoved: 5461, // a gives 4538, b gives 923
			wantCount: map[string]int{"a": 5462, "b": 5461, "c": 5461},
		},
		{name: "no targets", owned: map[string][]SlotRange{"a": {{0, 16383}}}, wantErr: true},
		{name: "double ownership", owned: map[string][]SlotRange{"a": {{0, 10}}, "b": {{5, 20}}}, targets: []string{"a", "b"}, wantErr: true},
		{name: "duplicate target", owned: map[string][]SlotRange{"a": {{0, 10}}}, targets: []string{"a", "a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			moves, err := PlanRebalance(tt.owned, tt.targets)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			moved := 0
			for _, m := range moves {
				moved += CountSlots(m.Slots)
			}
			assert.Equal(t, tt.wantMoved, moved, "slots moved")
			assert.Equal(t, tt.wantCount, applyMoves(t, tt.owned, moves))
		})
	}
}

func TestPlanRebalanceKeepsRangesContiguous(t *testing.T) {
	r3 := EvenRanges(3)
	moves, err := PlanRebalance(map[string][]SlotRange{"a": {r3[0]}, "b": {r3[1]}, "c": {r3[2]}}, []string{"a", "b", "c", "d"})
	require.NoError(t, err)
	for _, m := range moves {
		assert.Len(t, m.Slots, 1, "move %s->%s takes one contiguous range from the donor's end", m.From, m.To)
	}
}

func TestScheduleRounds(t *testing.T) {
	tests := []struct {
		name          string
		moves         []Move
		sharedTargets bool
		rounds        int
	}{
		{"disjoint pairs run together", []Move{{From: "a", To: "b"}, {From: "c", To: "d"}}, false, 1},
		{"shared target serialises", []Move{{From: "a", To: "d"}, {From: "b", To: "d"}, {From: "c", To: "d"}}, false, 3},
		{"shared target runs together when allowed", []Move{{From: "a", To: "d"}, {From: "b", To: "d"}, {From: "c", To: "d"}}, true, 1},
		{"one source never feeds two targets at once", []Move{{From: "a", To: "b"}, {From: "a", To: "c"}}, true, 2},
		{"chain", []Move{{From: "a", To: "b"}, {From: "b", To: "c"}, {From: "d", To: "e"}}, false, 2},
		{"chain with shared targets", []Move{{From: "a", To: "b"}, {From: "b", To: "c"}, {From: "d", To: "e"}}, true, 2},
		{"none", nil, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rounds := ScheduleRounds(tt.moves, tt.sharedTargets)
			assert.Len(t, rounds, tt.rounds)
			total := 0
			for _, r := range rounds {
				source, target := map[string]bool{}, map[string]bool{}
				for _, m := range r {
					assert.False(t, source[m.From] || target[m.From] || source[m.To], "a source twice, or a node both source and target, in one round")
					assert.False(t, target[m.To] && !tt.sharedTargets, "a target twice in one round")
					source[m.From], target[m.To] = true, true
				}
				total += len(r)
			}
			assert.Equal(t, len(tt.moves), total)
		})
	}
}
