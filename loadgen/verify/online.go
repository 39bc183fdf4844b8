package verify

import "slices"

// Online checks values as the answers carrying them arrive, for a load
// generator that notes, at each send, the floors the answer must beat:
// the largest value received so far over all clients (Floor) and the
// largest its own client received. Real-time order and per-client order
// are then exact, with no clock readings; uniqueness is checked at the
// end over the values kept. It never allocates after NewOnline: the wire
// engine runs it on its hot path.
type Online struct {
	max        uint64
	values     []uint64
	Unverified uint64 // values beyond the buffer, not checked for uniqueness
}

// NewOnline returns a checker that keeps up to capacity values, with
// their pages touched now so that no fault lands in a measurement.
func NewOnline(capacity int) *Online {
	v := make([]uint64, capacity)
	for i := 0; i < len(v); i += 512 {
		v[i] = 1
	}
	return &Online{values: v[:0]}
}

// Floor is the largest value received so far: every request sent now
// must get a larger one.
func (c *Online) Floor() uint64 { return c.max }

// Check checks v, the value of an answer to a request sent when Floor
// was floor and its own client's largest value was own (0: none yet),
// and keeps it. It returns the promise v breaks and true, or false when
// v keeps them; a value that breaks one is not kept. The caller makes v
// the floor of its client's later sends only once it passed.
func (c *Online) Check(floor, own, v uint64) (Kind, bool) {
	if v <= own && own != 0 {
		return Regression, true
	}
	if v <= floor && floor != 0 {
		return RealTime, true
	}
	if len(c.values) < cap(c.values) {
		c.values = append(c.values, v)
	} else {
		c.Unverified++
	}
	c.max = max(c.max, v)
	return 0, false
}

// Reset forgets the values kept (not the floor: a server's values only
// grow).
func (c *Online) Reset() { c.values, c.Unverified = c.values[:0], 0 }

// Kept is the number of values kept for the uniqueness check.
func (c *Online) Kept() int { return len(c.values) }

// Duplicates sorts the values kept and returns how many repeat one
// before them (each a Duplicate), and the first that does.
func (c *Online) Duplicates() (n int, first uint64) {
	slices.Sort(c.values)
	for i := 1; i < len(c.values); i++ {
		if c.values[i] == c.values[i-1] {
			if n == 0 {
				first = c.values[i]
			}
			n++
		}
	}
	return n, first
}
