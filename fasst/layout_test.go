package fasst

import (
	"testing"

	"github.com/seqd/seqd/internal/claim"
	"github.com/seqd/seqd/spec"
)

// fakeClaims hands out consecutive values from next, jumping by gap
// before every claim after the first (other workers' claims); refuseAt
// (1-based) refuses that claim.
type fakeClaims struct {
	next, gap uint64
	calls     int
	refuseAt  int
	sizes     []int
}

func (f *fakeClaims) claim(n int) (uint64, bool) {
	f.calls++
	f.sizes = append(f.sizes, n)
	if f.calls == f.refuseAt {
		return 0, false
	}
	if f.calls > 1 {
		f.next += f.gap
	}
	v := f.next
	f.next += uint64(n)
	return v, true
}

// TestLayout checks layout against the rules it must keep, whatever the
// claims return: every placed request gets k values inside one claim, no
// two requests share a value, in the hybrid format no range of k > 1
// values spans a millisecond, no claim exceeds claim.MaxClaim, and the placed
// requests are a prefix.
func TestLayout(t *testing.T) {
	const ms = uint64(spec.HybridMillisecond)
	ks := func(k ...int) []pending {
		r := make([]pending, len(k))
		for i := range k {
			r[i].k = k[i]
		}
		return r
	}
	many := func(n, k int) []int {
		r := make([]int, n)
		for i := range r {
			r[i] = k
		}
		return r
	}
	for _, c := range []struct {
		name        string
		reqs        []pending
		hybrid      bool
		start, gap  uint64
		refuseAt    int
		wantPlaced  int
		wantClaims  int
		wantFirst   []uint64 // if set: each request's first, from start
		wantRetried int
	}{
		{name: "one-claim", reqs: ks(1, 16, 3), hybrid: true, start: 5 * ms, wantPlaced: 3, wantClaims: 1,
			wantFirst: []uint64{0, 1, 17}},
		{name: "singles-across-boundary", reqs: ks(1, 1, 1), hybrid: true, start: 6*ms - 2, wantPlaced: 3, wantClaims: 1,
			wantFirst: []uint64{0, 1, 2}},
		{name: "range-moves-rest-follow", reqs: ks(1, 10, 1), hybrid: true, start: 6*ms - 5, wantPlaced: 3, wantClaims: 2,
			wantFirst: []uint64{0, 12, 22}},
		{name: "counter-spans", reqs: ks(1, 10, 1), start: 6*ms - 5, wantPlaced: 3, wantClaims: 1,
			wantFirst: []uint64{0, 1, 11}},
		{name: "big-ranges-split-claims", reqs: ks(many(5, spec.FaSSTMaxRange)...), hybrid: true, start: 5 * ms,
			wantPlaced: 5, wantClaims: 3},
		{name: "others-claim-between", reqs: ks(100, 100, 100), hybrid: true, start: 6*ms - 150, gap: 7, wantPlaced: 3, wantClaims: 2},
		{name: "refused-first", reqs: ks(1, 2), hybrid: true, start: ms, refuseAt: 1, wantPlaced: 0, wantClaims: 1},
		{name: "refused-later", reqs: ks(many(3, spec.FaSSTMaxRange)...), hybrid: true, start: ms, refuseAt: 2, wantPlaced: 2, wantClaims: 2},
		// Every fresh claim lands just below a boundary (a gap of a
		// millisecond less the claim): nothing fits, and layout gives up.
		{name: "gives-up", reqs: ks(10), hybrid: true, start: 6*ms - 5, gap: ms - 10, wantPlaced: 0, wantClaims: claim.MaxRetries,
			wantRetried: claim.MaxRetries},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeClaims{next: c.start, gap: c.gap, refuseAt: c.refuseAt}
			placed, retried := layout(c.reqs, c.hybrid, f.claim)
			if placed != c.wantPlaced || f.calls != c.wantClaims || retried != c.wantRetried {
				t.Fatalf("placed %d in %d claims (%d retried), want %d in %d (%d)", placed, f.calls, retried, c.wantPlaced, c.wantClaims, c.wantRetried)
			}
			for _, n := range f.sizes {
				if n > claim.MaxClaim {
					t.Fatalf("a claim of %d values, above %d", n, claim.MaxClaim)
				}
			}
			var prevEnd uint64
			for i, r := range c.reqs[:placed] {
				if r.first < prevEnd || r.first < c.start || r.first+uint64(r.k) > f.next {
					t.Fatalf("request %d at start+%d for %d values: overlaps or outside the claims", i, r.first-c.start, r.k)
				}
				if c.hybrid && spec.CrossesMillisecond(r.first, r.k) {
					t.Fatalf("request %d (start+%d, %d values) spans a millisecond", i, r.first-c.start, r.k)
				}
				if c.wantFirst != nil && r.first-c.start != c.wantFirst[i] {
					t.Fatalf("request %d at start+%d, want +%d", i, r.first-c.start, c.wantFirst[i])
				}
				prevEnd = r.first + uint64(r.k)
			}
		})
	}
}
