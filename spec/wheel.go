package spec

import "time"

// Wheel is a Carousel timing wheel (Saeed et al., SIGCOMM 2017), the
// rate limiter eRPC puts congested sessions' packets in: slots of a
// fixed width, a packet inserted into the slot of its send time (never
// before the slot being drained, never past the horizon), the slots up
// to now drained once per batch. Items are opaque uint32s (the caller's
// packet handles). Its storage is allocated once, by NewWheel: Insert
// and Drain allocate nothing.
type Wheel struct {
	width        time.Duration
	heads, tails []int32 // per slot: first and last node, -1 empty
	next         []int32 // per node: the next in its slot or the free list
	items        []uint32
	free         int32
	cur          int64 // absolute index of the next slot to drain
	n            int
}

// NewWheel returns a wheel of slots slots of width each, holding up to
// capacity items.
func NewWheel(width time.Duration, slots, capacity int) *Wheel {
	w := &Wheel{width: max(width, 1), heads: make([]int32, max(slots, 1)), tails: make([]int32, max(slots, 1)),
		next: make([]int32, capacity), items: make([]uint32, capacity), free: -1}
	for i := range w.heads {
		w.heads[i], w.tails[i] = -1, -1
	}
	for i := capacity - 1; i >= 0; i-- {
		w.next[i], w.free = w.free, int32(i)
	}
	return w
}

// Len is how many items wait.
func (w *Wheel) Len() int { return w.n }

// Horizon is the furthest ahead of the drain an item can be scheduled.
func (w *Wheel) Horizon() time.Duration { return time.Duration(len(w.heads)-1) * w.width }

// Insert schedules item, at now, to leave at at; false when the wheel
// is full. An item due before the slot being drained goes in that slot;
// one past the horizon in the last slot of it.
func (w *Wheel) Insert(now, at time.Duration, item uint32) bool {
	if w.free < 0 {
		return false
	}
	if w.n == 0 {
		w.cur = max(w.cur, int64(now/w.width)) // an empty wheel's cursor catches up with now
	}
	abs := int64(at / w.width)
	abs = min(max(abs, w.cur), w.cur+int64(len(w.heads))-1)
	s := int(abs % int64(len(w.heads)))
	nd := w.free
	w.free = w.next[nd]
	w.items[nd], w.next[nd] = item, -1
	if w.tails[s] < 0 {
		w.heads[s] = nd
	} else {
		w.next[w.tails[s]] = nd
	}
	w.tails[s] = nd
	w.n++
	return true
}

// Drain appends the items due by now to out, slot by slot and in
// insertion order within one, and returns it; it stops early when out
// is full (the rest stays for the next call).
func (w *Wheel) Drain(now time.Duration, out []uint32) []uint32 {
	target := int64(now / w.width)
	for w.cur <= target && w.n > 0 {
		s := int(w.cur % int64(len(w.heads)))
		for w.heads[s] >= 0 {
			if len(out) == cap(out) {
				return out
			}
			nd := w.heads[s]
			out = append(out, w.items[nd])
			w.heads[s] = w.next[nd]
			w.next[nd], w.free = w.free, nd
			w.n--
		}
		w.tails[s] = -1
		w.cur++
	}
	if w.n == 0 && w.cur <= target {
		w.cur = target + 1
	}
	return out
}

// Next is when the earliest waiting item is due (the start of its
// slot); false when none waits.
func (w *Wheel) Next() (time.Duration, bool) {
	if w.n == 0 {
		return 0, false
	}
	for i := range int64(len(w.heads)) {
		if w.heads[int((w.cur+i)%int64(len(w.heads)))] >= 0 {
			return time.Duration(w.cur+i) * w.width, true
		}
	}
	return 0, false // unreachable while n counts the nodes in slots
}
