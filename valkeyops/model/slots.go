package model

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// SlotCount is the number of hash slots of a Valkey cluster.
const SlotCount = 16384

// SlotRange is an inclusive range of hash slots.
type SlotRange struct{ Start, End int }

// Len is the number of slots in the range.
func (r SlotRange) Len() int { return r.End - r.Start + 1 }

func (r SlotRange) String() string {
	if r.Start == r.End {
		return strconv.Itoa(r.Start)
	}
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// EvenRanges splits the slot space into n contiguous ranges whose sizes differ by at most one;
// range i belongs to shard i.
func EvenRanges(n int) []SlotRange {
	if n <= 0 {
		return nil
	}
	out := make([]SlotRange, n)
	start := 0
	for i := 0; i < n; i++ {
		size := SlotCount / n
		if i < SlotCount%n {
			size++
		}
		out[i] = SlotRange{start, start + size - 1}
		start += size
	}
	return out
}

// CountSlots sums the lengths of ranges.
func CountSlots(rs []SlotRange) int {
	n := 0
	for _, r := range rs {
		n += r.Len()
	}
	return n
}

// ExpandSlots lists every slot of the ranges.
func ExpandSlots(rs []SlotRange) []int {
	out := make([]int, 0, CountSlots(rs))
	for _, r := range rs {
		for s := r.Start; s <= r.End; s++ {
			out = append(out, s)
		}
	}
	return out
}

// CompactSlots turns slots (any order, duplicates allowed) into sorted, merged ranges.
func CompactSlots(slots []int) []SlotRange {
	if len(slots) == 0 {
		return nil
	}
	s := append([]int(nil), slots...)
	sort.Ints(s)
	var out []SlotRange
	cur := SlotRange{s[0], s[0]}
	for _, v := range s[1:] {
		switch {
		case v == cur.End || v == cur.End+1:
			cur.End = v
		default:
			out = append(out, cur)
			cur = SlotRange{v, v}
		}
	}
	return append(out, cur)
}

// FormatRanges renders ranges like "0-5460 10923".
func FormatRanges(rs []SlotRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, " ")
}

// SlotSet is the slots of the ranges as a set.
func SlotSet(rs []SlotRange) map[int]bool {
	out := make(map[int]bool, CountSlots(rs))
	for _, r := range rs {
		for s := r.Start; s <= r.End; s++ {
			out[s] = true
		}
	}
	return out
}

// OwnsAny reports whether the ranges hold any of slots.
func OwnsAny(rs []SlotRange, slots []int) bool {
	set := SlotSet(rs)
	for _, s := range slots {
		if set[s] {
			return true
		}
	}
	return false
}

// ParseRanges reads ranges as SlotRange.String writes them ("0-5460", "10923"): a backup's
// manifest records a shard's slots this way.
func ParseRanges(ss []string) ([]SlotRange, error) {
	out := make([]SlotRange, 0, len(ss))
	for _, s := range ss {
		lo, hi, found := strings.Cut(s, "-")
		if !found {
			hi = lo
		}
		start, err1 := strconv.Atoi(lo)
		end, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || start < 0 || end >= SlotCount || start > end {
			return nil, fmt.Errorf("%q is not a slot range (N or N-M, within 0-%d)", s, SlotCount-1)
		}
		out = append(out, SlotRange{start, end})
	}
	return out, nil
}
