package fasst

import "github.com/seqd/seqd/internal/claim"

// layout is claim.Layout for the mode's pending requests.
func layout(reqs []pending, hybrid bool, claimFn func(n int) (uint64, bool)) (placed, retried int) {
	return claim.Layout(reqs, pendingRef, hybrid, claimFn)
}

func pendingRef(r *pending) (int, *uint64) { return r.k, &r.first }
