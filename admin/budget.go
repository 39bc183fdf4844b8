package admin

import (
	"fmt"
	"sync"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/spec"
)

// advanceBudget bounds what Advance may do: a rate of calls (a token
// bucket of rate calls, refilled evenly over a minute) and a budget of
// values that all Advances of one window share (fixed windows: the first
// Advance after a window ended starts the next). It is pure: the caller
// passes the time.
//
// A call reserves its step before the backend runs and settles it after,
// so concurrent calls never spend more than the budget together.
type advanceBudget struct {
	budget uint64
	window time.Duration
	rate   int
	format spec.Format

	mu     sync.Mutex
	start  time.Time // the current window's start; zero before the first call
	gen    uint64    // the current window's number, so a late refund skips a new window
	spent  uint64    // steps spent or reserved in the current window
	tokens float64   // calls left in the bucket
	refill time.Time // when tokens was last brought up to date
	primed bool
}

// Kinds of refusal, labels of seqd_admin_advance_refused_total.
const (
	refusedRate   = 0
	refusedBudget = 1
)

var refusedLabels = [...]string{refusedRate: "rate", refusedBudget: "budget"}

func newAdvanceBudget(budget uint64, window time.Duration, rate int, format spec.Format) *advanceBudget {
	return &advanceBudget{budget: budget, window: window, rate: rate, format: format}
}

// reservation is a step taken from the budget, settled by settle.
type reservation struct {
	gen, step uint64
}

// call takes one call from the rate bucket at now, or returns the refusal
// (an error for ResourceExhausted).
func (b *advanceBudget) call(now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.primed {
		b.primed, b.tokens, b.refill = true, float64(b.rate), now
	}
	if el := now.Sub(b.refill); el > 0 {
		b.tokens = min(float64(b.rate), b.tokens+el.Minutes()*float64(b.rate))
		b.refill = now
	}
	if b.tokens < 1 {
		wait := time.Duration((1 - b.tokens) / float64(b.rate) * float64(time.Minute)).Round(time.Millisecond)
		return fmt.Errorf("advance refused: over the rate limit of %d calls a minute; the next call is allowed in %v (seqd -advance-rate)",
			b.rate, max(wait, time.Millisecond))
	}
	b.tokens--
	return nil
}

// reserve takes step values from the window of now, or returns the
// refusal in human units.
func (b *advanceBudget) reserve(now time.Time, step uint64) (reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	left := b.budget - b.spent
	if step > left {
		renew := b.start.Add(b.window).Sub(now).Round(time.Second)
		return reservation{}, fmt.Errorf("advance of %s exceeds the remaining budget of %s (%s per %v; whole again in %v; seqd -advance-budget, -advance-budget-window)",
			b.human(step), b.human(left), b.human(b.budget), b.window, renew)
	}
	b.spent += step
	return reservation{gen: b.gen, step: step}, nil
}

// remaining returns what is left of the budget at now.
func (b *advanceBudget) remaining(now time.Time) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(now)
	return b.budget - b.spent
}

// settle gives back the part of r that was not used (used is the step the
// backend took; 0 when it refused).
func (b *advanceBudget) settle(r reservation, used uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.gen != b.gen || used >= r.step {
		return
	}
	b.spent -= min(b.spent, r.step-used)
}

// roll starts a new window when the current one has ended.
func (b *advanceBudget) roll(now time.Time) {
	if b.start.IsZero() || now.Sub(b.start) >= b.window {
		b.start, b.spent = now, 0
		b.gen++
	}
}

// human renders a number of values in the format's units: a duration for
// hybrid (the physical part: milliseconds << spec.HybridLogicalBits), a
// count for counter.
func (b *advanceBudget) human(v uint64) string { return humanStep(b.format, v) }

// humanStep is adminclient.Step: seqctl prints values and steps alike.
func humanStep(f spec.Format, v uint64) string { return adminclient.Step(f, v) }
