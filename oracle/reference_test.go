package oracle_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/oracle/oracletest"
	"github.com/seqd/seqd/spec"
)

// refCounter is a deliberately simple, single-threaded model of Counter:
// no atomics, no cleverness, the rules written down as plainly as possible.
type refCounter struct {
	format    spec.Format
	window    uint64
	last      uint64
	mark      uint64
	lastNow   int64
	seen      bool
	stalls    uint64
	stepsBack uint64
}

func (r *refCounter) observe(now int64) {
	if r.seen && now < r.lastNow {
		r.stepsBack++
	}
	r.lastNow, r.seen = now, true
}

func (r *refCounter) clockFloor(now int64) uint64 {
	if now <= 0 {
		return 0
	}
	return uint64(min(now, spec.HybridMaxPhysical)) << spec.HybridLogicalBits
}

func (r *refCounter) claim(n int, now int64) (uint64, error) {
	if n < 1 {
		return 0, oracle.ErrBatchSize
	}
	first := r.last + 1
	if r.format == spec.FormatHybrid {
		r.observe(now)
		first = max(first, r.clockFloor(now))
	}
	last := first + uint64(n) - 1
	if last > r.mark {
		r.stalls++
		return 0, oracle.ErrBehind
	}
	r.last = last
	return first, nil
}

func (r *refCounter) plan(now int64) (target uint64, due bool) {
	base := r.last
	if r.format == spec.FormatHybrid {
		r.observe(now)
		base = max(base, r.clockFloor(now))
	}
	target = base + r.window
	headroom := uint64(0)
	if r.mark > base {
		headroom = r.mark - base
	}
	return target, headroom < r.window/2 && target > r.mark
}

// TestCounterMatchesReference drives Counter and refCounter with the same
// random sequences of claims, clock moves, marks and floors.
func TestCounterMatchesReference(t *testing.T) {
	for _, format := range []spec.Format{spec.FormatHybrid, spec.FormatCounter} {
		for seed := uint64(1); seed <= 20; seed++ {
			t.Run(format.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 0x5eed))
				window := uint64(1000)
				if format == spec.FormatHybrid {
					window = 20 << spec.HybridLogicalBits
				}
				start := int64(1_700_000_000_000)
				clk := oracletest.NewClock(start)
				c := oracle.NewCounter(format, window, clk.Now)
				ref := &refCounter{format: format, window: window}
				for i := range 20000 {
					switch op := rng.IntN(100); {
					case op < 70: // claim, sometimes a large batch to overflow the logical part
						n := rng.IntN(70)
						if rng.IntN(50) == 0 {
							n = rng.IntN(1 << (spec.HybridLogicalBits + 1))
						}
						got, err := c.Claim(n)
						want, werr := ref.claim(n, clk.Now())
						if got != want || !errors.Is(err, werr) {
							t.Fatalf("seed %d op %d: Claim(%d) = %d, %v; reference %d, %v", seed, i, n, got, err, want, werr)
						}
					case op < 80: // clock: mostly forward, sometimes a step back or a jump
						switch r := rng.IntN(20); {
						case r == 0:
							clk.Add(-rng.Int64N(2000))
						case r == 1:
							clk.Add(rng.Int64N(100_000))
						default:
							clk.Add(rng.Int64N(3))
						}
					case op < 93: // the persister's view: plan, then sometimes save
						p := c.Plan()
						wt, wdue := ref.plan(clk.Now())
						if p.Target != wt || p.Due != wdue {
							t.Fatalf("seed %d op %d: Plan() = %+v; reference target %d due %v", seed, i, p, wt, wdue)
						}
						if p.Due && rng.IntN(3) > 0 { // sometimes the save fails
							c.SetMark(p.Target)
							ref.mark = max(ref.mark, p.Target)
						}
					case op < 95: // a floor from elsewhere, below or above the current value
						v := ref.last + uint64(rng.IntN(200)) - 100
						if v > ref.last+1000 { // wrapped below zero
							v = 0
						}
						if err := c.Floor(v); err != nil {
							t.Fatalf("seed %d op %d: Floor(%d): %v", seed, i, v, err)
						}
						ref.last = max(ref.last, v)
					default: // an arbitrary raise of the mark
						m := ref.mark + uint64(rng.IntN(int(window)))
						c.SetMark(m)
						ref.mark = max(ref.mark, m)
					}
					if c.Current() != ref.last || c.Mark() != ref.mark {
						t.Fatalf("seed %d op %d: Current %d Mark %d; reference %d %d", seed, i, c.Current(), c.Mark(), ref.last, ref.mark)
					}
				}
				if c.Stalls() != ref.stalls || c.ClockStepsBack() != ref.stepsBack {
					t.Fatalf("seed %d: stalls %d steps back %d; reference %d %d", seed, c.Stalls(), c.ClockStepsBack(), ref.stalls, ref.stepsBack)
				}
				t.Logf("seed %d: stalls %d, steps back %d, current %d", seed, ref.stalls, ref.stepsBack, ref.last)
			})
		}
	}
}
