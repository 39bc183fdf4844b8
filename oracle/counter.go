package oracle

import (
	"math"
	"sync/atomic"

	"github.com/seqd/seqd/spec"
)

// cacheLine pads hot words apart; 128 covers adjacent-line prefetching.
const cacheLine = 128

// Counter is the oracle's pure state machine: the last value handed out and
// the persisted mark it may not cross. It has no goroutines and does no I/O;
// time comes from the injected clock. All methods are safe for concurrent
// use. The caller (Oracle) persists marks and reports them with SetMark
// only once they are durable.
type Counter struct {
	last atomic.Uint64 // the one contended word: last value handed out
	_    [cacheLine - 8]byte

	// Read-mostly: written only by SetMark.
	mark   atomic.Uint64 // values above mark are never handed out
	low    atomic.Uint64 // a claim reaching low should wake the persister
	format spec.Format
	window uint64 // in values: count, or milliseconds<<spec.HybridLogicalBits
	clock  func() int64
	_      [cacheLine - 48]byte

	lastNow atomic.Int64 // last clock reading observed, for step detection
	_       [cacheLine - 8]byte

	stalls    atomic.Uint64
	stepsBack atomic.Uint64
}

// NewCounter returns a Counter at zero with a zero mark, so every claim
// returns ErrBehind until the first SetMark. window is the headroom the
// persister keeps, in values (for hybrid, milliseconds<<spec.HybridLogicalBits); it
// must be at least 2. clock returns Unix milliseconds; the counter format
// never calls it. A zero f means spec.FormatHybrid.
func NewCounter(f spec.Format, window uint64, clock func() int64) *Counter {
	if f == 0 {
		f = spec.FormatHybrid
	}
	c := &Counter{format: f, window: max(window, 2), clock: clock}
	c.lastNow.Store(math.MinInt64) // nothing observed yet
	return c
}

// Format returns the counter's format.
func (c *Counter) Format() spec.Format { return c.format }

// Claim reserves n consecutive values and returns the first. They are
// greater than every value returned before and, for hybrid, at or above
// now<<spec.HybridLogicalBits. If the last one would be above the mark, Claim counts a
// stall and returns ErrBehind without reserving anything. n must be at
// least 1.
//
// The common case is one atomic read-modify-write on the shared word: a
// CAS for hybrid, an add for counter.
func (c *Counter) Claim(n int) (uint64, error) { return c.claim(n, 0, false) }

// ClaimAt is Claim for a caller that read the wall clock itself: now, in
// Unix milliseconds, stands for the counter's clock (hybrid only; the
// counter format ignores it). A reading the caller took before another
// goroutine's is no step backward: ClaimAt never counts one (Claim and
// Plan do).
func (c *Counter) ClaimAt(n int, now int64) (uint64, error) { return c.claim(n, now, true) }

func (c *Counter) claim(n int, now int64, at bool) (uint64, error) {
	if n < 1 {
		return 0, ErrBatchSize
	}
	k := uint64(n - 1)
	if c.format == spec.FormatCounter {
		m := c.mark.Load()
		cur := c.last.Load()
		if cur >= m || k >= m-cur {
			c.stalls.Add(1)
			return 0, ErrBehind
		}
		last := c.last.Add(k + 1)
		if last > c.mark.Load() {
			// Concurrent claims raced past the pre-check. These values
			// are skipped, never handed out: the counter is dense except
			// across a stall.
			c.stalls.Add(1)
			return 0, ErrBehind
		}
		return last - k, nil
	}
	if !at {
		now = c.observe()
	}
	floor := spec.HybridFloor(now)
	for {
		cur := c.last.Load()
		m := c.mark.Load()
		if cur >= m {
			c.stalls.Add(1)
			return 0, ErrBehind
		}
		first := max(cur+1, floor)
		if first > m || k > m-first {
			c.stalls.Add(1)
			return 0, ErrBehind
		}
		if c.last.CompareAndSwap(cur, first+k) {
			return first, nil
		}
	}
}

// observe reads the clock and counts a step backward. It loads the last
// reading BEFORE reading the clock: whoever stored that reading took it
// earlier, so with a clock that never steps back our reading cannot be
// smaller, and a racing goroutine is never mistaken for a step. A step is
// counted by the one goroutine whose CAS records the smaller reading.
func (c *Counter) observe() int64 {
	ln := c.lastNow.Load()
	now := c.clock()
	if now != ln && c.lastNow.CompareAndSwap(ln, now) && now < ln {
		c.stepsBack.Add(1)
	}
	return now
}

// Current returns the last value handed out (0 before the first). It is an
// upper bound: in the counter format a claim that lost a race at the mark
// moves it past values that were skipped, never handed out.
func (c *Counter) Current() uint64 { return c.last.Load() }

// Mark returns the mark set by the last SetMark.
func (c *Counter) Mark() uint64 { return c.mark.Load() }

// SetMark raises the mark to m, which the caller has made durable. It
// returns false, changing nothing, if m is not above the current mark.
// Only one goroutine (the persister) calls SetMark.
func (c *Counter) SetMark(m uint64) bool {
	m = min(m, limit)
	for {
		cur := c.mark.Load()
		if m <= cur {
			return false
		}
		if c.mark.CompareAndSwap(cur, m) {
			c.low.Store(m - min(m, c.window/2))
			return true
		}
	}
}

// Low returns the value at which the headroom left below the mark is half
// the window: a claim ending at or above it should wake the persister.
func (c *Counter) Low() uint64 { return c.low.Load() }

// Floor raises the counter so that the next claim returns a value above v.
// It never lowers it. It returns ErrRange if v is at or above the highest
// mark the oracle can persist.
func (c *Counter) Floor(v uint64) error {
	if v >= limit {
		return ErrRange
	}
	for {
		cur := c.last.Load()
		if cur >= v || c.last.CompareAndSwap(cur, v) {
			return nil
		}
	}
}

// Stalls returns how many claims returned ErrBehind.
func (c *Counter) Stalls() uint64 { return c.stalls.Load() }

// ClockStepsBack returns how many times the clock was seen to step backward.
func (c *Counter) ClockStepsBack() uint64 { return c.stepsBack.Load() }

// Plan is what the persister should do next.
type Plan struct {
	// Target is the mark to save: the window above the higher of the
	// current value and, for hybrid, the clock.
	Target uint64
	// Due reports that the headroom below the mark is under half the
	// window, so Target should be saved now.
	Due bool
	// Now is the clock reading the plan used (hybrid only).
	Now int64
	// Wake is when, in Unix milliseconds, the plan becomes due through the
	// clock alone (hybrid only; 0 for counter or when Due).
	Wake int64
}

// Plan computes the next mark to persist and whether it is due.
func (c *Counter) Plan() Plan {
	var p Plan
	base := c.last.Load()
	if c.format == spec.FormatHybrid {
		p.Now = c.observe()
		base = max(base, spec.HybridFloor(p.Now))
	}
	m := c.mark.Load()
	half := c.window / 2
	p.Target = limit
	if base < limit {
		p.Target = base + min(c.window, limit-base)
	}
	low := base >= m || m-base < half
	p.Due = low && p.Target > m // not due at the end of the range
	if !low && c.format == spec.FormatHybrid {
		p.Wake = int64((m-half)>>spec.HybridLogicalBits) + 1
	}
	return p
}
