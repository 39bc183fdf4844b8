package oracle_test

import (
	"errors"
	"math"
	"testing"

	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/oracle/oracletest"
	"github.com/seqd/seqd/spec"
)

func ts(ms int64, logical uint32) uint64 { return spec.HybridValue(ms, logical) }

// step is one action on a Counter in a table test. Exactly one of the
// action fields is meaningful, chosen by op.
type step struct {
	op   string // "claim", "at" (set clock), "mark" (SetMark), "floor"
	n    int
	v    uint64
	ms   int64
	want uint64 // claim: first value
	err  error  // claim or floor: wanted error
}

func claim(n int, want uint64) step     { return step{op: "claim", n: n, want: want} }
func claimErr(n int, err error) step    { return step{op: "claim", n: n, err: err} }
func at(ms int64) step                  { return step{op: "at", ms: ms} }
func setMark(m uint64) step             { return step{op: "mark", v: m} }
func floor(v uint64) step               { return step{op: "floor", v: v} }
func floorErr(v uint64, err error) step { return step{op: "floor", v: v, err: err} }

func TestCounterClaim(t *testing.T) {
	const T = 1_700_000_000_000
	const big = math.MaxUint64 >> 1
	tests := []struct {
		name      string
		format    spec.Format
		steps     []step
		stalls    uint64
		stepsBack uint64
		current   uint64
	}{
		{
			name:    "hybrid starts at now with logical 0",
			steps:   []step{at(T), setMark(big), claim(1, ts(T, 0)), claim(3, ts(T, 1)), claim(1, ts(T, 4))},
			current: ts(T, 4),
		},
		{
			name:    "hybrid jumps to a later millisecond",
			steps:   []step{at(T), setMark(big), claim(5, ts(T, 0)), at(T + 7), claim(1, ts(T+7, 0))},
			current: ts(T+7, 0),
		},
		{
			name: "hybrid logical overflow carries into the next millisecond without waiting",
			steps: []step{at(T), setMark(big), claim(spec.HybridLogicalMask, ts(T, 0)),
				claim(2, ts(T, spec.HybridLogicalMask)), claim(1, ts(T+1, 1)), at(T + 1), claim(1, ts(T+1, 2))},
			current: ts(T+1, 2),
		},
		{
			name: "hybrid clock step back is counted and never lowers values",
			steps: []step{at(T), setMark(big), claim(1, ts(T, 0)), at(T - 500), claim(1, ts(T, 1)),
				at(T - 400), claim(1, ts(T, 2)), at(T + 1), claim(1, ts(T+1, 0)), at(T), claim(1, ts(T+1, 1))},
			stepsBack: 2,
			current:   ts(T+1, 1),
		},
		{
			name:    "hybrid clock before 1970 still hands out above zero",
			steps:   []step{at(-5), setMark(100), claim(1, 1), claim(2, 2), at(0), claim(1, 4)},
			current: 4,
		},
		{
			name: "hybrid mark crossing stalls without reserving",
			steps: []step{at(T), setMark(ts(T, 10)), claim(10, ts(T, 0)), claimErr(2, oracle.ErrBehind),
				claim(1, ts(T, 10)), claimErr(1, oracle.ErrBehind), setMark(ts(T, 12)), claim(2, ts(T, 11))},
			stalls:  2,
			current: ts(T, 12),
		},
		{
			name:    "hybrid clock past the mark stalls",
			steps:   []step{at(T), setMark(ts(T, 5)), claim(1, ts(T, 0)), at(T + 1), claimErr(1, oracle.ErrBehind)},
			stalls:  1,
			current: ts(T, 0),
		},
		{
			name:   "zero mark stalls everything",
			steps:  []step{at(T), claimErr(1, oracle.ErrBehind)},
			stalls: 1,
		},
		{
			name:  "batch size below one",
			steps: []step{at(T), setMark(big), claimErr(0, oracle.ErrBatchSize), claimErr(-1, oracle.ErrBatchSize)},
		},
		{
			name: "hybrid floor raises and never lowers",
			steps: []step{at(T), setMark(big), floor(ts(T+100, 7)), claim(1, ts(T+100, 8)),
				floor(ts(T, 0)), claim(1, ts(T+100, 9))},
			current: ts(T+100, 9),
		},
		{
			name:  "floor at the end of the range is refused",
			steps: []step{floorErr(math.MaxUint64, oracle.ErrRange), floorErr(math.MaxUint64-1<<32, oracle.ErrRange)},
		},
		{
			name:   "counter is dense from 1",
			format: spec.FormatCounter,
			steps: []step{setMark(10), claim(1, 1), claim(4, 2), claim(5, 6), claimErr(1, oracle.ErrBehind),
				setMark(20), claim(1, 11)},
			stalls:  1,
			current: 11,
		},
		{
			name:    "counter ignores the clock",
			format:  spec.FormatCounter,
			steps:   []step{at(T), setMark(10), claim(1, 1), at(T - 1000), claim(1, 2)},
			current: 2,
		},
		{
			name:    "counter batch larger than the headroom stalls",
			format:  spec.FormatCounter,
			steps:   []step{setMark(10), claim(3, 1), claimErr(8, oracle.ErrBehind), claim(7, 4)},
			stalls:  1,
			current: 10,
		},
		{
			name:   "counter floor above the mark stalls until the mark follows",
			format: spec.FormatCounter,
			steps: []step{setMark(100), claim(1, 1), floor(150), claimErr(1, oracle.ErrBehind),
				setMark(50), claimErr(1, oracle.ErrBehind), setMark(200), claim(1, 151), floor(10), claim(1, 152)},
			stalls:  2,
			current: 152,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := oracletest.NewClock(0)
			c := oracle.NewCounter(tt.format, 1<<20, clk.Now)
			for i, s := range tt.steps {
				switch s.op {
				case "at":
					clk.Set(s.ms)
				case "mark":
					c.SetMark(s.v)
				case "floor":
					if err := c.Floor(s.v); !errors.Is(err, s.err) {
						t.Fatalf("step %d: Floor(%d) = %v, want %v", i, s.v, err, s.err)
					}
				case "claim":
					got, err := c.Claim(s.n)
					if !errors.Is(err, s.err) {
						t.Fatalf("step %d: Claim(%d) error %v, want %v", i, s.n, err, s.err)
					}
					if err == nil && got != s.want {
						t.Fatalf("step %d: Claim(%d) = %d (%v), want %d (%v)", i, s.n, got,
							spec.Timestamp(got), s.want, spec.Timestamp(s.want))
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
			}
			if got := c.Stalls(); got != tt.stalls {
				t.Errorf("Stalls() = %d, want %d", got, tt.stalls)
			}
			if got := c.ClockStepsBack(); got != tt.stepsBack {
				t.Errorf("ClockStepsBack() = %d, want %d", got, tt.stepsBack)
			}
			if got := c.Current(); got != tt.current {
				t.Errorf("Current() = %d, want %d", got, tt.current)
			}
		})
	}
}

func TestCounterSetMarkNeverLowers(t *testing.T) {
	c := oracle.NewCounter(spec.FormatCounter, 100, nil)
	if !c.SetMark(100) || c.SetMark(50) || c.SetMark(100) || c.Mark() != 100 {
		t.Fatalf("SetMark: mark %d, want 100 raised once", c.Mark())
	}
	if got := c.Low(); got != 50 {
		t.Errorf("Low() = %d, want 50", got)
	}
}

func TestCounterPlan(t *testing.T) {
	const T = 1_700_000_000_000
	w := uint64(3000) << spec.HybridLogicalBits
	tests := []struct {
		name   string
		format spec.Format
		window uint64
		now    int64
		mark   uint64
		floor  uint64
		want   oracle.Plan
	}{
		{"counter fresh", spec.FormatCounter, 100, 0, 0, 0, oracle.Plan{Target: 100, Due: true}},
		{"counter plenty of headroom", spec.FormatCounter, 100, 0, 100, 40, oracle.Plan{Target: 140}},
		{"counter exactly half left", spec.FormatCounter, 100, 0, 100, 50, oracle.Plan{Target: 150}},
		{"counter under half left", spec.FormatCounter, 100, 0, 100, 51, oracle.Plan{Target: 151, Due: true}},
		{"counter floor above mark", spec.FormatCounter, 100, 0, 100, 500, oracle.Plan{Target: 600, Due: true}},
		{"hybrid fresh", spec.FormatHybrid, w, T, 0, 0, oracle.Plan{Target: ts(T+3000, 0), Due: true, Now: T}},
		{"hybrid waits for the clock", spec.FormatHybrid, w, T, ts(T+3000, 0), 0,
			oracle.Plan{Target: ts(T+3000, 0), Now: T, Wake: T + 1501}},
		{"hybrid at half", spec.FormatHybrid, w, T + 1500, ts(T+3000, 0), 0,
			oracle.Plan{Target: ts(T+4500, 0), Now: T + 1500, Wake: T + 1501}},
		{"hybrid under half", spec.FormatHybrid, w, T + 1501, ts(T+3000, 0), 0,
			oracle.Plan{Target: ts(T+4501, 0), Due: true, Now: T + 1501}},
		{"hybrid values ahead of the clock", spec.FormatHybrid, w, T, ts(T+3000, 0), ts(T+2000, 0),
			oracle.Plan{Target: ts(T+5000, 0), Due: true, Now: T}},
		{"end of range", spec.FormatCounter, 100, 0, math.MaxUint64 - 1<<32, math.MaxUint64 - 1<<32 - 1,
			oracle.Plan{Target: math.MaxUint64 - 1<<32}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := oracletest.NewClock(tt.now)
			c := oracle.NewCounter(tt.format, tt.window, clk.Now)
			c.SetMark(tt.mark)
			if tt.floor != 0 {
				if err := c.Floor(tt.floor); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.Plan(); got != tt.want {
				t.Errorf("Plan() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCounterClaimAt: a claim with the caller's clock reading takes its
// floor from that reading, not from the counter's clock; stays above every
// value before it whatever the reading; and counts no step backward for a
// reading older than one seen before (another goroutine's may be newer).
func TestCounterClaimAt(t *testing.T) {
	clock := int64(1_000)
	c := oracle.NewCounter(spec.FormatHybrid, 1<<40, func() int64 { return clock })
	c.SetMark(ts(1_000_000, 0))
	if got, err := c.ClaimAt(2, 5_000); err != nil || got != ts(5_000, 0) {
		t.Fatalf("ClaimAt(2, 5000) = %d, %v; want %d (the floor of the reading, not of the clock at 1000)", got, err, ts(5_000, 0))
	}
	if got, err := c.ClaimAt(1, 4_000); err != nil || got != ts(5_000, 2) {
		t.Fatalf("ClaimAt(1, 4000) = %d, %v; want %d (above the values before)", got, err, ts(5_000, 2))
	}
	if got := c.ClockStepsBack(); got != 0 {
		t.Errorf("ClockStepsBack() = %d after an older reading passed in, want 0", got)
	}
	if got, err := c.Claim(1); err != nil || got != ts(5_000, 3) {
		t.Fatalf("Claim(1) = %d, %v; want %d", got, err, ts(5_000, 3))
	}
	clock = 900
	c.Claim(1)
	if got := c.ClockStepsBack(); got != 1 {
		t.Errorf("ClockStepsBack() = %d after the counter's clock stepped back, want 1", got)
	}
	f := oracle.NewCounter(spec.FormatCounter, 100, nil)
	f.SetMark(100)
	if got, err := f.ClaimAt(3, 5_000); err != nil || got != 1 {
		t.Fatalf("counter format: ClaimAt(3, 5000) = %d, %v; want 1 (the reading ignored)", got, err)
	}
}
