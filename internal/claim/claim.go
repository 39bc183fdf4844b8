// Package claim is how a CPU mode's worker claims values for a batch it
// has received: once, from the oracle, retrying while persistence lags,
// and giving the batch up rather than answering it late (spec.MaxResidence:
// a late answer could match a tag or sequence number the client has
// reused). The CPU modes share it through package internal/worker. The
// oracle it claims from is a dataplane.Claimer.
package claim

import (
	"errors"
	"runtime"
	"time"

	"github.com/seqd/seqd/dataplane"
)

// AtClaimer is a dataplane.Claimer that also takes the caller's reading
// of the wall clock (Unix milliseconds) for the claim, instead of
// reading it again (oracle.Oracle's ClaimAt).
type AtClaimer interface {
	dataplane.Claimer
	ClaimAt(n int, now int64) (first uint64, err error)
}

// At claims from an AtClaimer with the reading Now: the
// dataplane.Claimer a worker hands Batch after it read the clock for the
// batch.
type At struct {
	O   AtClaimer
	Now int64
}

// Claim implements dataplane.Claimer.
func (a *At) Claim(n int) (uint64, error) { return a.O.ClaimAt(n, a.Now) }

// Current implements dataplane.Claimer.
func (a *At) Current() uint64 { return a.O.Current() }

var _ dataplane.Claimer = (*At)(nil)

// Outcome says how a batch claim ended.
type Outcome uint8

// Outcomes.
const (
	Claimed Outcome = iota // first holds the batch's values
	Failed                 // the oracle refused with an error other than behind
	Expired                // the batch grew too old (or the worker stopped) while the oracle was behind
)

// Batch claims n values from o for a batch, retrying while o returns
// behind (persistence lags): it spins a while, then sleeps briefly,
// until expired reports that the batch may no longer be answered. It
// returns the first value, how often o was behind (stalls), the outcome,
// and, for Failed, the oracle's error.
func Batch(o dataplane.Claimer, behind error, n int, expired func() bool) (first uint64, stalls int, out Outcome, err error) {
	for spins := 0; ; spins++ {
		first, err := o.Claim(n)
		if err == nil {
			return first, stalls, Claimed, nil
		}
		if behind == nil || !errors.Is(err, behind) {
			return 0, stalls, Failed, err
		}
		stalls++
		if expired() {
			return 0, stalls, Expired, nil
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}
