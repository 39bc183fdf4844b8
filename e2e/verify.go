// Package e2e holds seqd's end-to-end tests and the Verifier they share.
package e2e

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Call is one completed call: who made it, when it started and returned
// (monotonic), and the value it got.
type Call struct {
	Caller     int
	Start, End time.Duration
	Value      uint64
}

// Verifier checks a history of calls for seqd's invariants: every value
// unique, each caller's values increasing, and real-time order (a call
// that started after another returned got a larger value).
type Verifier struct {
	mu    sync.Mutex
	calls []Call
}

// Record adds a call. It is safe for concurrent use.
func (v *Verifier) Record(c Call) {
	v.mu.Lock()
	v.calls = append(v.calls, c)
	v.mu.Unlock()
}

// Len is the number of calls recorded.
func (v *Verifier) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.calls)
}

// Check returns the first violation found, or nil.
func (v *Verifier) Check() error {
	v.mu.Lock()
	calls := append([]Call(nil), v.calls...)
	v.mu.Unlock()
	seen := make(map[uint64]Call, len(calls))
	last := map[int]Call{}
	for _, c := range calls { // per caller, in recording order
		if p, dup := seen[c.Value]; dup {
			return fmt.Errorf("value %d handed out twice: %+v and %+v", c.Value, p, c)
		}
		seen[c.Value] = c
		if p, ok := last[c.Caller]; ok && c.Value <= p.Value {
			return fmt.Errorf("caller %d went backwards: %d then %d", c.Caller, p.Value, c.Value)
		}
		last[c.Caller] = c
	}
	// Real time: sort by start; for each call, every call that ended
	// before it started must have a smaller value. Sweep by end time,
	// keeping the largest value among calls ended so far.
	byEnd := append([]Call(nil), calls...)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
	sort.Slice(calls, func(i, j int) bool { return calls[i].Start < calls[j].Start })
	var maxEnded Call
	have := false
	j := 0
	for _, c := range calls {
		for j < len(byEnd) && byEnd[j].End < c.Start {
			if !have || byEnd[j].Value > maxEnded.Value {
				maxEnded, have = byEnd[j], true
			}
			j++
		}
		if have && c.Value <= maxEnded.Value {
			return fmt.Errorf("real-time order broken: %+v returned before %+v started, with a value not below it", maxEnded, c)
		}
	}
	return nil
}
